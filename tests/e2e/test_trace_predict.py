"""`vcpulab trace`, `predict` and `fidelity` on real programs, through the CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, run_cli, vcpulab_command

# Times real programs on this machine: run alone, after the rest (make test).
pytestmark = pytest.mark.measures

BIN = REPO / "target" / "native" / "bin"


@pytest.fixture(scope="module", autouse=True)
def native() -> None:
    """The pathology workloads and the tracer, built as `make native` builds them."""
    subprocess.run(["make", "-s", "-C", str(REPO), "native"], check=True, capture_output=True)


def test_trace_then_predict_a_pipeline(tmp_path: Path) -> None:
    trace = tmp_path / "p.vtrace"
    r = run_cli("trace", "-o", trace, "--", BIN / "pipeline", "--items", 1000)
    assert r.code == 0, r.err
    assert json.loads(r.out)["items"] == 1000  # the program's own output, on stdout
    assert trace.is_file() and "records" in r.err
    assert not list(tmp_path.glob(".*.tmp*"))  # no temporary left behind
    out = tmp_path / "pred.json"
    r = run_cli("predict", trace, "--scenario", "OC", "-o", out)
    assert r.code == 0, r.err
    assert "where the added time goes" in r.out and "OC" in r.out
    pred = json.loads(out.read_text())
    rep = pred["trace"]["replay"]
    assert rep["threads"] == 7 and rep["wakeups_matched"] > 0
    assert [x["scenario"] for x in pred["results"]] == ["native", "OC"]
    # The replay computes what the traced threads computed (their CPU time: what other load on
    # the machine does not stretch, unlike the traced run's wall time), plus the modelled
    # kernel work of their synchronization. The wall time is compared by `fidelity`.
    assert 0.95 < pred["fidelity"]["c_native_ns"] / rep["compute_ns"] < 2.0, (pred["fidelity"], rep)
    assert all(m["speedup"] > 0 for m in pred["mitigations"])


def test_heap_churn_prediction_names_shootdowns_and_their_mitigations(tmp_path: Path) -> None:
    trace = tmp_path / "h.vtrace"
    assert run_cli("trace", "-o", trace, "--", BIN / "heap_churn", "--threads", 2, "--iters", 300).code == 0
    out = tmp_path / "pred.json"
    r = run_cli("predict", trace, "--scenario", "OC", "-o", out)
    assert r.code == 0, r.err
    pred = json.loads(out.read_text())
    oc = pred["results"][1]
    assert oc["metrics"]["tlb_shootdowns"] > 1000
    names = {m["name"] for m in pred["mitigations"]}
    assert {"PV TLB flush", "Shoot4U", "allocator trim threshold / top pad"} <= names
    best = pred["mitigations"][0]
    assert best["cause"] == "TLB shootdowns" and best["speedup"] > 1.0


@pytest.mark.parametrize(
    "argv",
    [
        ["pipeline", "--items", 3000],
        ["heap_churn", "--threads", 2, "--iters", 400],
        ["parallel", "--threads", 4, "--work-ms", 200],
        ["spin_barrier", "--threads", 2, "--rounds", 400, "--barrier", "pthread"],
    ],
    ids=lambda a: str(a[0]),
)
def test_native_replay_predicts_the_measured_wall_time(argv: list[object], tmp_path: Path) -> None:
    out = tmp_path / "f.json"
    r = run_cli("fidelity", "--runs", 2, "-o", out, "--", BIN / str(argv[0]), *argv[1:])
    assert r.code == 0, r.err
    f = json.loads(out.read_text())
    # The documented target is 25 % (docs/bridge.md, measured there); tested loosely on a noisy
    # shared machine. CPU time holds whatever else loads the machine; the wall time only where
    # the program had its CPUs (fidelity measures how long other processes held it off them).
    assert f["cpu_error"] is not None and abs(f["cpu_error"]) < 0.5, f
    assert f["wall_time_comparable"] == (f["held_off_share"] <= 0.1), f
    if f["wall_time_comparable"]:
        assert abs(f["error"]) < 0.5, f
    else:
        assert "the machine was busy" in r.err


@pytest.mark.skipif(shutil.which("xz") is None, reason="xz is not installed")
def test_a_debian_program_traced_byte_identical_and_predicted(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.write_bytes(b"".join(b"record %d of a compressible stream\n" % i for i in range(100_000)))
    plain = subprocess.run(["xz", "-T2", "-c", str(data)], capture_output=True, check=True).stdout
    trace = tmp_path / "xz.vtrace"
    r = subprocess.run(
        [*vcpulab_command(), "trace", "-o", str(trace), "--", "xz", "-T2", "-c", str(data)],
        capture_output=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == plain
    out = tmp_path / "pred.json"
    p = run_cli("predict", trace, "--scenario", "UC", "-o", out)
    assert p.code == 0, p.err
    pred = json.loads(out.read_text())
    assert pred["trace"]["replay"]["cmdline"][0] == "xz"
    assert pred["fidelity"]["t_native_s"] > 0


def test_exit_status_crashes_and_missing_programs(tmp_path: Path) -> None:
    trace = tmp_path / "t.vtrace"
    r = run_cli("trace", "-o", trace, "--", "sh", "-c", "echo hi; exit 3")
    assert r.code == 3 and r.out == "hi\n" and trace.is_file()
    crash = tmp_path / "c.vtrace"
    r = run_cli("trace", "-o", crash, "--", "sh", "-c", "kill -SEGV $$")
    assert r.code == 128 + 11 and "killed by signal 11" in r.err and not crash.exists()
    assert len(r.err.strip().splitlines()) == 1
    missing = tmp_path / "m.vtrace"
    r = run_cli("trace", "-o", missing, "--", "no-such-program-xyz")
    assert r.code == 127 and not missing.exists()
    r = run_cli("trace", "-o", tmp_path / "no" / "dir.vtrace", "--", "true")
    assert r.code == 2 and "does not exist" in r.err
    assert not list(tmp_path.glob(".*"))


def test_bad_traces_get_one_line_errors(tmp_path: Path) -> None:
    good = tmp_path / "g.vtrace"
    assert run_cli("trace", "-o", good, "--", BIN / "pipeline", "--items", 200).code == 0
    data = good.read_bytes()
    cases = {
        "truncated": data[: len(data) // 2 + 7],
        "corrupted": data[:200] + bytes(b ^ 0xFF for b in data[200:240]) + data[240:],
        "not-a-trace": b"hello, world\n" * 10,
    }
    newer = bytearray(data)
    newer[8:10] = (99).to_bytes(2, "little")
    cases["newer"] = bytes(newer)
    for name, content in cases.items():
        bad = tmp_path / f"{name}.vtrace"
        bad.write_bytes(content)
        out = tmp_path / f"{name}.json"
        r = run_cli("predict", bad, "-o", out)
        assert r.code == 2, (name, r.err)
        assert len(r.err.strip().splitlines()) == 1 and str(bad) in r.err, (name, r.err)
        assert not out.exists(), name
    r = run_cli("predict", tmp_path / "missing.vtrace")
    assert r.code == 2 and "no such trace file" in r.err


@pytest.mark.skipif(len(__import__("os").sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_oversubscription_measured_next_to_its_prediction(tmp_path: Path) -> None:
    out = tmp_path / "o.json"
    r = run_cli("oversubscription", "--threads", 4, "--cpus", 2, "--rounds", 60, "-o", out)
    assert r.code == 0, r.err
    assert "user-level spin" in r.out and "simulated" in r.out
    c = json.loads(out.read_text())
    # Spinning with more threads than CPUs costs about a time slice per round, blocking about
    # the work: both here and in the simulator.
    assert c["measured_ratio"] > 5 and c["simulated_ratio"] > 5, c
    # The spin rounds' absolute time is the scheduler's: comparable only where other processes
    # left the program its CPUs (the command measures how long they held it off them).
    assert c["wall_time_comparable"] == (c["held_off_share"] <= 0.1), c
    if c["wall_time_comparable"]:
        assert 0.25 < c["simulated_s"]["spin"] / c["measured_s"]["spin"][0] < 4, c
    else:
        assert "the machine was busy" in r.err
    r = run_cli("oversubscription", "--cpus", 4096)
    assert r.code == 2 and "CPUs are available" in r.err


def test_bad_trace_workload_fields_in_a_spec(tmp_path: Path) -> None:
    good = tmp_path / "g.vtrace"
    assert run_cli("trace", "-o", good, "--", BIN / "pipeline", "--items", 100).code == 0
    cases = {
        f'trace = "{tmp_path / "missing.vtrace"}"': "workloads.app.trace: cannot read trace file",
        "trace = 3": "workloads.app.trace: expected the path of a trace file",
        f'trace = "{good}"\npid = 0': "workloads.app.pid: expected a process id",
        f'trace = "{good}"\npid = 424242': "no process 424242 in the trace",
        f'trace = "{good}"\nspinlocks = "block"': 'workloads.app.spinlocks: expected "spin" or "spin-then-block"',
        f'trace = "{good}"\nheap = {{ trim_threshold = "lots" }}': "workloads.app.heap.trim_threshold",
        f'trace = "{good}"\nprogram = []': "workloads.app.program: unknown field 'program' for a traced workload",
    }
    for fields, message in cases.items():
        spec = tmp_path / "s.toml"
        spec.write_text(f'[experiment]\nworkloads = ["app"]\nscenarios = ["native"]\n\n[workloads.app]\n{fields}\n')
        r = run_cli("run", spec, "--no-store")
        assert r.code == 2, (fields, r.err)
        assert message in r.err and len(r.err.strip().splitlines()) == 1, (fields, r.err)
    spec.write_text(
        f'[experiment]\nworkloads = ["app"]\nscenarios = ["native"]\nvcpus = [2]\n\n[workloads.app]\ntrace = "{good}"\n'
    )
    assert run_cli("run", spec, "--no-store").code == 0


def test_fidelity_bad_input() -> None:
    assert run_cli("fidelity", "--", "no-such-program-xyz").code == 127
    r = run_cli("fidelity", "--runs", 0, "--", "true")
    assert r.code == 2 and "--runs" in r.err
    r = run_cli("fidelity")
    assert r.code == 2 and "no program given" in r.err


def test_predict_takes_lists_and_refuses_a_repeated_single_value(tmp_path: Path) -> None:
    trace = tmp_path / "par.vtrace"
    # 150 ms of work: a creator that a loaded machine keeps from its join for a few ms stays
    # under the period-long floor of `threads_at_once` (replay.rs, most_at_once).
    assert run_cli("trace", "-o", trace, "--", BIN / "parallel", "--threads", 2, "--work-ms", 150).code == 0
    out = tmp_path / "pred.json"
    r = run_cli("predict", trace, "--vcpus", "2,4", "--vcpus", 2, "--scenario", "UC,OC", "-o", out)
    assert r.code == 0, r.err
    pred = json.loads(out.read_text())
    cells = [(x["scenario"], x["vcpus"]) for x in pred["results"]]
    assert cells == [("native", 2), ("UC", 2), ("OC", 2), ("native", 4), ("UC", 4), ("OC", 4)]
    # Two threads on 4 vCPUs: said, with what to do about it; not said for 2.
    assert pred["trace"]["replay"]["threads_at_once"] == 2  # the workers; main waits in its joins
    assert "4 vCPUs: the program had at most 2 thread(s) running at once" in " ".join(r.err.split())
    assert "2 vCPUs: the program had at most" not in r.err
    for args in (["--cpus", 2, "--cpus", 4], ["--seed", 1, "--seed", 2]):
        r = run_cli("predict", trace, *args)
        assert r.code == 2 and "given more than once" in r.err, r.err
    for args, said in (
        (["--vcpus", "4,x"], "argument --vcpus: expected an integer or a comma-separated list of integers (got '4,x')"),
        (["--scenario", "UC,XY"], "argument --scenario: unknown scenario 'XY'"),
    ):
        r = run_cli("predict", trace, *args)
        assert r.code == 2 and said in r.err and len(r.err.strip().splitlines()) == 1, r.err


def heap_fidelity(tmp_path: Path, *args: object, threads: int = 16, iters: int = 30) -> dict:
    """`vcpulab fidelity` on heap_churn with 16 threads; skips where the tracepoint counters
    that count the measured calls cannot be opened."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    out = tmp_path / "fid.json"
    argv = [BIN / "heap_churn", "--threads", threads, "--iters", iters, "--blocks", 8, "--size", 32768, *args]
    r = run_cli("fidelity", "--runs", 1, "-o", out, "--", *argv)
    assert r.code == 0, r.err
    f = json.loads(out.read_text())
    if f["measured_trim_calls"] is None or f["measured_munmap_calls"] is None:
        pytest.skip("the syscall tracepoints cannot be counted here, so the measured calls are unknown")
    return f


