"""Bad input to the bridge commands: malformed traces, output paths that cannot be written,
file names that are not UTF-8. Each fails with one line (`vcpulab: error: ...`), exit 2, before
anything is run or simulated.

The traces are built here, byte by byte, as docs/trace-format.md defines them (a two-thread
program: the main thread creates a worker, both take one mutex, the main thread joins it), so
these tests need neither the tracer nor a C compiler; the last ones trace a real program."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from conftest import REPO, one_line_error, run_cli

MS = 1_000_000
PID, WORKER, BASE, HANDLE, LOCK = 4242, 4243, 7_000_000_000, 0x7F00DEAD0000, 0x5000

# Kinds (docs/trace-format.md, "Records").
PROCESS_START, THREAD_START, THREAD_EXIT, THREAD_CREATE, THREAD_JOIN, THREAD_STATS = 1, 2, 3, 4, 5, 7
MUTEX_LOCK, MUTEX_UNLOCK, MALLOC, FREE = 0x10, 0x11, 0x20, 0x21


def header(version: int = 4) -> bytes:
    h = b"\x89VTRACE\n" + struct.pack("<HHIQI", version, 32, 0, 1_700_000_000_000_000_000, PID)
    return h + struct.pack("<I", zlib.crc32(h))


def rec(kind: int, t: int, body: bytes, cpu: int | None = None) -> bytes:
    """A record: its 12-byte header, the thread's CPU time (every kind but the allocator's), the body."""
    tail = (b"" if cpu is None else struct.pack("<Q", cpu)) + body
    return struct.pack("<BBHQ", kind, 0, 12 + len(tail), t) + tail


def block(tid: int, seq: int, records: list[bytes]) -> bytes:
    payload = b"".join(records)
    h = b"VTBK" + struct.pack("<IIIQIII", len(payload), PID, tid, BASE, seq, len(records), 0)
    return h + struct.pack("<I", zlib.crc32(h + payload)) + payload


def stats(t: int, cpu: int) -> bytes:
    return rec(THREAD_STATS, t, struct.pack("<QQQQ", 0, 1, 0, 10), cpu)


def blocks() -> list[bytes]:
    """The blocks of a valid trace: main thread's block 0, the worker's block 0, main's block 1."""
    cmd = b"./app\x00"
    start = struct.pack("<IIIHHQQ", PID, 1, 2, 0, len(cmd), BASE, 1_700_000_000_000_000_000)
    start += cmd + b"6.1.0".ljust(64, b"\0") + b"2.36".ljust(16, b"\0")
    main0 = block(
        PID,
        0,
        [
            rec(PROCESS_START, 0, start, 0),
            rec(THREAD_START, 1000, struct.pack("<IIIIQ", PID, 0, 0, 0, 0x7F00BEEF0000), 1000),
            rec(MALLOC, 1 * MS, struct.pack("<QQ", 64, 0x9000)),
            rec(THREAD_CREATE, 2 * MS, struct.pack("<IiQ", 1, 0, HANDLE), 2 * MS),
            rec(MUTEX_LOCK, 3 * MS, struct.pack("<QQi", LOCK, 1000, 0), 3 * MS),
            rec(MUTEX_UNLOCK, 5 * MS, struct.pack("<QQ", LOCK, 2 * MS), 5 * MS),
        ],
    )
    worker0 = block(
        WORKER,
        0,
        [
            rec(THREAD_START, 2 * MS + 50_000, struct.pack("<IIIIQ", WORKER, PID, 1, 0, HANDLE), 10_000),
            rec(MUTEX_LOCK, 5 * MS + 20_000, struct.pack("<QQi", LOCK, 2 * MS, 0), 2 * MS),
            rec(MUTEX_UNLOCK, 8 * MS, struct.pack("<QQ", LOCK, 3 * MS), 5 * MS),
            stats(9 * MS, 6 * MS),
            rec(THREAD_EXIT, 9 * MS, b"", 6 * MS),
        ],
    )
    main1 = block(
        PID,
        1,
        [
            rec(THREAD_JOIN, 9 * MS + 100_000, struct.pack("<IiQQ", WORKER, 0, HANDLE, 4 * MS), 5 * MS),
            rec(FREE, 9 * MS + 200_000, struct.pack("<Q", 0x9000)),
            stats(10 * MS, 6 * MS),
            rec(THREAD_EXIT, 10 * MS, b"", 6 * MS),
        ],
    )
    return [main0, worker0, main1]


