"""vcpulab.traced: the manifests of the committed traces, the recorder's pure parts, the
profile-against-trace comparison's flags, and the trace runs' partial workload lists."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from vcpulab.reproduce.traces import complete_benchmarks, drop, emptied
from vcpulab.traced.compare import Rates, Row, base_threads, off, splice
from vcpulab.traced.manifest import ManifestError, Program, Trace, catalogue, load_program, repo_traces, resolve
from vcpulab.traced.record import COMMIT, SOURCE, Setup, check_table, command, manifest_text


def _manifest(tmp_path: Path, name: str, text: str) -> Path:
    suite, program = name.split(".", 1)
    d = tmp_path / suite / program
    d.mkdir(parents=True)
    (d / "manifest.toml").write_text(text)
    return d


def test_the_committed_traces_are_listed_with_their_files() -> None:
    programs = catalogue(repo_traces())
    names = {p.name for p in programs}
    assert {"parsec.dedup", "parsec.vips", "splash2x.fft"} <= names
    assert len([p for p in programs if p.replayable]) >= 22
    for p in programs:
        assert p.thread_counts, p.name
        for t in p.traces:
            assert t.path(p.directory).is_file(), (p.name, t.file)
            assert len(t.sha256) == 64 and t.entry["cpus"] >= 1
    dedup = resolve("traced.dedup", programs)
    assert dedup.name == "parsec.dedup" and {12, 16} <= set(dedup.thread_counts)


def test_a_traced_system_benchmark_is_checked_against_its_unprefixed_profile_but_never_swapped_in() -> None:
    from vcpulab._vcpulab import workloads
    from vcpulab.reproduce.traces import is_benchmark

    programs = {p.name: p for p in catalogue(repo_traces())}
    ebizzy = programs["system.ebizzy"]
    assert ebizzy.profile == "ebizzy" and programs["parsec.dedup"].profile == "parsec.dedup"
    assert ebizzy.info["source"] == "github.com/linux-test-project/ltp" and ebizzy.info["commit"]
    assert ebizzy.profile in {w["name"] for w in workloads()}  # compare runs the built-in beside the trace
    # A fixed-time program: its replay's run time is the main thread's sleep, so the suite keeps
    # the profile, and the experiments' `ebizzy` is never a benchmark to swap for a trace.
    assert not ebizzy.replayable and "fixed-time" in ebizzy.info["not_replayable"]
    assert not is_benchmark("ebizzy") and not is_benchmark("system.ebizzy") and is_benchmark("parsec.dedup")


def test_a_manifest_names_its_directory_and_each_thread_count_once(tmp_path: Path) -> None:
    d = _manifest(tmp_path, "parsec.x", 'program = "parsec.y"\n')
    with pytest.raises(ManifestError, match="field 'program': expected 'parsec.x'"):
        load_program(d)
    twice = 'program = "parsec.z"\n' + '[[trace]]\nthreads = 4\nfile = "t4.vtrace.xz"\nsha256 = "ab"\n' * 2
    with pytest.raises(ManifestError, match="4 threads is recorded twice"):
        load_program(_manifest(tmp_path, "parsec.z", twice))
    with pytest.raises(ManifestError, match="not valid TOML"):
        load_program(_manifest(tmp_path, "splash2x.bad", "program = \n"))


def test_names_resolve_like_workload_names() -> None:
    programs = [Program(n, Path("."), {}) for n in ("parsec.raytrace", "splash2x.raytrace", "parsec.dedup")]
    assert resolve("dedup", programs).name == "parsec.dedup"
    assert resolve("traced.splash2x.raytrace", programs).name == "splash2x.raytrace"
    with pytest.raises(ManifestError, match="ambiguous: traced.parsec.raytrace, traced.splash2x.raytrace"):
        resolve("traced.raytrace", programs)
    with pytest.raises(ManifestError, match="no traced program 'fft'"):
        resolve("fft", programs)


TABLE = {
    "program": "parsec.p",
    "path": "pkgs/apps/p/src",
    "compiler": "gcc 12.2.0",
    "cflags": "-O2",
    "libraries": "none",
    "args": ["-n", "{threads}", "{inputs}/in.txt"],
    "env": {"OMP_NUM_THREADS": "{threads}"},
    "input": "in.txt",
    "native_input": "big.txt",
    "thread_counts": [1, 4],
}


def test_the_recorder_fills_threads_and_inputs_and_writes_a_manifest_that_reads_back(tmp_path: Path) -> None:
    setup = Setup(bin_dir=Path("/b"), inputs_dir=Path("/i"), root=tmp_path)
    argv, env = command(TABLE, "parsec.p", 16, setup)
    assert argv == ["/b/parsec.p", "-n", "16", "/i/parsec.p/in.txt"] and env == {"OMP_NUM_THREADS": "16"}
    check_table(Path("t.toml"), TABLE)
    with pytest.raises(ManifestError, match="field 'native_input' is missing"):
        check_table(Path("t.toml"), {k: v for k, v in TABLE.items() if k != "native_input"})
    with pytest.raises(ManifestError, match="field 'commit': expected a non-empty string"):
        check_table(Path("t.toml"), {**TABLE, "commit": 5})
    entry = {"threads": 4, "file": "t4.vtrace.xz", "sha256": "0" * 64, "untraced": {"wall_s": 1.0, "futex": 3}}
    text = manifest_text("parsec.p", TABLE, [entry])
    doc = tomllib.loads(text)
    assert doc["program"] == "parsec.p" and doc["env"] == TABLE["env"] and doc["trace"] == [entry]
    # A table of another tree names its own source and commit; the PARSEC mirror's otherwise.
    assert (doc["source"], doc["commit"]) == (SOURCE, COMMIT)
    own = tomllib.loads(manifest_text("system.p", {**TABLE, "source": "example.org/x", "commit": "ab"}, [entry]))
    assert (own["source"], own["commit"]) == ("example.org/x", "ab")
    d = tmp_path / "parsec" / "p"
    d.mkdir(parents=True)
    (d / "manifest.toml").write_text(text)
    p = load_program(d)
    assert p.thread_counts == [4] and p.trace(4) == Trace(4, "t4.vtrace.xz", "0" * 64, entry) and p.replayable


def _rates(blocks: float, p50: float) -> Rates:
    return Rates(1.0, 4.0, blocks, p50, 2 * p50, blocks, 0.5, blocks, 0.0)


def test_a_rate_is_flagged_beyond_a_quarter_and_a_median_beyond_twice() -> None:
    assert not off(1.2, 1.0, 0.25) and off(1.3, 1.0, 0.25) and off(0.7, 1.0, 0.25)
    assert not off(0.4, 0.9, 0.25)  # both below one per second
    assert off(5.0, 0.0, 0.25) and not off(None, 3.0, 0.25)
    row = Row("parsec.p", 4, _rates(100.0, 10.0), _rates(120.0, 25.0), {})
    assert row.flags() == ["block p50"]
    assert Row("parsec.p", 4, _rates(200.0, 10.0), _rates(100.0, 10.0), {}).flags() == [
        "blocks/s",
        "wake-ups/s",
        "futex/s",
    ]


def _cell(blocks: float, unmaps: float, remote: float, parallelism: float = 4.0) -> Rates:
    return Rates(
        1.0, parallelism, blocks, 10.0, 20.0, blocks, remote, blocks, unmaps, sync_blocks=blocks, unmaps=unmaps
    )


def _real(switches: float) -> dict[str, dict[str, float]]:
    return {"untraced": {"vol_ctxsw": switches}}


def test_scale_free_flags_are_growth_against_the_real_program_and_remote_shares() -> None:
    # The trace's input is 5x smaller: every per-second rate is off, no scale-free quantity is.
    base = (_cell(100.0, 100.0, 0.5), _cell(20.0, 20.0, 0.5), _real(50.0))
    row = Row("parsec.p", 16, _cell(400.0, 200.0, 0.6), _cell(80.0, 40.0, 0.7), _real(200.0), base)
    assert row.growth() == {"blocks": (4.0, 4.0), "real blocks": (None, 4.0), "unmaps": (2.0, 2.0)}
    assert row.scale_free_flags() == [] and "blocks/s" in row.flags()
    # The real program is the truth for the waits: a trace growing as the profile does not help.
    row = Row("parsec.p", 16, _cell(400.0, 200.0, 0.6), _cell(80.0, 40.0, 0.7), _real(400.0), base)
    assert row.scale_free_flags() == ["waits growth"]
    # The recorded condition-variable waits come before the untraced context switches.
    recorded = (*base[:2], {"recorded": {"cond_waits": 30.0}, **_real(50.0)})
    at16 = {"recorded": {"cond_waits": 240.0}, **_real(200.0)}
    row = Row("parsec.p", 16, _cell(400.0, 200.0, 0.6), _cell(80.0, 40.0, 0.7), at16, recorded)
    assert row.growth()["real blocks"] == (8.0, 4.0) and row.scale_free_flags() == ["waits growth"]
    # Without a real count the trace decides; unmapping calls that grow apart are flagged.
    nobody: tuple[Rates, Rates, dict[str, Any]] = (base[0], base[1], {})
    row = Row("parsec.p", 16, _cell(400.0, 100.0, 0.6), _cell(160.0, 40.0, 0.7), {}, nobody)
    assert row.scale_free_flags() == ["waits growth", "unmaps growth"]
    # Wake-ups landing elsewhere, at like parallelism and counted in both runs, are flagged...
    row = Row("parsec.p", 16, _cell(400.0, 200.0, 0.2), _cell(80.0, 40.0, 0.7), _real(200.0), base)
    assert row.scale_free_flags() == ["remote wake-ups"]
    # ... not at unlike parallelism (the remote share follows the idle CPUs) ...
    row = Row("parsec.p", 16, _cell(400.0, 200.0, 0.2, 14.0), _cell(80.0, 40.0, 0.7, 3.0), _real(200.0), base)
    assert row.scale_free_flags() == []
    # ... nor when either run has fewer than MIN_COUNT wake-ups (each cell runs 1 s: count = rate).
    row = Row("parsec.p", 16, _cell(400.0, 200.0, 0.2), _cell(19.0, 40.0, 0.7), _real(200.0), base)
    assert row.scale_free_flags() == []
    # A profile base of a handful of waits measures no growth: flagged where the real program
    # synchronises enough to grow from, not where it does not either.
    few = (_cell(3.0, 0.0, 0.5), _cell(20.0, 0.0, 0.5), _real(40.0))
    row = Row("parsec.p", 16, _cell(12.0, 0.0, 0.5), _cell(80.0, 0.0, 0.5), _real(160.0), few)
    assert row.growth()["blocks"] == (None, 4.0) and row.scale_free_flags() == ["waits growth"]
    none = (_cell(3.0, 0.0, 0.5), _cell(2.0, 0.0, 0.5), _real(3.0))
    assert Row("parsec.p", 16, _cell(12.0, 0.0, 0.5), _cell(8.0, 0.0, 0.5), _real(12.0), none).scale_free_flags() == []
    assert base_threads([1, 2, 4, 16]) == 4 and base_threads([1, 2, 8]) == 2 and base_threads([1]) is None


def test_splice_replaces_the_generated_block_or_appends_it() -> None:
    doc = "# T\n\ntext\n"
    once = splice(doc, "<!-- b -->\nX\n<!-- e -->", "<!-- b -->", "<!-- e -->", "H")
    assert once.startswith(doc.rstrip("\n")) and "## H (generated)" in once and "X" in once
    twice = splice(once, "<!-- b -->\nY\n<!-- e -->", "<!-- b -->", "<!-- e -->", "H")
    assert "Y" in twice and "X" not in twice and twice.count("## H") == 1


def test_a_trace_run_leaves_out_what_was_not_traced() -> None:
    experiment = {
        "workloads": ["parsec.a", "parsec.b"],
        "corunner": "parsec.b",
        "vary": {"experiment.corunner": ["none", "parsec.b", "parsec.a"]},
    }
    assert drop(experiment, ["parsec.b"]) == {
        "workloads": ["parsec.a"],
        "corunner": "parsec.b",  # a co-runner runs as its profile
        "vary": {"experiment.corunner": ["none", "parsec.a"]},
    }
    assert emptied(drop({"workloads": ["parsec.b"]}, ["parsec.b"])) and not emptied(experiment)
    programs = [
        Program("parsec.a", Path("."), {}, (Trace(4, "t4", "x", {}),)),
        Program("parsec.b", Path("."), {"replayable": False}, (Trace(4, "t4", "x", {}),)),
    ]
    need = {"parsec.a": {4}, "parsec.b": {4}}
    assert complete_benchmarks(need, ["parsec.a", "parsec.b"], programs) == ["parsec.a"]
    assert complete_benchmarks({"parsec.a": {4, 8}}, ["parsec.a"], programs) == []