def test_the_heap_model_makes_the_trims_glibc_makes_with_16_threads(tmp_path: Path) -> None:
    """Issue 26's over-trim at higher thread counts, against the real glibc: 16 threads churn
    8 × 32 KiB at their arenas' tops. glibc trims 4 times per iteration (the
    `heap_trim` rule: the top reaches 128 KiB, and a whole page lies above top_pad + MINSIZE)
    and releases each thread's stack with one more `madvise` at its exit; the replay makes the
    heap's trims, not the stacks'."""
    f = heap_fidelity(tmp_path)
    measured, replayed = f["measured_trim_calls"], f["replayed_unmap_calls"]
    assert measured > 16 * 30 * 3, f
    assert abs(replayed - measured) <= 0.15 * measured, f


def test_past_the_arena_limit_the_replay_trims_as_glibc_did(tmp_path: Path) -> None:
    """Issue 26 at high thread counts: 32 threads per CPU churn their arenas, so glibc shares
    and reuses arenas (8 × CPUs at most), and how many depends on how many threads are alive at
    once: on the traced kernel's scheduling and mm locking. The native replay follows that
    kernel (the trace records its release): on Linux ≥ 6.4 page faults and, from 6.17, trims
    take per-VMA locks, so new threads do not queue on `mmap_sem` behind the others' faults.
    Replayed with the 4.15 rules instead, 64 threads on 2 CPUs shared 44-49 arenas where glibc
    shared about 30, and the replays made 0.1-0.4 of the trimming calls measured (2026-12-02).
    With the traced kernel's rules single traces still land from -53 % to +28 % (which threads
    share decides it), so three traces are summed: 0.72-0.79 of the measured calls in the runs
    measured here, and 0.56 on a loaded CI machine (2026-12-07), where the real program's threads
    overlap differently. The lower bound, 0.45, still fails the 4.15 rules' 0.1-0.4."""
    cpus = len(os.sched_getaffinity(0))
    measured = replayed = 0
    for k in range(3):
        f = heap_fidelity(tmp_path / str(k), threads=32 * cpus, iters=50)
        assert f["kernel"] == os.uname().release and f["kernel"] in f["kernel_rules"], f
        assert f["measured_trim_calls"] > 32 * cpus * 50, f
        measured += f["measured_trim_calls"]
        replayed += f["replayed_unmap_calls"]
    assert 0.45 <= replayed / measured <= 1.4, (replayed, measured)