def valid() -> bytes:
    return header() + b"".join(blocks())


PREDICT = ("--scenario", "UC", "--vcpus", 2)


def test_the_generated_trace_is_valid(tmp_path: Path) -> None:
    """The control for the malformed variants below."""
    trace = tmp_path / "ok.vtrace"
    trace.write_bytes(valid())
    out = tmp_path / "p.json"
    r = run_cli("predict", trace, *PREDICT, "-o", out)
    assert r.code == 0, r.err
    assert json.loads(out.read_text())["trace"]["replay"]["threads"] == 2
    # its first line: the command line (bold by style; the consoles print markup as written)
    assert r.out.startswith("./app: 2 threads, 15 records; traced 0.010 s"), r.out


def _malformed() -> dict[str, tuple[bytes, str]]:
    main0, worker0, main1 = blocks()
    empty = block(PID, 0, [])
    return {
        # The case of the report: a trace's blocks appended to it again.
        "blocks-twice": (valid() + b"".join(blocks()), "a second block number 0 of thread 4242 of process 4242"),
        "header-and-an-empty-block": (header() + empty, "byte 36: malformed block 0: an empty block"),
        "one-block-twice": (header() + main0 + worker0 + worker0 + main1, "a second block number 0 of thread 4243"),
        "a-thread-s-blocks-reordered": (
            header() + main1 + worker0 + main0,
            "block number 0 of thread 4242 of process 4242 after its block number 1",
        ),
        "an-empty-block-at-the-end": (valid() + block(PID, 2, []), "malformed block 3: an empty block"),
    }


@pytest.mark.parametrize("name", list(_malformed()))
def test_a_malformed_trace_is_a_format_error_not_a_deadlock(name: str, tmp_path: Path) -> None:
    """Such files read as traces whose threads wait forever (the replay reported a deadlock,
    exit 3): the reader rejects them, naming the file, the byte and what is wrong."""
    data, expected = _malformed()[name]
    bad = tmp_path / f"{name}.vtrace"
    bad.write_bytes(data)
    out = tmp_path / "p.json"
    r = run_cli("predict", bad, *PREDICT, "-o", out)
    line = one_line_error(r, 2)
    assert f"{bad}: byte " in line and "malformed block" in line and expected in line, line
    assert "deadlock" not in r.err and "simulating" not in r.err
    assert not out.exists()


@pytest.mark.parametrize("where", ["a directory", "in a missing directory"])
def test_predict_checks_its_output_before_simulating(where: str, tmp_path: Path) -> None:
    trace = tmp_path / "ok.vtrace"
    trace.write_bytes(valid())
    out = tmp_path if where == "a directory" else tmp_path / "no" / "p.json"
    r = run_cli("predict", trace, *PREDICT, "-o", out)
    line = one_line_error(r, 2)
    assert "-o" in line and str(out) in line, line
    assert "simulating" not in r.err  # nothing simulated first


@pytest.mark.parametrize("command", ["characterize", "mitigate", "fidelity"])
def test_program_commands_check_their_output_before_running_it(command: str, tmp_path: Path) -> None:
    """The program would leave a file behind had it run (it did, before the -o error)."""
    ran = tmp_path / "ran"
    options = {"mitigate": ["--runs", 1, "--no-predict"], "fidelity": ["--runs", 1]}.get(command, [])
    for out in (tmp_path, tmp_path / "no" / "x.json"):
        r = run_cli(command, *options, "-o", out, "--", "sh", "-c", f"touch '{ran}'")
        line = one_line_error(r, 2)
        assert "-o" in line and str(out) in line, line
        assert not ran.exists(), f"{command} ran the program before checking -o {out}"


