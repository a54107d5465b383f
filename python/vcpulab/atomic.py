"""Every file vcpulab writes for the user goes through :class:`Output`: the path is checked
before any work starts, and the file then appears whole or not at all.

What the path names decides how it is written:

- a regular file, or nothing yet: written to a temporary file beside it, synced and renamed
  over it, so a reader sees the old file or the new one, never a part;
- a symbolic link: written through, as above, to the file it points to (the link stays);
- a character device or a FIFO (``/dev/null``, ``/dev/stdout``, a named pipe): opened and
  written in place, never replaced by a regular file;
- a directory, a block device or a socket, or a path that cannot be written: refused with a
  one-line :class:`OutputError` naming the path (and the option it came from).

An error while writing (a full disk, a closed pipe) is an :class:`OutputError` naming the file.
"""

from __future__ import annotations

import csv
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, TextIO, cast

from .text import printable


class OutputError(Exception):
    """An output path that cannot be written, or a write that failed: one line, naming it."""


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


class Output:
    """A file the user asked vcpulab to write (``path``, given by ``option`` if any).

    Creating one checks the path (:class:`OutputError` if it cannot be written); nothing is
    created until :meth:`open_text`, :meth:`write_bytes`, :meth:`write_csv` or
    :meth:`replace_with`."""

    def __init__(self, path: str | os.PathLike[str], option: str | None = None) -> None:
        self.path = Path(path)
        self.option = option
        if not os.fspath(path):  # Path("") would be "."
            raise self.error("the file name is empty")
        self.target, self.stream = self._resolve()

    def error(self, why: str) -> OutputError:
        """An :class:`OutputError`: ``[option: ]cannot write 'path': why``."""
        what = f"{self.option}: " if self.option else ""
        return OutputError(f"{what}cannot write '{printable(self.path)}': {why}")

    def _resolve(self) -> tuple[Path, bool]:
        """The file to write (symbolic links followed) and whether it is written in place."""
        given = os.fspath(self.path)
        try:
            st = os.stat(given)  # follows symbolic links
        except FileNotFoundError:
            st = None
        except OSError as e:  # a loop of links, a file where a directory should be, no permission
            raise self.error(e.strerror or str(e)) from None
        if st is not None and (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
            if not os.access(given, os.W_OK):
                raise self.error("permission denied")
            return self.path, True
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise self.error(f"is {_kind(st.st_mode)} (expected a file, a character device or a FIFO)")
        # A regular file, nothing yet, or a link to nothing yet: the file the links lead to.
        target = Path(os.path.realpath(given))
        directory = target.parent
        # Named as the user gave it, unless a link leads elsewhere.
        shown = printable(directory if os.path.islink(given) else (os.path.dirname(given) or "."))
        if not directory.is_dir():
            raise self.error(f"directory '{shown}' does not exist")
        if not os.access(directory, os.W_OK | os.X_OK):
            raise self.error(f"directory '{shown}' is not writable")
        return target, False

    # --- writing ------------------------------------------------------------------------------

    @contextmanager
    def open_text(self) -> Iterator[TextIO]:
        """A text file to write (UTF-8, ``\\n`` line ends): a regular file appears, whole, when
        the block ends without an exception; on an exception (Ctrl-C included) it is left as it
        was. A device or FIFO is written as the block writes."""
        with self._open() as f:
            yield cast(TextIO, f)

    @contextmanager
    def _open(self) -> Iterator[_Named]:
        if self.stream:
            with self._named_errors():
                fd = os.open(self.target, os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC)  # never creates
                f = os.fdopen(fd, "w", encoding="utf-8", newline="\n")
            with _closing(f):
                yield _Named(f, self)
                with self._named_errors():
                    f.close()
            return
        with self._named_errors():
            fd, tmp = tempfile.mkstemp(prefix=f".{self.target.name}.", suffix=".tmp", dir=self.target.parent)
        try:
            with self._named_errors():
                f = os.fdopen(fd, "w", encoding="utf-8", newline="\n")
            with _closing(f):
                yield _Named(f, self)
                with self._named_errors():
                    f.flush()
                    os.fsync(f.fileno())
                    os.chmod(f.fileno(), 0o666 & ~_umask())
                    f.close()
                    os.replace(tmp, self.target)
        finally:
            Path(tmp).unlink(missing_ok=True)

    def write_bytes(self, data: bytes) -> None:
        """Writes ``data`` (whole or not at all, as :meth:`open_text`)."""
        with self._open() as f:
            f.buffer_write(data)

    def write_csv(self, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        """A CSV (``header``, then ``rows``; floats as ``%.6g``), whole or not at all."""
        with self.open_text() as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(header)
            for row in rows:
                w.writerow([f"{v:.6g}" if isinstance(v, float) else v for v in row])

    def replace_with(self, made: Path) -> None:
        """Puts the finished file ``made`` (written beside :attr:`target` by another program)
        in place: renamed over a regular file, copied into a device or FIFO and removed."""
        if not self.stream:
            with self._named_errors():
                os.replace(made, self.target)
            return
        try:
            with open(made, "rb") as src, self._open() as f:
                while chunk := src.read(1 << 20):
                    f.buffer_write(chunk)
        finally:
            made.unlink(missing_ok=True)

    @contextmanager
    def _named_errors(self) -> Iterator[None]:
        try:
            yield
        except OSError as e:
            raise self.error(e.strerror or str(e)) from None


class _Named:
    """A text file whose write errors are :class:`OutputError` naming the output."""

    def __init__(self, f: TextIO, out: Output) -> None:
        self._f = f
        self._out = out

    def write(self, s: str) -> int:
        with self._out._named_errors():
            return self._f.write(s)

    def buffer_write(self, data: bytes) -> None:
        with self._out._named_errors():
            self._f.flush()
            self._f.buffer.write(data)

    def flush(self) -> None:
        with self._out._named_errors():
            self._f.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


@contextmanager
def _closing(f: TextIO) -> Iterator[None]:
    """Closes ``f`` when the block fails, quietly: the block's own exception (Ctrl-C, or the
    write error already named) is the one to report, not a second one from flushing the rest."""
    try:
        yield
    except BaseException:
        try:
            f.close()
        except OSError:
            pass
        raise


def _umask() -> int:
    """The process umask (mkstemp creates files 0600; the result should look like any other)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def AtomicWriter(path: str | os.PathLike[str], option: str | None = None) -> AbstractContextManager[TextIO]:  # noqa: N802
    """``with AtomicWriter(path) as f``: :meth:`Output.open_text` of ``path`` (the name callers
    had before :class:`Output`)."""
    return Output(path, option).open_text()


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Writes ``data`` to ``path`` through :class:`Output` (whole or not at all)."""
    Output(path).write_bytes(data)


def write_csv_atomic(path: str | os.PathLike[str], header: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Writes a CSV to ``path`` through :class:`Output` (whole or not at all)."""
    Output(path).write_csv(header, rows)