def test_threads_past_the_arena_limit_reuse_or_share_arenas(tmp_path: Path) -> None:
    """glibc makes at most 8 × CPUs arenas (the main one included; `arena_get2`); with 8 × CPUs
    + 8 worker threads at least 9 of them get an exited thread's arena or share one, in the
    simulation and in the traced run's order of first mallocs and exits alike."""
    cpus = len(os.sched_getaffinity(0))
    n = 8 * cpus + 8
    trace = tmp_path / "heap.vtrace"
    argv = [BIN / "heap_churn", "--threads", n, "--iters", 5, "--blocks", 8, "--size", 32768]
    assert run_cli("trace", "-o", trace, "--", *argv).code == 0
    out = tmp_path / "pred.json"
    r = run_cli("predict", trace, "--scenario", "UC", "--vcpus", 2, "-o", out)
    assert r.code == 0, r.err
    pred = json.loads(out.read_text())
    replay = pred["trace"]["replay"]
    assert replay["cpus"] == cpus
    bound = n - (max(8 * cpus, 9) - 1)
    assert replay["arenas_reused_traced"] + replay["arenas_shared_traced"] >= bound, replay
    native = next(x for x in pred["results"] if x["scenario"] == "native")
    m = native["metrics"]
    assert m["arenas_reused"] + m["arenas_shared"] >= bound, m


def test_one_mapped_free_stops_every_threads_trimming(tmp_path: Path) -> None:
    """The same churn after the main thread has freed one 1 MiB buffer. That free raises glibc's
    thresholds for the whole process (`mp_`: mmap 1 MiB + a page, trim twice that), so no
    arena trims its 256 KiB churn: the real run makes only the stacks' and the buffer's calls.
    A heap model with thresholds per arena replayed this run with 3,781 shootdowns. (One fresh-
    clone CI run on 2026-12-01 measured 1,962 calls, as if the raise had not happened, where
    every other run measured 33-42; not explained, so the real count is not asserted.)"""
    f = heap_fidelity(tmp_path, "--first-free", 1 << 20)
    measured = f["measured_trim_calls"] + f["measured_munmap_calls"]
    assert f["replayed_unmap_calls"] < 50, f
    assert f["replayed_unmap_calls"] <= measured, f
