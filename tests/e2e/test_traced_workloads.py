"""`vcpulab workloads` with traced programs: the list (table and --json, with `kind`), `show` of a
traced program (readable and --json, by full name or unique suffix), unknown names and broken
manifests as one-line errors, and an empty traces directory. A temp traces directory
($VCPULAB_TRACES) holds a hand-made manifest over a small trace of the native pipeline (recorded
once per session). The commands run in-process through cli.main (a process each would take a
second), but for one check as a process."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO, Result, one_line_error, run_cli
from vcpulab import cli

PIPELINE = REPO / "target" / "native" / "bin" / "pipeline"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="session")
def pipeline_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One small trace of the native pipeline (2 stages of 1 thread, 100 items): ~40 kB, 1 s."""
    if not PIPELINE.is_file():
        pytest.skip(f"{PIPELINE} not built (make native)")
    out = tmp_path_factory.mktemp("pipeline") / "pipeline.vtrace"
    args = ("--stages", "2", "--threads-per-stage", "1", "--items", "100", "--work-us", "20")
    r = run_cli("trace", "-o", out, "--", PIPELINE, *args, cwd=out.parent)
    assert r.code == 0, r.err
    return out


def make_traces(root: Path, programs: dict[str, tuple[int, ...]], cache: Path) -> Path:
    """A traces directory: for each ``suite.program``, t<N>.vtrace for each N (``cache``, a small
    trace, copied) and a manifest with one [[trace]] per N."""
    sha = hashlib.sha256(cache.read_bytes()).hexdigest()
    for name, counts in programs.items():
        suite, program = name.split(".", 1)
        d = root / suite / program
        d.mkdir(parents=True)
        lines = [
            f'program = "{name}"',
            'source = "https://example.org/parsec-3.0.git"',
            f'commit = "{COMMIT}"',
            'compiler = "gcc 12.2.0"',
            'cflags = "-O2 -fcommon"',
            'input = "100 items through a 2-stage pipeline (test stand-in)"',
            'args = ["--items", "100"]',
        ]
        for n in counts:
            shutil.copy(cache, d / f"t{n}.vtrace")
            lines += [
                "",
                "[[trace]]",
                f"threads = {n}",
                f'file = "t{n}.vtrace"',
                f'sha256 = "{sha}"',
                "cpus = 2",
                'kernel = "6.1.0-test"',
                'glibc = "2.36"',
                "format = 1",
                "untraced = { wall_s = 0.5, user_s = 0.75, sys_s = 0.25 }",
                "traced = { wall_s = 1.25 }",
            ]
        (d / "manifest.toml").write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture
def traces(tmp_path: Path, pipeline_trace: Path) -> Path:
    return make_traces(tmp_path / "traces", {"parsec.dedup": (1, 4), "splash2x.fft": (2,)}, pipeline_trace)


