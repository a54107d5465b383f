"""End to end: the vtrace LD_PRELOAD tracer on real programs, read back by the Rust reader.

Builds ``tracer/vtrace`` with make, the test programs of ``tracer/vtrace/tests`` with gcc and the
``vtrace_dump`` example with cargo, then runs programs with and without the tracer.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
TRACER = REPO / "tracer" / "vtrace"

pytestmark = [
    # Times real programs on this machine: run alone, after the rest (make test).
    pytest.mark.measures,
    pytest.mark.skipif(
        shutil.which("gcc") is None or shutil.which("make") is None or shutil.which("cargo") is None,
        reason="needs gcc, make and cargo",
    ),
]


@dataclass
class Kit:
    lib: Path
    spinblock: Path
    bins: Path
    dump: Path


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Kit:
    root = tmp_path_factory.mktemp("vtrace")
    out = root / "lib"
    subprocess.run(["make", "-s", "-C", str(TRACER), f"OUT={out}"], check=True)
    bins = root / "bin"
    bins.mkdir()
    for src in sorted((TRACER / "tests").glob("*.c")):
        subprocess.run(
            ["gcc", "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-pthread", "-o", str(bins / src.stem), str(src)],
            check=True,
        )
    subprocess.run(
        ["cargo", "build", "-q", "--release", "-p", "vcpulab-sim", "--example", "vtrace_dump"], cwd=REPO, check=True
    )
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    dump = target / "release" / "examples" / "vtrace_dump"
    assert dump.exists(), dump
    return Kit(out / "libvtrace.so", out / "libspinblock.so", bins, dump)


def run(
    cmd: list[str], trace: Path | None, kit: Kit, *, preload: str | None = None, stdin: bytes | None = None, **env: str
) -> subprocess.CompletedProcess[bytes]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("VTRACE_") and k != "LD_PRELOAD"}
    if trace is not None:
        e["VTRACE_OUT"] = str(trace)
        e["LD_PRELOAD"] = str(kit.lib)
    if preload is not None:
        e["LD_PRELOAD"] = preload
    e.update(env)
    return subprocess.run(cmd, env=e, input=stdin, capture_output=True, timeout=120)


def summary(kit: Kit, trace: Path) -> dict[str, Any]:
    p = subprocess.run([str(kit.dump), str(trace)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def records(kit: Kit, trace: Path) -> dict[str, Any]:
    p = subprocess.run([str(kit.dump), "--records", str(trace)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def same_as_untraced(kit: Kit, cmd: list[str], trace: Path, **kw: Any) -> subprocess.CompletedProcess[bytes]:
    plain = run(cmd, None, kit, **kw)
    traced = run(cmd, trace, kit, **kw)
    assert traced.returncode == plain.returncode
    assert traced.stdout == plain.stdout
    assert traced.stderr == plain.stderr
    assert not Path(f"{trace}.log").exists(), Path(f"{trace}.log").read_text()
    return traced


def test_every_traced_call_is_recorded(kit: Kit, tmp_path: Path) -> None:
    trace = tmp_path / "t.vtrace"
    p = same_as_untraced(kit, [str(kit.bins / "threads"), "4", "300"], trace)
    assert p.stdout == b"counter=1200 spin=1200 rw=120 turn=4\n"
    s = summary(kit, trace)
    assert s["version"] == 4
    [proc] = s["processes"]
    assert proc["origin"] == "exec" and proc["cmdline"][1:] == ["4", "300"] and proc["cpus"] >= 1
    assert proc["kernel"] == os.uname().release  # format 4: the kernel the replay of this machine follows
    main = next(t for t in proc["threads"] if t["tid"] == proc["pid"])
    workers = [t for t in proc["threads"] if t["tid"] != proc["pid"]]
    assert main["seq"] == 0 and main["parent"] is None
    k = main["kinds"]
    assert k["THREAD_CREATE"] == 4 and k["THREAD_JOIN"] == 4 and k["BARRIER_INIT"] == 1
    assert k["MADVISE"] == 1 and k["MPROTECT"] == 1 and k["MMAP"] >= 1 and k["MUNMAP"] >= 1
    assert k["PROCESS_START"] == 1 and k["THREAD_EXIT"] == 1 and k["COND_SIGNAL"] == 1
    assert k["FUTEX"] == 1 and k["THREAD_STATS"] == 1
    assert sorted(t["seq"] for t in workers) == [1, 2, 3, 4]
    for t in workers:
        k = t["kinds"]
        assert t["parent"] == proc["pid"] and t["lost_blocks"] == 0
        assert k["MALLOC"] == 300 and k["REALLOC"] == 300 and k["CALLOC"] == 300 and k["FREE"] == 600
        assert k["SPIN_LOCK"] == 300 and k["SPIN_UNLOCK"] == 300
        assert k["RW_WRLOCK"] == 30 and k["RW_RDLOCK"] == 270 and k["RW_UNLOCK"] == 300
        assert k["MUTEX_LOCK"] == 301 and k["BARRIER_WAIT"] == 1 and k["THREAD_EXIT"] == 1
        assert k["COND_BROADCAST"] == 1 and k["FUTEX"] == 1 and k["THREAD_STATS"] == 1

    full = records(kit, trace)
    threads = full["processes"][0]["threads"]
    tids = {t["tid"] for t in threads}
    for t in threads:
        times = [r["t"] for r in t["records"]]
        assert times == sorted(times)
        for r in t["records"]:
            ev = r["event"]  # serde's external tagging: "ThreadExit" or {"Malloc": {...}}
            name, ev = (ev, None) if isinstance(ev, str) else next(iter(ev.items()))
            if name in ("Malloc", "Free", "Calloc", "Realloc"):
                assert r["cpu"] is None
            else:
                assert r["cpu"] is not None
            if name == "ThreadCreate":
                assert ev["child"] in tids and ev["ret"] == 0
            if name == "ThreadJoin":
                assert ev["tid"] in tids and ev["ret"] == 0
            if name == "MutexUnlock" and t["tid"] != full["processes"][0]["pid"]:
                assert ev["hold_ns"] is not None
            if name == "Realloc":
                assert ev["size"] >= 64
            if name == "Futex":  # the worker's wait found the word changed; main's wake woke nobody
                assert (ev["op"] & 0x7F, ev["ret"]) in ((0, -11), (1, 0)) and ev["addr"] != 0, ev
            if name == "ThreadStats":  # just before the exit record, with the thread's run-queue time
                assert t["records"][-1]["event"] == "ThreadExit" and ev["run_delay_ns"] is not None
                assert ev["voluntary_switches"] is not None


def test_exit_status_and_output_unchanged(kit: Kit, tmp_path: Path) -> None:
    trace = tmp_path / "e.vtrace"
    p = same_as_untraced(kit, [str(kit.bins / "exit3")], trace)
    assert p.returncode == 3 and p.stdout == b"exit three\n"
    [proc] = summary(kit, trace)["processes"]
    assert proc["threads"][0]["kinds"]["MALLOC"] >= 100
    assert proc["threads"][0]["kinds"]["THREAD_EXIT"] == 1


@pytest.mark.parametrize("tool", ["xz", "zstd"])
def test_real_program_output_is_byte_identical(kit: Kit, tmp_path: Path, tool: str) -> None:
    exe = shutil.which(tool)
    if exe is None:
        pytest.skip(f"{tool} not installed")
    data = bytes((i * 2654435761 >> 13) & 0xFF if i % 3 else 65 + i % 11 for i in range(3_000_000))
    trace = tmp_path / f"{tool}.vtrace"
    cmd = [exe, "-T2", "-c"] + (["-q"] if tool == "zstd" else [])
    p = same_as_untraced(kit, cmd, trace, stdin=data)
    assert p.returncode == 0 and len(p.stdout) > 100
    [proc] = summary(kit, trace)["processes"]
    assert len(proc["threads"]) >= 2
    assert sum(t["kinds"].get("MUTEX_LOCK", 0) for t in proc["threads"]) > 0


def test_a_crash_leaves_a_readable_trace(kit: Kit, tmp_path: Path) -> None:
    trace = tmp_path / "c.vtrace"
    p = same_as_untraced(kit, [str(kit.bins / "crash")], trace)
    assert p.returncode == -signal.SIGSEGV
    [proc] = summary(kit, trace)["processes"]
    main = next(t for t in proc["threads"] if t["tid"] == proc["pid"])
    # the SIGSEGV handler wrote the pending buffer: every record is there
    # (one more malloc: stdio's buffer for the printf)
    assert main["kinds"]["MALLOC"] == 5001 and main["kinds"]["FREE"] == 5000
    assert main["lost_blocks"] == 0


def test_sigterm_flushes(kit: Kit, tmp_path: Path) -> None:
    trace = tmp_path / "s.vtrace"
    env = {k: v for k, v in os.environ.items() if not k.startswith("VTRACE_")}
    env.update(VTRACE_OUT=str(trace), LD_PRELOAD=str(kit.lib))
    proc = subprocess.Popen([str(kit.bins / "sigterm")], env=env, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"ready\n"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM
    [p] = summary(kit, trace)["processes"]
    assert len(p["threads"]) == 2
    for t in p["threads"]:
        # (the worker may not have returned from the barrier when the signal comes)
        assert t["kinds"]["FREE"] == 300
        if t["tid"] == p["pid"]:
            assert t["kinds"]["BARRIER_WAIT"] == 1


def test_fork_and_exec_children_trace_into_the_same_file(kit: Kit, tmp_path: Path) -> None:
    trace = tmp_path / "f.vtrace"
    p = same_as_untraced(kit, [str(kit.bins / "forkexec")], trace)
    assert p.stdout == b"exec child done\nparent done 0 0\n"
    procs = summary(kit, trace)["processes"]
    assert len(procs) == 4
    parent = next(p for p in procs if p["origin"] == "exec" and p["cmdline"][1:] == [])
    forks = [p for p in procs if p["origin"] == "fork"]
    [image] = [p for p in procs if p["cmdline"][1:] == ["child"]]
    assert len(forks) == 2 and all(f["ppid"] == parent["pid"] for f in forks)
    # the fork child that called exec recorded it, and its new image kept the pid
    [execer] = [f for f in forks if any(t["kinds"].get("EXEC") for t in f["threads"])]
    assert image["pid"] == execer["pid"] and image["origin"] == "exec"
    [worker_fork] = [f for f in forks if f is not execer]
    assert len(worker_fork["threads"]) == 4 and len(image["threads"]) == 3 and len(parent["threads"]) == 4
    for proc in procs:
        for t in proc["threads"]:
            assert t["lost_blocks"] == 0
            if t["tid"] != proc["pid"]:
                assert t["kinds"]["MALLOC"] == 2000 and t["kinds"]["THREAD_EXIT"] == 1


def test_many_threads_and_processes_append_whole_blocks(kit: Kit, tmp_path: Path) -> None:
    trace = tmp_path / "m.vtrace"
    env = {k: v for k, v in os.environ.items() if not k.startswith("VTRACE_")}
    env.update(VTRACE_OUT=str(trace), LD_PRELOAD=str(kit.lib))
    procs = [
        subprocess.Popen([str(kit.bins / "threads"), "8", "2000"], env=env, stdout=subprocess.DEVNULL) for _ in range(3)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    s = summary(kit, trace)
    assert len(s["processes"]) == 3
    for proc in s["processes"]:
        assert len(proc["threads"]) == 9
        assert all(t["lost_blocks"] == 0 for t in proc["threads"])
        assert sum(t["kinds"].get("MALLOC", 0) for t in proc["threads"] if t["tid"] != proc["pid"]) == 8 * 2000


def test_vtrace_max_bytes_bounds_the_file_and_keeps_it_readable(kit: Kit, tmp_path: Path) -> None:
    trace = tmp_path / "cap.vtrace"
    r = run([str(kit.bins / "threads"), "8", "20000"], trace, kit, VTRACE_MAX_BYTES="300000")
    assert r.returncode == 0, r.stderr  # the program runs on, untraced
    assert 0 < trace.stat().st_size <= 300_000
    assert "the trace reached VTRACE_MAX_BYTES" in Path(f"{trace}.log").read_text()
    s = summary(kit, trace)  # whole blocks only: it reads back
    assert s["processes"] and all(t["lost_blocks"] == 0 for p in s["processes"] for t in p["threads"])


def test_without_vtrace_out_the_library_does_nothing(kit: Kit, tmp_path: Path) -> None:
    p = run([str(kit.bins / "threads"), "2", "100"], None, kit, preload=str(kit.lib))
    assert p.returncode == 0 and p.stdout == b"counter=200 spin=200 rw=20 turn=2\n"
    assert list(tmp_path.iterdir()) == []


def test_an_existing_foreign_file_is_left_alone(kit: Kit, tmp_path: Path) -> None:
    trace = tmp_path / "notes.txt"
    trace.write_text("my notes\n")
    p = run([str(kit.bins / "exit3")], trace, kit)
    assert p.returncode == 3 and p.stdout == b"exit three\n" and p.stderr == b""
    assert trace.read_text() == "my notes\n"
    assert "not a vtrace file" in Path(f"{trace}.log").read_text()


def test_reader_errors_are_one_clear_line(kit: Kit, tmp_path: Path) -> None:
    trace = tmp_path / "t.vtrace"
    assert run([str(kit.bins / "exit3")], trace, kit).returncode == 3
    good = trace.read_bytes()

    def dump_error(data: bytes) -> str:
        bad = tmp_path / "bad.vtrace"
        bad.write_bytes(data)
        p = subprocess.run([str(kit.dump), str(bad)], capture_output=True, text=True, timeout=60)
        assert p.returncode == 1 and p.stdout == ""
        assert p.stderr.count("\n") == 1 and p.stderr.startswith(f"{bad}: byte ")
        return p.stderr

    assert "checksum mismatch in block 0" in dump_error(good[:-1] + bytes([good[-1] ^ 1]))
    assert "truncated block 0" in dump_error(good[:-5])
    assert "not a vtrace file" in dump_error(b"hello world, not a trace at all\n")
    newer = bytearray(good)
    newer[8] = 5
    assert "written by a newer vcpulab: format version 5, this reads ≤ 4" in dump_error(bytes(newer))


def test_spinblock_is_a_correct_lock_that_blocks(kit: Kit, tmp_path: Path) -> None:
    p = run([str(kit.bins / "spincount"), "4"], None, kit, preload=str(kit.spinblock))
    assert p.returncode == 0, p.stdout
    # under the tracer too (vtrace first: its wrappers call spinblock's functions)
    trace = tmp_path / "sb.vtrace"
    p = run([str(kit.bins / "spincount"), "3", "20000"], trace, kit, preload=f"{kit.lib} {kit.spinblock}")
    assert p.returncode == 0, p.stdout
    # (SPIN_LOCK also counts the failed trylocks)
    assert sum(t["kinds"].get("SPIN_UNLOCK", 0) for t in summary(kit, trace)["processes"][0]["threads"]) == 3 * 20000
    p = run([str(kit.bins / "spincount"), "6"], None, kit, preload=str(kit.spinblock), SPINBLOCK_SPINS="0")
    assert p.returncode == 0, p.stdout
    # waiters for a lock held 200 ms: spinning burns CPU, spin-then-block does not
    t0 = time.monotonic()
    blocked = run([str(kit.bins / "spincount"), "hold"], None, kit, preload=str(kit.spinblock))
    assert blocked.returncode == 0 and time.monotonic() - t0 >= 0.2
    cpu_ms = int(blocked.stdout.split(b"cpu_ms=")[1])
    assert cpu_ms < 100, blocked.stdout


def test_a_closed_descriptor_is_never_written_through(kit: Kit, tmp_path: Path) -> None:
    trace, own = tmp_path / "c.vtrace", tmp_path / "own.txt"
    p = run([str(kit.bins / "closeall"), str(own)], trace, kit)
    assert p.returncode == 0 and p.stdout == b"done\n"
    assert own.read_bytes() == b"mine\n"
    assert "closed or replaced by the application" in Path(f"{trace}.log").read_text()
    assert summary(kit, trace)["processes"] == []
