"""Write a file so that it appears whole or not at all."""

from __future__ import annotations

import csv
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO


class AtomicWriter:
    """A context manager that writes text to a temporary file beside ``path``.

    On a clean exit the temporary file is flushed, synced and renamed over ``path``; on any
    exception (KeyboardInterrupt included) it is removed and ``path`` is left untouched.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._file: TextIO | None = None
        self._tmp: Path | None = None

    def __enter__(self) -> TextIO:
        directory = self.path.parent
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=directory)
        self._tmp = Path(tmp)
        try:
            self._file = os.fdopen(fd, "w", encoding="utf-8", newline="\n")
        except BaseException:
            os.close(fd)
            self._tmp.unlink(missing_ok=True)
            raise
        return self._file

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._file is not None and self._tmp is not None
        try:
            if exc_type is None:
                self._file.flush()
                os.fsync(self._file.fileno())
                os.chmod(self._file.fileno(), 0o666 & ~_umask())
            self._file.close()
            if exc_type is None:
                os.replace(self._tmp, self.path)
        finally:
            self._tmp.unlink(missing_ok=True)


def _umask() -> int:
    """The process umask (mkstemp creates files 0600; the result should look like any other)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` so that it appears whole or not at all (like :class:`AtomicWriter`)."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
            os.chmod(f.fileno(), 0o666 & ~_umask())
        os.replace(tmp, target)
    finally:
        Path(tmp).unlink(missing_ok=True)


def write_csv_atomic(path: str | os.PathLike[str], header: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Write a CSV (``header``, then ``rows``; floats as ``%.6g``) that appears whole or not at all."""
    with AtomicWriter(path) as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        for row in rows:
            w.writerow([f"{v:.6g}" if isinstance(v, float) else v for v in row])
