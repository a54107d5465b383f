"""Issue 21, spec and engine hardening: misspelt keys, type errors in the user's words, size
maxima, work that takes no virtual time, and Ctrl-C during an in-process (-j 1) simulation."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import tomllib
from pathlib import Path

import pytest

from conftest import RunCli, one_line_error, spawn_cli

QUICK = '[experiment]\nworkloads = ["lock"]\nscenarios = ["native"]\nvcpus = [2]\n'

ZERO_TIME = """[experiment]
workloads = ["w"]
scenarios = ["native"]
vcpus = [1]
[workloads.w]
program = [{ repeat = { times = 9000000000000000000, body = [{ compute = "0ns" }] } }]
"""


@pytest.mark.parametrize(
    ("sets", "spec_extra", "expected"),
    [
        (["workloads.lock.params.iteratons=10"], "", "did you mean 'iterations'?"),
        (["workloads.lcok.params.iters=10"], "", "did you mean 'lock'?"),
        ([], "[workloads.lcok.params]\niterations = 10\n", "did you mean 'lock'?"),
        ([], "[workloads.lock.params]\niteratons = 10\n", "did you mean 'iterations'?"),
        (["vm.halt_pol.enabled=false"], "", "did you mean 'halt_poll'?"),
    ],
)
def test_misspelt_keys_are_errors_with_the_closest_name(
    cli: RunCli, tmp_path: Path, sets: list[str], spec_extra: str, expected: str
) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text(QUICK + spec_extra)
    args: list[str] = ["run", str(spec), "--no-store"]
    for s in sets:
        args += ["--set", s]
    line = one_line_error(cli(*args))
    assert expected in line, line


def test_a_misspelt_suite_workload_and_the_quoted_form(cli: RunCli, tmp_path: Path) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text('[experiment]\nworkloads = ["parsec.dedup"]\nscenarios = ["native"]\nvcpus = [2]\n')
    line = one_line_error(cli("validate", spec, "--set", "workloads.parsec.dedupp.params.fragments=68"))
    assert "workloads.parsec.dedupp" in line and "did you mean 'parsec.dedup'?" in line, line
    r = cli("validate", spec, "--print-spec", "--set", 'workloads."parsec.dedup".params.fragments=68')
    assert r.code == 0, r.err
    doc = tomllib.loads(r.out)
    assert list(doc["workloads"]) == ["parsec.dedup"], r.out  # no stray '"parsec' / 'dedup"' tables
    fragments = doc["workloads"]["parsec.dedup"]["params"]["fragments"]
    assert fragments == 68 or fragments.get("value") == 68, fragments


def test_overriding_a_field_that_read_a_parameter(cli: RunCli, tmp_path: Path) -> None:
    """ebizzy's documented mmap mode replaces the field that read params.mmap_threshold; the
    built-in's parameter is dropped, not reported as the user's misspelling."""
    spec = tmp_path / "s.toml"
    spec.write_text('[experiment]\nworkloads = ["ebizzy"]\nscenarios = ["native"]\nvcpus = [2]\n')
    mmap_mode = [
        "--set",
        'workloads.ebizzy.heap.mmap_threshold="128KiB"',
        "--set",
        "workloads.ebizzy.params.mm_sections=1",
    ]
    r = cli("validate", spec, "--print-spec", *mmap_mode)
    assert r.code == 0, r.err
    ebizzy = tomllib.loads(r.out)["workloads"]["ebizzy"]
    assert ebizzy["heap"]["mmap_threshold"] == "128KiB"
    assert "mmap_threshold" not in ebizzy["params"] and "trim_threshold" in ebizzy["params"], ebizzy["params"]
    line = one_line_error(cli("validate", spec, *mmap_mode, "--set", "workloads.ebizzy.params.recrds=5"))
    assert "workloads.ebizzy.params.recrds" in line and "did you mean 'records'?" in line, line


def test_type_errors_speak_the_users_words(cli: RunCli, tmp_path: Path) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text(QUICK)
    line = one_line_error(cli("validate", spec, "--set", "vm.halt_poll=false"))
    assert "vm.halt_poll" in line and "expected a table with fields" in line and "vm.halt_poll.enabled = false" in line
    assert "struct" not in line and "HaltPollSpec" not in line, line


@pytest.mark.parametrize(
    ("sets", "field", "words"),
    [
        (["experiment.threads=10000000"], "experiment.threads", "1..=4096"),
        (["experiment.oc_vms=100000"], "experiment.oc_vms", "2..=64"),
        (["machine.cores_per_socket=100000"], "machine.cores_per_socket", "1..=1024"),
        (
            ["experiment.seeds=[" + ",".join(str(i) for i in range(1, 10_002)) + "]"],
            "experiment.seeds",
            "at most 10000",
        ),
    ],
)
def test_sizes_are_bounded(cli: RunCli, tmp_path: Path, sets: list[str], field: str, words: str) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text(QUICK)
    args: list[str] = ["validate", str(spec)]
    for s in sets:
        args += ["--set", s]
    line = one_line_error(cli(*args))
    assert field in line and words in line, line


def test_zero_time_loops_end_at_the_step_limit(cli: RunCli, tmp_path: Path) -> None:
    spec = tmp_path / "z.toml"
    spec.write_text(ZERO_TIME + "[limits]\nmax_steps = 3000000\n")
    line = one_line_error(cli("run", spec, "--no-store", "-j", "1"), code=3)
    assert "max_steps" in line, line
    spec.write_text(ZERO_TIME.replace('[{ compute = "0ns" }]', "[]"))
    line = one_line_error(cli("validate", spec))
    assert "repeat.body" in line and "at least one operation" in line, line


@pytest.mark.parametrize("value", ["0", "-1", '"x"'])
def test_a_bad_step_limit_is_one_line(cli: RunCli, value: str) -> None:
    line = one_line_error(cli("validate", "--workload", "lock", "--set", f"limits.max_steps={value}"))
    assert "limits.max_steps" in line, line


def test_the_issues_zero_time_loop_ends_under_the_default_limits(cli: RunCli, tmp_path: Path) -> None:
    # The exact program of the report, with nothing but the defaults: it used to run for ever.
    # About 10^9 steps at ~10^8 steps/s: a few seconds, more on a busy machine (the timeout is
    # only a guard against a hang).
    spec = tmp_path / "z.toml"
    spec.write_text(ZERO_TIME)
    line = one_line_error(cli("run", spec, "--no-store", "-j", "1", timeout=300), code=3)
    assert "limits.max_steps" in line, line


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_ctrl_c_stops_an_in_process_zero_time_loop(tmp_path: Path) -> None:
    spec = tmp_path / "z.toml"
    spec.write_text(ZERO_TIME)
    env = dict(os.environ, VCPULAB_RESULTS=str(tmp_path / "results"))
    proc = spawn_cli("run", spec, "--no-store", "-j", 1, cwd=tmp_path, stdout=subprocess.PIPE, env=env)
    try:
        # Wait until it has used some CPU beyond start-up: it is inside the simulation.
        deadline = time.monotonic() + 120
        while _cpu_seconds(proc.pid) < 3.0 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)  # a hang guard only
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        pytest.fail(f"still running 60 s after Ctrl-C; its stderr:\n{err}")
    assert proc.returncode == 130, err
    assert "Traceback" not in err and len(err.splitlines()) == 1 and err.startswith("vcpulab: error: interrupted"), err


@pytest.mark.parametrize(
    "args",
    [
        ["--set", ".".join(["a"] * 20_000) + "=1"],  # was SIGSEGV: exit 139, nothing said
        ["--set", "vm.x=" + "[" * 20_000 + "]" * 20_000],  # was read as a string of brackets
        ["--set", "vm.x=" + "{a=" * 20_000 + "1" + "}" * 20_000],
    ],
    ids=["set-path", "set-array", "set-inline-table"],
)
def test_a_deeply_nested_override_is_one_line_like_a_deep_spec_file(
    cli: RunCli, tmp_path: Path, args: list[str]
) -> None:
    repo = Path(__file__).resolve().parents[2]
    deep_file = tmp_path / "deep.toml"
    deep_file.write_text(".".join(["a"] * 20_000) + " = 1\n")
    for r in (cli("validate", repo / "examples" / "quickstart.toml", *args), cli("validate", deep_file)):
        line = one_line_error(r)
        assert "nested more than 64 levels deep" in line and len(line) < 400, line[:500]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deep.toml"]
