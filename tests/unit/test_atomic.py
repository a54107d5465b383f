from __future__ import annotations

import os
from pathlib import Path

import pytest

from vcpulab.atomic import AtomicWriter


def test_writes_whole_file(tmp_path: Path) -> None:
    target = tmp_path / "out.jsonl"
    with AtomicWriter(target) as f:
        f.write("a\n")
        assert not target.exists()  # nothing visible until the end
    assert target.read_text() == "a\n"
    assert os.listdir(tmp_path) == ["out.jsonl"]
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_leaves_nothing_on_error(tmp_path: Path, exc: type[BaseException]) -> None:
    target = tmp_path / "out.jsonl"
    with pytest.raises(exc):
        with AtomicWriter(target) as f:
            f.write("partial\n")
            raise exc()
    assert os.listdir(tmp_path) == []


def test_keeps_old_file_on_error(tmp_path: Path) -> None:
    target = tmp_path / "out.jsonl"
    target.write_text("old\n")
    with pytest.raises(RuntimeError):
        with AtomicWriter(target) as f:
            f.write("new\n")
            raise RuntimeError
    assert target.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["out.jsonl"]


def test_output_refuses_what_it_cannot_write(tmp_path: Path) -> None:
    from vcpulab.atomic import Output, OutputError

    with pytest.raises(OutputError, match=r"^--out: cannot write '.*': is a directory"):
        Output(tmp_path, "--out")
    with pytest.raises(OutputError, match="directory '.*missing' does not exist"):
        Output(tmp_path / "missing" / "f.json")
    with pytest.raises(OutputError, match="the file name is empty"):
        Output("")


def test_output_writes_a_fifo_in_place(tmp_path: Path) -> None:
    import threading

    from vcpulab.atomic import Output

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    out = Output(fifo)
    assert out.stream
    out.write_csv(["a", "b"], [(1, 0.5)])
    reader.join(timeout=30)
    assert got == [b"a,b\n1,0.5\n"]
    assert os.listdir(tmp_path) == ["pipe"]


def test_output_replace_with_copies_into_a_fifo_and_renames_over_a_file(tmp_path: Path) -> None:
    import threading

    from vcpulab.atomic import Output

    made = tmp_path / "made"
    made.write_bytes(b"x" * 3_000_000)
    regular = Output(tmp_path / "r.bin")
    regular.replace_with(made)
    assert (tmp_path / "r.bin").stat().st_size == 3_000_000 and not made.exists()

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    made.write_bytes(b"y" * 3_000_000)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    Output(fifo).replace_with(made)
    reader.join(timeout=30)
    assert got == [b"y" * 3_000_000] and not made.exists()


def test_output_names_the_file_when_a_write_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from vcpulab.atomic import Output, OutputError

    def full(*_a: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    target = tmp_path / "out.json"
    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OutputError, match=r"^--out: cannot write '.*out\.json': No space left on device$"):
        with Output(target, "--out").open_text() as f:
            f.write("x\n")
    assert os.listdir(tmp_path) == []
