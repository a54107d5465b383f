"""The replay of a trace keeps the synchronisation semantics of the traced program: each pattern
of `tracer/workloads/sync_semantics.c` is traced, run natively and replayed (`vcpulab fidelity`),
and must replay without a deadlock the real program did not have, close to its measured time."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, run_cli

PROGRAM = REPO / "target" / "native" / "bin" / "sync_semantics"


@pytest.fixture(scope="module", autouse=True)
def native() -> None:
    subprocess.run(["make", "-s", "-C", str(REPO), "native"], check=True, capture_output=True)


# 150,000 iterations of work() are 0.1-0.3 ms on current x86 cores; no calibration run, so the
# traced run is the measured section alone.
ARGS = ["--rounds", "100", "--work-iters", "150000"]


@pytest.mark.parametrize("pattern", ["join-under-lock", "signal-before-wait", "broadcast", "barrier"])
def test_a_pattern_replays_without_deadlock_and_close_to_its_time(pattern: str, tmp_path: Path) -> None:
    out = tmp_path / "f.json"
    r = run_cli("fidelity", "--runs", 1, "-o", out, "--", PROGRAM, "--pattern", pattern, *ARGS)
    # join-under-lock deadlocked in most replays before the replay tied a wait to every wake-up
    # that preceded its return and ordered a join under a lock after the child's last unlock.
    assert r.code == 0, r.err
    f = json.loads(out.read_text())
    # CPU time holds on a loaded machine; wall time only where the machine left the program its
    # CPUs (the documented target is 25 %, docs/bridge.md; loose here for shared CI machines).
    assert abs(f["cpu_error"]) < 0.5, f
    if f["wall_time_comparable"]:
        assert abs(f["error"]) < 0.5, f