@pytest.fixture
def cli_with(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Any:
    """``cli_with(root, *args)``: ``vcpulab ARGS`` in-process with $VCPULAB_TRACES = root."""

    def run(root: Path, *args: object) -> Result:
        monkeypatch.setenv("VCPULAB_TRACES", str(root))
        capsys.readouterr()
        code = cli.main([str(a) for a in args])
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return run


def test_the_list_has_the_traced_programs(cli_with: Any, traces: Path) -> None:
    r = cli_with(traces, "workloads", "--json")
    assert r.code == 0, r.err
    items = r.json_lines()
    kinds = {w["name"]: w["kind"] for w in items}
    assert kinds["lock"] == kinds["parsec.dedup"] == "profile"
    assert kinds["traced.parsec.dedup"] == kinds["traced.splash2x.fft"] == "trace"
    dedup = next(w for w in items if w["name"] == "traced.parsec.dedup")
    assert dedup["threads"] == [1, 4] and dedup["commit"] == COMMIT and dedup["suite"] == "parsec"
    assert "test stand-in" in dedup["input"]
    assert [w["kind"] for w in items] == sorted((w["kind"] for w in items), key=["profile", "trace"].index)
    table = cli_with(traces, "workloads")
    assert table.code == 0, table.err
    assert "traced programs" in table.out and "traced.parsec.dedup" in table.out and "traced.splash2x.fft" in table.out
    assert "1, 4" in table.out and COMMIT[:12] in table.out and COMMIT not in table.out
    assert "lock" in table.out and not table.err


@pytest.mark.parametrize("name", ["traced.parsec.dedup", "traced.dedup"])
def test_show_prints_the_manifest(cli_with: Any, traces: Path, name: str) -> None:
    r = cli_with(traces, "workloads", "show", name)
    assert r.code == 0, r.err
    for text in ("traced.parsec.dedup", "manifest.toml", COMMIT, "gcc 12.2.0", "-O2 -fcommon", "test stand-in"):
        assert text in r.out, text
    rows = [line for line in r.out.splitlines() if "t1.vtrace" in line or "t4.vtrace" in line]
    assert len(rows) == 2, r.out
    sha = json.loads(cli_with(traces, "workloads", "show", name, "--json").out)["trace"][0]["sha256"]
    assert sha[:12] in rows[0] and sha not in r.out
    assert "6.1.0-test" in rows[0] and "2.36" in rows[0] and "kB" in rows[0]
    assert "0.500" in rows[0] and "1.000" in rows[0] and "1.250" in rows[0]  # wall, CPU (user + sys), traced wall


def test_show_json_is_the_manifest(cli_with: Any, traces: Path) -> None:
    r = cli_with(traces, "workloads", "show", "traced.fft", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["name"] == "traced.splash2x.fft" and doc["kind"] == "trace" and doc["program"] == "splash2x.fft"
    assert doc["commit"] == COMMIT and doc["args"] == ["--items", "100"]
    assert [t["threads"] for t in doc["trace"]] == [2]
    assert doc["trace"][0]["untraced"]["wall_s"] == 0.5 and doc["trace"][0]["file"] == "t2.vtrace"


def test_show_of_a_profile_still_prints_toml(cli_with: Any, traces: Path) -> None:
    r = cli_with(traces, "workloads", "show", "lock")
    assert r.code == 0 and "[" in r.out and not r.out.lstrip().startswith("{"), r.err
    j = cli_with(traces, "workloads", "show", "lock", "--json")
    assert j.code == 0 and json.loads(j.out)["kind"] == "profile", j.err


def test_unknown_and_ambiguous_names_are_one_line_errors(cli_with: Any, traces: Path, tmp_path: Path) -> None:
    line = one_line_error(cli_with(traces, "workloads", "show", "traced.dedupp"))
    assert "no traced program 'traced.dedupp'" in line and "did you mean 'traced.parsec.dedup'" in line
    line = one_line_error(cli_with(traces, "workloads", "show", "traced.ferret"))
    assert "no traced program 'traced.ferret'" in line and "traced.parsec.dedup" in line  # the known ones
    both = make_traces(
        tmp_path / "both",
        {"parsec.raytrace": (1,), "splash2x.raytrace": (1,)},
        traces / "parsec" / "dedup" / "t1.vtrace",
    )
    line = one_line_error(cli_with(both, "workloads", "show", "traced.raytrace"))
    assert "ambiguous" in line and "traced.parsec.raytrace" in line and "traced.splash2x.raytrace" in line


@pytest.mark.parametrize(
    ("manifest", "expected"),
    [
        ('program = "splash2x.fft"\n[[trace]]\nthreads = "x"\n', "trace[0]: field 'threads': expected a positive"),
        ('program = "splash2x.fft"\n[[trace\n', "not valid TOML"),
        ('program = "parsec.fft"\n', "field 'program': expected 'splash2x.fft'"),
    ],
)
def test_a_broken_manifest_is_one_line_exit_2(cli_with: Any, traces: Path, manifest: str, expected: str) -> None:
    (traces / "splash2x" / "fft" / "manifest.toml").write_text(manifest)
    for args in (("workloads",), ("workloads", "--json"), ("workloads", "show", "traced.dedup")):
        r = cli_with(traces, *args)
        line = one_line_error(r)
        assert r.code == 2 and "manifest.toml" in line and expected in line, line


def test_without_traces_the_builtins_still_list(cli_with: Any, tmp_path: Path) -> None:
    for root in (tmp_path / "missing", tmp_path / "empty"):
        if root.name == "empty":
            root.mkdir()
        r = cli_with(root, "workloads", "--json")
        assert r.code == 0
        items = r.json_lines()
        assert items and all(w["kind"] == "profile" for w in items)
        assert r.err.count("\n") == 1 and "no traced programs" in r.err and str(root) in r.err
        table = cli_with(root, "workloads")
        assert table.code == 0 and "lock" in table.out and "traced programs" not in table.out
        line = one_line_error(cli_with(root, "workloads", "show", "traced.dedup"))
        assert "no traced program 'traced.dedup'" in line


def test_as_a_process(traces: Path) -> None:
    r = run_cli(
        "workloads", "show", "traced.dedup", "--json", cwd=traces.parent, env_extra={"VCPULAB_TRACES": str(traces)}
    )
    assert r.code == 0 and json.loads(r.out)["name"] == "traced.parsec.dedup", r.err
    (traces / "parsec" / "dedup" / "manifest.toml").write_text("program = 1\n")
    line = one_line_error(run_cli("workloads", cwd=traces.parent, env_extra={"VCPULAB_TRACES": str(traces)}))
    assert "manifest.toml: field 'program': expected a non-empty string" in line


def test_record_and_compare_errors_are_one_line_exit_2(cli_with: Any, traces: Path, tmp_path: Path) -> None:
    line = one_line_error(r := cli_with(traces, "workloads", "compare", "traced.nope"))
    assert r.code == 2 and "no traced program 'traced.nope'" in line, line
    (tmp_path / "empty").mkdir()
    line = one_line_error(r := cli_with(traces, "workloads", "record", "--root", tmp_path / "empty"))
    assert r.code == 2 and "no program tables in" in line and "internal error" not in line, line
    line = one_line_error(r := cli_with(traces, "workloads", "record", "--threads", "4,0"))
    assert r.code == 2 and "--threads: expected thread counts from 1 to 1024 (got 0)" in line, line


def test_compare_writes_the_table_into_the_doc_with_growth_from_four_threads(
    cli_with: Any, tmp_path: Path, pipeline_trace: Path
) -> None:
    root = make_traces(tmp_path / "traces", {"splash2x.fft": (1, 4, 8)}, pipeline_trace)
    doc = tmp_path / "profiles.md"
    doc.write_text("# Profiles\n\nkept text\n")
    out = tmp_path / "rows.json"
    r = cli_with(root, "workloads", "compare", "fft", "--markdown", doc, "--json", out, "-j", "1")
    assert r.code == 0, r.err
    text = doc.read_text()
    assert text.startswith("# Profiles\n\nkept text\n") and "| `splash2x.fft` | 8 |" in text
    assert "sync waits ×base" in text and "scale-free flags" in text
    rows = {row["threads"]: row for row in json.loads(out.read_bytes())}
    assert sorted(rows) == [1, 4, 8] and rows[1]["growth"] == rows[4]["growth"] == {}
    # The same trace at 4 and 8 threads: neither its recorded waits nor its replay's grow (each
    # is None instead when this session's recording of the test pipeline made fewer than 20).
    # fft's profile, a barrier program, makes N - 1 waits per barrier episode: 7/3 as many at
    # 8 threads as at 4. So the waits' growth is flagged whenever there is a reference.
    growth = rows[8]["growth"]
    recorded, untraced = growth["real blocks"]
    assert recorded in (None, 1.0) and untraced is None and growth["blocks"][1] in (None, 1.0)
    assert growth["blocks"][0] == pytest.approx(7 / 3, rel=0.1)
    reference = recorded or growth["blocks"][1]
    assert rows[8]["scale_free_flags"] == (["waits growth"] if reference else [])
    # Run again: the block is replaced, not appended.
    assert cli_with(root, "workloads", "compare", "fft", "--markdown", doc, "-j", "1").code == 0
    assert doc.read_text() == text


def test_running_a_trace_marked_not_replayable_says_so(cli_with: Any, tmp_path: Path, pipeline_trace: Path) -> None:
    """A manifest's `replayable = false` (freqmine's inline futexes, ebizzy's fixed time) does
    not stop a run, but the run says that its results do not stand for the program, and why."""
    root = make_traces(tmp_path / "traces", {"system.ebizzy": (2,), "parsec.dedup": (2,)}, pipeline_trace)
    manifest = root / "system" / "ebizzy" / "manifest.toml"
    text = manifest.read_text().replace(
        "[[trace]]", 'replayable = false\nnot_replayable = "a fixed-time test"\n\n[[trace]]', 1
    )
    manifest.write_text(text)
    r = cli_with(root, "run", "--workload", "traced.system.ebizzy", "--scenario", "UC", "--vcpus", "2", "--no-store")
    assert r.code == 0, r.err
    assert (
        "traced.system.ebizzy is marked not replayable (a fixed-time test)" in r.err and "its profile, ebizzy" in r.err
    )
    plain = cli_with(root, "run", "--workload", "traced.parsec.dedup", "--scenario", "UC", "--vcpus", "2", "--no-store")
    assert plain.code == 0 and "not replayable" not in plain.err, plain.err
