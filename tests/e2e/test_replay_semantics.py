"""The replay of a trace keeps the synchronisation semantics of the traced program: each pattern
of `tracer/workloads/sync_semantics.c` is traced, run natively and replayed (`vcpulab fidelity`),
and must replay without a deadlock the real program did not have, close to its measured time."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, run_cli

# Times real programs on this machine: run alone, after the rest (make test).
pytestmark = pytest.mark.measures

PROGRAM = REPO / "target" / "native" / "bin" / "sync_semantics"


@pytest.fixture(scope="module", autouse=True)
def native() -> None:
    subprocess.run(["make", "-s", "-C", str(REPO), "native"], check=True, capture_output=True)


# 150,000 iterations of work() are 0.1-0.3 ms on current x86 cores; no calibration run, so the
# traced run is the measured section alone.
ARGS = ["--rounds", "100", "--work-iters", "150000"]


@pytest.mark.parametrize("pattern", ["join-under-lock", "signal-before-wait", "broadcast", "barrier", "futex"])
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
    # Every wait is one the tracer sees (the futex queue's through libc's syscall()): nothing
    # is left blocked for no traced reason, so there is no warning (the product's rule: 10 % of
    # the threads' time). The bound on the program's CPU time is looser than that rule: on a
    # loaded machine the run-queue time the tracer subtracts is sampled, and 13 ms of 98 ms was
    # left over once in CI; an untraced futex queue would leave most of the workers' waiting.
    assert f["warning"] is None and f["blocked_untraced_s"] < 0.5 * f["measured_cpu_s"][0], f
    assert f["replayed_shootdowns"] >= 0 and "shootdowns" in r.out


def test_raw_futex_waits_are_traced_and_replayed(tmp_path: Path) -> None:
    trace = tmp_path / "f.vtrace"
    r = run_cli("trace", "-o", trace, "--", PROGRAM, "--pattern", "futex", *ARGS)
    assert r.code == 0, r.err
    assert json.loads(r.out)["waits"] > 0  # the workers did sleep in FUTEX_WAIT
    out = tmp_path / "p.json"
    r = run_cli("predict", trace, "--scenario", "UC", "-o", out)
    assert r.code == 0, r.err
    rep = json.loads(out.read_text())["trace"]["replay"]
    assert rep["futex_waits"] > 0 and rep["wakeups_matched"] > 0, rep


def test_waits_the_tracer_cannot_see_are_measured_replayed_and_warned_about(tmp_path: Path) -> None:
    """libgomp's threads wait at barriers with inline futex system calls (x86-64), which no
    LD_PRELOAD library sees: the time shows as blocked in untraced calls (the threads'
    off-CPU time less their run-queue time), is replayed as sleeps, and is warned about."""
    src = tmp_path / "omp.c"
    src.write_text(
        "#include <stdint.h>\n#include <stdio.h>\n"
        "static uint64_t work(uint64_t n) { uint64_t x = n; for (uint64_t i = 0; i < n; i++) { x ^= x << 13; "
        "x ^= x >> 7; x ^= x << 17; } return x; }\n"
        "int main(void) { uint64_t s = 0;\n for (int r = 0; r < 100; r++) {\n"
        "#pragma omp parallel for reduction(^:s) schedule(static)\n"
        "  for (int i = 0; i < 4; i++) s ^= work(100000 + (uint64_t)((i * 7919 + r * 104729) % 5) * 60000);\n"
        ' }\n printf("%llu\\n", (unsigned long long)s); return 0; }\n'
    )
    exe = tmp_path / "omp"
    built = subprocess.run(["gcc", "-O2", "-fopenmp", "-o", str(exe), str(src)], capture_output=True, text=True)
    if built.returncode != 0:
        pytest.skip(f"gcc -fopenmp cannot build here: {built.stderr.strip()[-200:]}")
    env = {"OMP_NUM_THREADS": "4", "OMP_WAIT_POLICY": "passive"}
    out = tmp_path / "f.json"
    r = run_cli("fidelity", "--runs", 1, "-o", out, "--", exe, env_extra=env)
    assert r.code == 0, r.err
    f = json.loads(out.read_text())
    assert f["blocked_untraced_s"] > 0 and f["warning"] is not None, f
    assert "blocked in calls the tracer does not see" in " ".join(r.err.split())
    # The worker pool never exits (the process's exit kills it): its CPU time still reaches the
    # replay through the THREAD_STATS record the exiting thread writes for it.
    assert abs(f["cpu_error"]) < 0.5, f
