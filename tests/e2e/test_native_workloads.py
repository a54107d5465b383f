"""The native C workloads of tracer/workloads, built with make and run on this machine.

Each program runs at a small size (well under a few seconds on 2 cores) and is checked for real
behaviour: its JSON summary line, its counts, its usage errors, and the pathology it reproduces
(heap trimming -> madvise, user-level spinning under overcommit).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "tracer" / "workloads"
BIN = REPO / "target" / "native" / "bin"
PROGRAMS = ["spin_barrier", "heap_churn", "pipeline", "parallel", "syscall_storm", "spinlock", "sync_semantics"]
TUNED_MALLOC = "glibc.malloc.trim_threshold=268435456:glibc.malloc.top_pad=67108864"

pytestmark = [
    # Times real programs on this machine: run alone, after the rest (make test).
    pytest.mark.measures,
    pytest.mark.skipif(
        not (shutil.which("make") and shutil.which("gcc") and os.uname().sysname == "Linux"),
        reason="the native workloads need Linux, make and gcc",
    ),
]


def make(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["make", "-C", str(SRC), *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    proc = make()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for prog in PROGRAMS:
        assert (BIN / prog).is_file(), prog


def two_cpus() -> set[int]:
    """At most two of the CPUs this process may use: the runs below assume a 2-core machine."""
    return set(sorted(os.sched_getaffinity(0))[:2])


def run(
    prog: str,
    *args: object,
    env: dict[str, str] | None = None,
    cpus: set[int] | None = None,
    wrap: list[str] | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    full_env = dict(os.environ)
    full_env.pop("GLIBC_TUNABLES", None)
    full_env.update(env or {})
    return subprocess.run(
        [*(wrap or []), str(BIN / prog), *(str(a) for a in args)],
        env=full_env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
    )


def summary(prog: str, *args: object, **kw: Any) -> dict[str, Any]:
    """Run `prog` and return its one JSON line, checking the conventions every program follows."""
    proc = run(prog, *args, **kw)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, proc.stdout
    res: dict[str, Any] = json.loads(lines[0])
    keys = list(res)
    assert keys[:3] == ["workload", "threads", "cpus"] and keys[-1] == "wall_s", keys
    assert res["workload"] == prog
    assert res["cpus"] >= 1 and res["wall_s"] > 0
    for k in ("user_s", "sys_s", "vol_ctxsw", "invol_ctxsw", "minflt"):
        assert res[k] >= 0, k
    return res


# -- build -----------------------------------------------------------------------------------


def test_build_from_scratch_is_warning_free_and_incremental(tmp_path: Path) -> None:
    out = tmp_path / "bin"
    first = make(f"OUT={out}")
    assert first.returncode == 0, first.stderr
    assert "warning" not in (first.stdout + first.stderr).lower()
    assert sorted(p.name for p in out.iterdir()) == sorted(PROGRAMS)
    again = make(f"OUT={out}")
    assert again.returncode == 0 and "gcc" not in again.stdout, again.stdout
    os.utime(out / "parallel", (0, 0))  # older than its source: only it is rebuilt
    partial = make(f"OUT={out}")
    rebuilt = [line for line in partial.stdout.splitlines() if line.startswith("gcc")]
    assert len(rebuilt) == 1 and "parallel.c" in rebuilt[0], partial.stdout
    clean = make(f"OUT={out}", "clean")
    assert clean.returncode == 0 and list(out.iterdir()) == []


# -- command-line conventions ------------------------------------------------------------------

OPTIONS = {
    "spin_barrier": ["--threads", "--rounds", "--work-us", "--work-iters", "--barrier"],
    "heap_churn": ["--threads", "--iters", "--blocks", "--size", "--first-free"],
    "pipeline": ["--stages", "--threads-per-stage", "--items", "--work-us", "--work-iters", "--queue-cap"],
    "parallel": ["--threads", "--work-ms", "--work-iters"],
    "syscall_storm": ["--groups", "--fds", "--loops", "--msg-size", "--mode"],
    "spinlock": ["--threads", "--iters", "--cs-iters", "--work-iters", "--lock"],
    "sync_semantics": ["--pattern", "--threads", "--rounds", "--work-us", "--work-iters", "--batch"],
}


@pytest.mark.parametrize("prog", PROGRAMS)
def test_help_exits_0_and_lists_every_option(prog: str) -> None:
    proc = run(prog, "--help")
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout.startswith(f"usage: {prog} ")
    for opt in OPTIONS[prog]:
        assert f"  {opt} " in proc.stdout, opt


@pytest.mark.parametrize(
    ("prog", "args", "opt"),
    [
        ("spin_barrier", ["--threads", "abc"], "--threads"),
        ("spin_barrier", ["--barrier=futex"], "--barrier"),
        ("spin_barrier", ["--rounds", "10", "--work-us"], "--work-us"),  # value missing
        ("heap_churn", ["--size", "0"], "--size"),
        ("heap_churn", ["--first-free", "-1"], "--first-free"),
        ("pipeline", ["--stages=1"], "--stages"),
        ("parallel", ["--bogus", "3"], "--bogus"),
        ("syscall_storm", ["--mode", "tcp"], "--mode"),
        ("spinlock", ["--iters", "-5"], "--iters"),
        ("spinlock", ["--threads", "4x"], "--threads"),
        ("sync_semantics", ["--pattern", "spin"], "--pattern"),
    ],
)
def test_bad_argument_exits_2_with_one_line_naming_the_option(prog: str, args: list[str], opt: str) -> None:
    proc = run(prog, *args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert re.fullmatch(rf"{prog}: {re.escape(opt)}: expected .+ \(got '.*'\)", lines[0]), lines[0]


def test_equals_and_space_forms_are_the_same() -> None:
    a = summary("spinlock", "--threads=2", "--iters=100", "--lock=mutex")
    b = summary("spinlock", "--threads", "2", "--iters", "100", "--lock", "mutex")
    assert (a["threads"], a["iters"], a["lock"]) == (b["threads"], b["iters"], b["lock"]) == (2, 100, "mutex")


# -- spin_barrier ------------------------------------------------------------------------------


@pytest.mark.parametrize("barrier", ["spin", "pthread", "spinlock"])
def test_spin_barrier_counts_rounds(barrier: str) -> None:
    res = summary("spin_barrier", "--threads", 2, "--rounds", 40, "--work-iters", 2000, "--barrier", barrier)
    assert (res["threads"], res["rounds"], res["barrier"]) == (2, 40, barrier)
    assert res["barrier_waits"] == 80
    assert res["barrier_violations"] == 0
    assert res["work_iters"] == 2000 and res["iters_per_us"] == 0  # no calibration with --work-iters
    if barrier == "pthread":
        assert res["spin_polls"] == 0


def test_spin_barrier_work_us_is_calibrated() -> None:
    res = summary("spin_barrier", "--threads", 1, "--rounds", 10, "--work-us", 100)
    assert res["iters_per_us"] > 0
    assert res["work_iters"] == pytest.approx(100 * res["iters_per_us"], rel=0.01)


def test_user_spinning_is_much_slower_than_blocking_when_threads_exceed_cores() -> None:
    """Digest 2.5: 4 threads on 2 cores; spinning waiters burn the slices the stragglers need."""
    args = ["--threads", 4, "--rounds", 50, "--work-iters", 20000]
    pthread = summary("spin_barrier", *args, "--barrier", "pthread", cpus=two_cpus())
    spin = summary("spin_barrier", *args, "--barrier", "spin", cpus=two_cpus())
    assert spin["cpus"] <= 2
    assert spin["spin_polls"] > 0 and spin["barrier_violations"] == 0
    assert spin["wall_s"] > 5 * pthread["wall_s"], (spin["wall_s"], pthread["wall_s"])
    # the blocking barrier sleeps, the spinning one does not
    assert pthread["vol_ctxsw"] > spin["vol_ctxsw"]


# -- heap_churn --------------------------------------------------------------------------------


def test_heap_churn_counts() -> None:
    page = os.sysconf("SC_PAGE_SIZE")
    res = summary("heap_churn", "--threads", 2, "--iters", 50, "--blocks", 8, "--size", 32768)
    assert (res["threads"], res["iters"], res["blocks"], res["size"]) == (2, 50, 8, 32768)
    assert res["allocations"] == 2 * 50 * 8
    assert res["pages_touched"] == 2 * 50 * 8 * (-(-32768 // page))
    assert res["glibc_tunables"] == ""
    tuned = summary("heap_churn", "--threads", 1, "--iters", 5, env={"GLIBC_TUNABLES": TUNED_MALLOC})
    assert tuned["glibc_tunables"] == TUNED_MALLOC


def madvise_calls(tmp_path: Path, name: str, env: dict[str, str] | None = None) -> int:
    out = tmp_path / f"{name}.strace"
    res = summary(
        "heap_churn",
        "--threads", 2, "--iters", 200,
        env=env,
        wrap=["/usr/bin/strace", "-f", "-c", "-e", "trace=madvise", "-o", str(out)],
    )  # fmt: skip
    assert res["allocations"] == 2 * 200 * 32
    for line in out.read_text().splitlines():
        fields = line.split()
        if fields and fields[-1] == "madvise":
            return int(fields[3])  # % time, seconds, usecs/call, calls, [errors], syscall
    return 0  # strace -c prints no row for a syscall never made


def test_default_malloc_tunables_trim_with_madvise_and_tuning_stops_it(tmp_path: Path) -> None:
    """Digest 2.3: frees at the top of a thread arena are trimmed with madvise(MADV_DONTNEED)."""
    if not os.access("/usr/bin/strace", os.X_OK):
        pytest.skip("/usr/bin/strace not installed")
    probe = subprocess.run(["/usr/bin/strace", "-f", "-c", "-o", os.devnull, "true"], capture_output=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"strace cannot trace here: {probe.stderr.decode(errors='replace').strip()}")
    default = madvise_calls(tmp_path, "default")
    tuned = madvise_calls(tmp_path, "tuned", env={"GLIBC_TUNABLES": TUNED_MALLOC})
    # 2 threads x 200 iterations x 32 frees: nearly every free at the top trims (~28 of 32)
    assert default >= 2 * 200 * 32 // 2, default
    # with the tuning only glibc's thread-exit stack advice remains (one per thread)
    assert tuned <= 10, tuned
    assert default > 100 * max(tuned, 1)


# -- pipeline ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("stages", "tps", "cap"), [(4, 2, 4), (2, 1, 1), (3, 3, 16)])
def test_pipeline_delivers_every_item_once(stages: int, tps: int, cap: int) -> None:
    res = summary(
        "pipeline", "--stages", stages, "--threads-per-stage", tps, "--items", 3000,
        "--work-iters", 200, "--queue-cap", cap,
    )  # fmt: skip
    assert res["threads"] == stages * tps
    assert res["items"] == res["items_expected"] == 3000
    assert res["check"] == "ok"
    assert res["queue_ops"] == 2 * (stages - 1) * 3000
    assert res["cond_waits_full"] >= 0 and res["cond_waits_empty"] >= 0


def test_pipeline_with_no_items_shuts_down() -> None:
    res = summary("pipeline", "--items", 0, "--work-iters", 0)
    assert res["items"] == 0 and res["check"] == "ok"


# -- parallel ----------------------------------------------------------------------------------


def test_parallel_splits_the_work_evenly() -> None:
    res = summary("parallel", "--threads", 3, "--work-iters", 30_000_001)
    assert res["threads"] == 3 and res["work_iters"] == 30_000_001
    cpu = res["thread_cpu_s"]
    assert len(cpu) == len(res["thread_end_s"]) == 3
    assert all(c > 0 for c in cpu)
    assert res["cpu_sum_s"] == pytest.approx(sum(cpu), abs=1e-5)
    assert res["cpu_max_s"] == pytest.approx(max(cpu), abs=1e-6)
    assert res["last_end_s"] <= res["wall_s"]


def test_parallel_work_ms_is_cpu_time() -> None:
    res = summary("parallel", "--threads", 2, "--work-ms", 100)
    assert res["iters_per_us"] > 0
    # calibrated work: the threads together burn about 100 ms of CPU
    assert 0.05 < res["cpu_sum_s"] < 0.4, res["cpu_sum_s"]


# -- syscall_storm -----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["socket", "pipe"])
def test_syscall_storm_delivers_every_message(mode: str) -> None:
    res = summary("syscall_storm", "--groups", 2, "--fds", 3, "--loops", 50, "--msg-size", 100, "--mode", mode)
    assert res["threads"] == 2 * 2 * 3
    assert res["mode"] == mode
    assert res["messages"] == 2 * 3 * 3 * 50
    assert res["bytes"] == res["messages"] * 100
    assert res["write_calls"] >= res["messages"] and res["read_calls"] >= res["messages"]
    assert res["sys_s"] + res["user_s"] > 0


# -- spinlock ----------------------------------------------------------------------------------


@pytest.mark.parametrize("lock", ["spin", "mutex"])
def test_spinlock_counter_is_exact(lock: str) -> None:
    res = summary("spinlock", "--threads", 3, "--iters", 5000, "--cs-iters", 20, "--work-iters", 100, "--lock", lock)
    assert (res["threads"], res["lock"], res["iters"]) == (3, lock, 5000)
    assert res["acquisitions"] == res["acquisitions_expected"] == 15000
