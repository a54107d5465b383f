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
