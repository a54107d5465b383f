"""What the command reads from the user: spec files (only bounded regular files, never
blocking), experiment flags (range-checked and named in errors), and error lines that stay
one printable line whatever the input holds; `validate` of a large plan."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import one_line_error, run_cli

# Generous: a regression (reading /dev/zero, blocking on a FIFO) must fail, not hang the suite.
TIMEOUT = 60


def test_a_spec_that_is_not_a_regular_file_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "spec.toml"
    os.mkfifo(fifo)  # no writer: opening it for reading the usual way would block forever
    line = one_line_error(run_cli("validate", fifo, timeout=TIMEOUT))
    assert f"'{fifo}'" in line and "not a regular file (a FIFO)" in line
    line = one_line_error(run_cli("validate", "/dev/zero", timeout=TIMEOUT))
    assert "'/dev/zero'" in line and "not a regular file" in line
    line = one_line_error(run_cli("run", tmp_path, timeout=TIMEOUT))
    assert f"'{tmp_path}'" in line and "is a directory" in line


def test_a_spec_larger_than_16_mib_is_refused(tmp_path: Path) -> None:
    huge = tmp_path / "huge.toml"
    with open(huge, "wb") as f:
        f.truncate(16 * 1024 * 1024 + 1)  # sparse: costs no disk
    line = one_line_error(run_cli("validate", huge, timeout=TIMEOUT))
    assert f"'{huge}'" in line and "larger than 16 MiB" in line
    # At the limit it is read (and then judged as TOML).
    with open(huge, "r+b") as f:
        f.truncate(16 * 1024 * 1024)
    line = one_line_error(run_cli("validate", huge, timeout=TIMEOUT))
    assert "16 MiB" not in line


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (("--threads", "99999999999999999999"), "--threads"),
        (("--threads", "0"), "--threads"),
        (("--threads", "-5"), "--threads"),
        (("--vcpus", "4,99999999999"), "--vcpus"),
        (("--vcpus", "-1"), "--vcpus"),
        (("--seed", "-1"), "--seed"),
        (("--seed", str(2**63)), "--seed"),
        (("--seed", "1,18446744073709551615"), "--seed"),
    ],
)
@pytest.mark.parametrize("spec", [False, True], ids=["flags", "spec"])
def test_out_of_range_flags_are_named_at_parse_time(args: tuple[str, ...], flag: str, spec: bool) -> None:
    base = ["validate", "examples/quickstart.toml"] if spec else ["validate", "--workload", "lock"]
    line = one_line_error(run_cli(*base, *args, cwd=Path(__file__).resolve().parents[2]))
    assert f"argument {flag}: expected" in line and "TOML" not in line and "<flags>" not in line, line
    assert "--set" not in line


@pytest.mark.parametrize("spec", [False, True], ids=["flags", "spec"])
def test_a_flag_value_the_simulator_refuses_is_told_against_the_flag(spec: bool) -> None:
    base = ["validate", "examples/quickstart.toml"] if spec else ["validate", "--workload", "lock"]
    repo = Path(__file__).resolve().parents[2]
    line = one_line_error(run_cli(*base, "--vcpus", "4096", cwd=repo))
    assert line.startswith("vcpulab: error: --vcpus: experiment.vcpus[0]: expected 1..="), line
    line = one_line_error(run_cli(*base, "--workload", "nope", cwd=repo))
    assert line.startswith("vcpulab: error: --workload: experiment.workloads"), line
    assert "unknown workload 'nope'" in line
    # A --set of the same field comes after the flag: the error is the --set's.
    line = one_line_error(run_cli(*base, "--vcpus", "4", "--set", "experiment.vcpus=[4096]", cwd=repo))
    assert "--vcpus:" not in line and "4096" in line


def test_control_characters_are_escaped_in_error_lines() -> None:
    r = run_cli("validate", "--workload", "lock", "--set", 'experiment.workloads=["a\\u0000b\\u001b[31mc\\u202ed"]')
    line = one_line_error(r)
    assert "unknown workload 'a\\x00b\\x1b[31mc\\u202ed'" in line, line
    assert not any(ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0 or ch == "\u202e" for ch in r.err.rstrip("\n"))


def test_predict_of_a_directory_says_so(tmp_path: Path) -> None:
    line = one_line_error(run_cli("predict", tmp_path))
    assert "is a directory" in line and "expected a .vtrace file" in line
    line = one_line_error(run_cli("predict", tmp_path / "missing.vtrace"))
    assert "no such trace file" in line


def test_validate_summarises_a_large_plan(tmp_path: Path) -> None:
    seeds = 5000
    spec = tmp_path / "big.toml"
    spec.write_text(
        '[experiment]\nworkloads = ["lock", "ep"]\nscenarios = ["native", "UC"]\nvcpus = [2, 4]\n'
        f"seeds = [{', '.join(str(s) for s in range(1, seeds + 1))}]\n"
    )
    cells = 2 * 2 * 2 * seeds
    r = run_cli("validate", spec, timeout=TIMEOUT)
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert len(lines) < 60, f"{len(lines)} lines"
    assert lines[-1] == f"spec OK: {cells} runs"
    dims = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in lines if line.count("│") == 4}
    assert dims["seeds"] == f"{seeds:,}" and dims["workloads"] == "2" and dims["vCPU counts"] == "2"
    assert f"and {cells - 10:,} more cells" in r.out
    # --json still lists every cell; a small plan is still listed whole.
    assert len(run_cli("validate", spec, "--json", timeout=TIMEOUT).out.splitlines()) == cells
    small = run_cli("validate", "--workload", "lock", "--vcpus", "2,4")
    assert small.code == 0 and "more cells" not in small.out and small.out.count("lock") == 8


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (
            ("run", "--workload", "lock", "--timeline", "t.json", "--timeline-max-events", str(2**70)),
            "--timeline-max-events",
        ),
        (
            ("run", "--workload", "lock", "--timeline", "t.json", "--timeline-window", "0ms:99999999999999999999s"),
            "--timeline-window",
        ),
        (("characterize-sim", "lock", "--slice", "1e30"), "--slice"),
        (("characterize-sim", "lock", "--slice", "inf"), "--slice"),
        (("characterize-sim", "lock", "--cpus", "99999999999"), "--cpus"),
        (("predict", "x.vtrace", "--vcpus", "99999999999"), "--vcpus"),
        (("oversubscription", "--rounds", "99999999999"), "--rounds"),
    ],
)
def test_huge_numbers_in_other_flags_are_named_not_overflowed(args: tuple[str, ...], flag: str, tmp_path: Path) -> None:
    line = one_line_error(run_cli(*args, cwd=tmp_path, timeout=TIMEOUT))
    assert flag in line and "internal error" not in line and "Overflow" not in line, line
