"""Where the CLI writes files (``--out``, ``--timeline``, ``report -o``, ``--markdown``): a
regular file appears whole, a symbolic link is written through, and a character device or a
FIFO is written in place, never replaced by a regular file. The device nodes are made here by
the test (as root, as CI runs), never the machine's own /dev/null or /dev/full."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest

from conftest import one_line_error, run_cli

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="making device nodes needs root (CI runs as root)")

ONE_CELL = ("run", "--workload", "lock", "--scenario", "UC", "--vcpus", "2")


def _device(path: Path, minor: int) -> Path:
    """A character device node of the memory driver: minor 3 is null, 7 is full."""
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
    return path


def _read_fifo(path: Path) -> tuple[threading.Thread, list[bytes]]:
    """Starts a reader of FIFO ``path``; its data lands in the returned list."""
    got: list[bytes] = []

    def read() -> None:
        with open(path, "rb") as f:
            got.append(f.read())

    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t, got


@needs_root
def test_out_to_a_null_device_writes_into_it_and_leaves_it_a_device(tmp_path: Path) -> None:
    null = _device(tmp_path / "null", 3)
    r = run_cli(*ONE_CELL, "--out", null, cwd=tmp_path)
    assert r.code == 0, r.err
    assert stat.S_ISCHR(null.lstat().st_mode)
    assert sorted(os.listdir(tmp_path)) == ["null"]  # no temporary file left beside it


@needs_root
def test_out_to_a_full_device_fails_naming_it_and_leaves_it_a_device(tmp_path: Path) -> None:
    full = _device(tmp_path / "full", 7)
    line = one_line_error(run_cli(*ONE_CELL, "--out", full, cwd=tmp_path))
    assert "--out: cannot write" in line and "full'" in line and "No space left on device" in line
    assert stat.S_ISCHR(full.lstat().st_mode)
    assert sorted(os.listdir(tmp_path)) == ["full"]


@needs_root
def test_timeline_to_a_device_leaves_it_a_device(tmp_path: Path) -> None:
    null = _device(tmp_path / "null", 3)
    r = run_cli(*ONE_CELL, "--no-store", "--timeline", null, cwd=tmp_path)
    assert r.code == 0, r.err
    assert stat.S_ISCHR(null.lstat().st_mode)


def test_out_to_a_fifo_streams_into_it(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader, got = _read_fifo(fifo)
    r = run_cli(*ONE_CELL, "--out", fifo, "--json", cwd=tmp_path)
    assert r.code == 0, r.err
    reader.join(timeout=60)
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    rows = [json.loads(line) for line in got[0].decode().splitlines()]
    assert [row["workload"] for row in rows] == ["lock"]
    assert got[0].decode() == r.out  # the same JSON Lines as printed


def test_timeline_to_a_fifo_streams_into_it(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader, got = _read_fifo(fifo)
    r = run_cli(*ONE_CELL, "--no-store", "--timeline", fifo, cwd=tmp_path)
    assert r.code == 0, r.err
    reader.join(timeout=60)
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert "traceEvents" in json.loads(got[0])


def test_out_through_a_symlink_writes_its_target_and_keeps_the_link(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    target = tmp_path / "data" / "rows.jsonl"
    target.write_text("old\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(Path("data") / "rows.jsonl")
    r = run_cli(*ONE_CELL, "--out", link, cwd=tmp_path)
    assert r.code == 0, r.err
    assert link.is_symlink() and os.readlink(link) == os.path.join("data", "rows.jsonl")
    assert json.loads(target.read_text())["workload"] == "lock"
    assert sorted(os.listdir(tmp_path / "data")) == ["rows.jsonl"]


def test_out_through_a_dangling_symlink_creates_its_target(tmp_path: Path) -> None:
    link = tmp_path / "link.jsonl"
    link.symlink_to("made.jsonl")
    r = run_cli(*ONE_CELL, "--out", link, cwd=tmp_path)
    assert r.code == 0, r.err
    assert link.is_symlink() and json.loads((tmp_path / "made.jsonl").read_text())["workload"] == "lock"


def test_a_symlink_loop_is_refused_before_running(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    line = one_line_error(run_cli(*ONE_CELL, "--out", "a", cwd=tmp_path))
    assert "--out: cannot write 'a'" in line and "symbolic links" in line.lower()


@needs_root
def test_a_block_device_is_refused_before_running(tmp_path: Path) -> None:
    block = tmp_path / "blk"
    os.mknod(block, 0o666 | stat.S_IFBLK, os.makedev(7, 250))  # a loop device number; never opened
    line = one_line_error(run_cli(*ONE_CELL, "--out", block, cwd=tmp_path))
    assert "is a block device" in line
    assert stat.S_ISBLK(block.lstat().st_mode)


@needs_root
def test_report_to_a_device_writes_the_page_into_it_and_no_csv_folder(tmp_path: Path) -> None:
    r = run_cli(*ONE_CELL, "--results", "store", cwd=tmp_path)
    assert r.code == 0, r.err
    null = _device(tmp_path / "null", 3)
    r = run_cli("report", "store", "-o", null, cwd=tmp_path)
    assert r.code == 0, r.err
    assert stat.S_ISCHR(null.lstat().st_mode)
    assert sorted(os.listdir(tmp_path)) == ["null", "store"]


def test_report_through_a_symlink_writes_beside_its_target(tmp_path: Path) -> None:
    r = run_cli(*ONE_CELL, "--results", "store", cwd=tmp_path)
    assert r.code == 0, r.err
    (tmp_path / "pages").mkdir()
    (tmp_path / "page.html").symlink_to(Path("pages") / "report.html")
    r = run_cli("report", "store", "-o", "page.html", cwd=tmp_path)
    assert r.code == 0, r.err
    assert (tmp_path / "page.html").is_symlink()
    assert (tmp_path / "pages" / "report.html").read_text().startswith("<!DOCTYPE html>")
    assert (tmp_path / "pages" / "report_csv").is_dir()


def _trace(out: object, cwd: Path) -> None:
    r = run_cli("trace", "-o", out, "--", "sh", "-c", "true", cwd=cwd, timeout=300)
    assert r.code == 0, r.err


@needs_root
def test_trace_to_a_device_leaves_it_a_device(tmp_path: Path) -> None:
    null = _device(tmp_path / "null", 3)
    _trace(null, tmp_path)
    assert stat.S_ISCHR(null.lstat().st_mode)
    assert sorted(os.listdir(tmp_path)) == ["null"]


def test_trace_to_a_fifo_streams_the_whole_trace(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader, got = _read_fifo(fifo)
    _trace(fifo, tmp_path)
    reader.join(timeout=60)
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    # What came through the pipe is a whole trace: the same bytes a regular file gets read back.
    (tmp_path / "copy.vtrace").write_bytes(got[0])
    r = run_cli("predict", "copy.vtrace", "--scenario", "UC", "--vcpus", "2", cwd=tmp_path, timeout=300)
    assert r.code == 0, r.err


def test_trace_through_a_symlink_writes_its_target(tmp_path: Path) -> None:
    (tmp_path / "traces").mkdir()
    (tmp_path / "t.vtrace").symlink_to(Path("traces") / "run.vtrace")
    _trace("t.vtrace", tmp_path)
    assert (tmp_path / "t.vtrace").is_symlink()
    assert (tmp_path / "traces" / "run.vtrace").stat().st_size > 0
    assert sorted(os.listdir(tmp_path / "traces")) == ["run.vtrace"]