def test_oversubscription_checks_its_output_first(tmp_path: Path) -> None:
    # --cpus 100000 is refused too, but only once -o has been checked: -o comes first
    r = run_cli("oversubscription", "--cpus", 100000, "--rounds", 1, "-o", tmp_path)
    line = one_line_error(r, 2)
    assert "-o" in line and "directory" in line, line


NOT_UTF8 = "t\udcffx"  # the file name b"t\xffx": Python's str for it (surrogateescape)


def test_a_trace_whose_name_is_not_utf8_is_predicted(tmp_path: Path) -> None:
    """Its name went to the native reader as str (UnicodeEncodeError, exit 1), and into the
    replay's spec (which is UTF-8 text). Also from a working directory whose name is not."""
    here = tmp_path / "d\udcfe"
    here.mkdir()
    trace = here / f"{NOT_UTF8}.vtrace"
    trace.write_bytes(valid())
    out = here / f"{NOT_UTF8}.json"
    r = run_cli("predict", trace, *PREDICT, "-o", out)
    assert r.code == 0, r.err
    assert json.loads(out.read_bytes())["trace"]["replay"]["threads"] == 2
    r = run_cli("predict", trace.name, *PREDICT, cwd=here)
    assert r.code == 0, r.err


def test_a_malformed_trace_whose_name_is_not_utf8_is_named_with_the_byte_escaped(tmp_path: Path) -> None:
    bad = tmp_path / f"{NOT_UTF8}.vtrace"
    bad.write_bytes(header() + block(PID, 0, []))
    line = one_line_error(run_cli("predict", bad, *PREDICT), 2)
    assert "t\\xffx.vtrace: byte 36: malformed block 0: an empty block" in line, line


def test_a_trace_name_outside_ascii_goes_into_the_replay_spec(tmp_path: Path) -> None:
    """JSON's escapes of characters past U+FFFF are surrogate pairs, which TOML refuses (the
    spec was "malformed TOML"); quotes, backslashes and control characters must be escaped."""
    for name in ("\U0001f600.vtrace", 'a"b\\c.vtrace', "tab\there\x7f.vtrace"):
        trace = tmp_path / name
        trace.write_bytes(valid())
        r = run_cli("predict", trace, *PREDICT)
        assert r.code == 0, (name, r.err)


# --- with the tracer ------------------------------------------------------------------------


def _tracer() -> Path:
    """libvtrace.so, built as `make native` builds it."""
    if shutil.which("make") is None or shutil.which("gcc") is None:
        pytest.skip("needs make and gcc to build the tracer")
    subprocess.run(["make", "-s", "-C", str(REPO), "native"], check=True, capture_output=True)
    return REPO / "target" / "native" / "lib" / "libvtrace.so"


@pytest.mark.measures
def test_a_real_trace_appended_to_itself_is_a_format_error(tmp_path: Path) -> None:
    """The report's case with a trace of a real program (the tracer alone, no measurement)."""
    lib = _tracer()
    trace = tmp_path / "sh.vtrace"
    env = {**os.environ, "VTRACE_OUT": str(trace), "LD_PRELOAD": str(lib)}
    subprocess.run(["sh", "-c", "sleep 0.01 & wait"], env=env, check=True, timeout=60)
    data = trace.read_bytes()
    assert run_cli("predict", trace, *PREDICT).code == 0
    twice = tmp_path / "twice.vtrace"
    twice.write_bytes(data + data[32:])
    line = one_line_error(run_cli("predict", twice, *PREDICT), 2)
    assert f"{twice}: byte " in line and "malformed block" in line and "a second block number 0" in line, line


@pytest.mark.measures
def test_trace_writes_a_file_whose_name_is_not_utf8(tmp_path: Path) -> None:
    _tracer()
    out = tmp_path / f"{NOT_UTF8}.vtrace"
    r = run_cli("trace", "-o", out, "--", "true")
    assert r.code == 0, r.err
    assert out.is_file() and "t\\xffx.vtrace" in r.err
    assert run_cli("predict", out, *PREDICT).code == 0
