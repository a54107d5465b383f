"""Bad input: one line on stderr naming what is wrong, a non-zero exit, no traceback, no file."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import RunCli, spawn_cli

FOREVER = """\
[experiment]
workloads = ["forever"]
scenarios = ["UC"]
vcpus = [2]
seeds = [1]

[limits]
max_virtual_time = "10ms"

[workloads.forever]
description = "never finishes within the limit"
program = [{ repeat = { times = 1000000000, body = [{ compute = "1ms" }] } }]
"""

NEGATIVE = """\
[experiment]
workloads = ["neg"]
scenarios = ["native"]
vcpus = [2]

[workloads.neg]
description = "a negative duration"
program = [{ compute = -5 }]
"""

QUICK_THEN_FOREVER = """\
[experiment]
workloads = ["quick", "forever"]
scenarios = ["native", "UC"]
vcpus = [2]
seeds = [1]

[limits]
max_virtual_time = "10ms"

[workloads.quick]
description = "finishes at once"
program = [{ compute = "1ms" }]

[workloads.forever]
description = "never finishes within the limit"
program = [{ repeat = { times = 1000000000, body = [{ compute = "1ms" }] } }]
"""


@dataclass(frozen=True)
class Case:
    id: str
    args: tuple[str, ...]
    needle: str  # what the message must name (the field, the value or the file)
    code: int = 2
    files: tuple[tuple[str, str], ...] = ()


CASES = [
    Case("unknown-workload", ("run", "--workload", "nosuchwl", "--vcpus", "2"), "nosuchwl"),
    Case(
        "unknown-workload-in-spec",
        ("run", "s.toml"),
        "nosuchwl",
        files=(("s.toml", '[experiment]\nworkloads = ["nosuchwl"]\n'),),
    ),
    Case(
        "malformed-toml",
        ("run", "broken.toml"),
        "broken.toml",
        files=(("broken.toml", '[experiment\nworkloads = ["ep"]\n'),),
    ),
    Case("negative-duration", ("run", "neg.toml"), "compute", files=(("neg.toml", NEGATIVE),)),
    Case("zero-vcpus", ("run", "--workload", "ep", "--vcpus", "0"), "vcpus"),
    Case("zero-vcpus-via-set", ("run", "--workload", "ep", "--set", "experiment.vcpus=[0]"), "vcpus"),
    Case("run-limit", ("run", "forever.toml"), "limit", code=3, files=(("forever.toml", FOREVER),)),
    Case(
        "run-limit-after-good-runs",
        ("run", "mixed.toml", "--json"),
        "limit",
        code=3,
        files=(("mixed.toml", QUICK_THEN_FOREVER),),
    ),
    Case("missing-spec-file", ("run", "missing.toml"), "missing.toml"),
    Case("spec-is-a-directory", ("run", "adir"), "adir", files=(("adir/x", ""),)),
    Case("set-without-equals", ("run", "--workload", "ep", "--set", "experiment.vcpus"), "--set"),
    Case("set-unknown-field", ("run", "--workload", "ep", "--set", "experiment.no_such_field=1"), "no_such_field"),
    Case("set-bad-value", ("run", "--workload", "ep", "--set", "experiment.vcpus=banana"), "vcpus"),
    Case("unknown-scenario", ("run", "--workload", "ep", "--scenario", "XX"), "XX"),
    Case("non-integer-vcpus", ("run", "--workload", "ep", "--vcpus", "many"), "vcpus"),
    Case("no-spec-no-workload", ("run",), "--workload"),
    Case("unknown-option", ("run", "--workload", "ep", "--frobnicate"), "--frobnicate"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, cli: RunCli, tmp_path: Path) -> None:
    for name, text in case.files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    out = tmp_path / "out.jsonl"

    r = cli(*case.args, "--out", out)

    assert r.code == case.code, r.err
    lines = r.err.splitlines()
    assert len(lines) == 1, r.err
    assert lines[0].startswith("vcpulab: error: ")
    assert "Traceback" not in r.err
    assert case.needle in lines[0]
    assert not out.exists()
    # No temp file left; a run that failed part-way keeps what finished in its results store.
    after = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert not [p for p in after if p.name.endswith(".tmp")]
    assert [p for p in after if p.parts[0] != "results"] == before


@pytest.mark.parametrize(
    "args, needle",
    [
        (("workloads", "show", "nosuchwl"), "nosuchwl"),
        (("validate", "missing.toml"), "missing.toml"),
        (("validate", "--workload", "ep", "--vcpus", "0"), "vcpus"),
        (("bench", "--seconds", "-1"), "--seconds"),
        (("frobnicate",), "frobnicate"),
        ((), "command"),
    ],
)
def test_other_commands_fail_in_one_line(args: tuple[str, ...], needle: str, cli: RunCli) -> None:
    r = cli(*args)
    assert r.code == 2
    assert len(r.err.splitlines()) == 1 and r.err.startswith("vcpulab: error: "), r.err
    assert needle in r.err


def test_out_into_missing_directory(cli: RunCli, tmp_path: Path) -> None:
    r = cli("run", "--workload", "ep", "--scenario", "UC", "--vcpus", "2", "--out", tmp_path / "nodir" / "o.jsonl")
    assert r.code == 2
    assert r.err.startswith("vcpulab: error: ") and "nodir" in r.err and len(r.err.splitlines()) == 1
    assert not (tmp_path / "nodir").exists()


MANY_CELLS = """\
[experiment]
workloads = ["busy"]
scenarios = ["UC"]
vcpus = [2]
seeds = [{seeds}]

[workloads.busy]
description = "many short lock-protected sections"
objects = {{ m = "mutex" }}
program = [{{ repeat = {{ times = 200, body = [
    {{ compute = "10us" }}, {{ lock = "m" }}, {{ compute = "1us" }}, {{ unlock = "m" }},
] }} }}]
"""


def test_ctrl_c_exits_130_and_leaves_no_file(tmp_path: Path) -> None:
    spec = tmp_path / "many.toml"
    spec.write_text(MANY_CELLS.format(seeds=", ".join(str(s) for s in range(1, 5001))))
    out = tmp_path / "out.jsonl"
    # In its own session, so a hung run can be killed with its workers.
    proc = spawn_cli("run", spec, "--json", "--out", out, cwd=tmp_path, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    first = proc.stdout.readline()  # the run is under way
    assert first, proc.communicate()[1]
    proc.send_signal(signal.SIGINT)
    started = time.monotonic()
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        pytest.fail(f"still running 120 s after Ctrl-C; its stderr:\n{err}")
    assert proc.returncode == 130, err
    assert len(err.splitlines()) == 1 and err.startswith("vcpulab: error: interrupted"), err
    assert "run the same command again to continue" in err
    assert time.monotonic() - started < 60
    # No partial --out file; the cells that finished are in the results store.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["many.toml", "results"]
