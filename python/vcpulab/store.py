"""The results store: a directory of Parquet files, committed through an append-only manifest,
queried with DuckDB. The layout and the schema are documented in ``docs/results.md``.

::

    RESULTS/
      manifest.jsonl          the commit log: which part files hold committed rows
      runs/part-*.parquet     one row per cell (every metric and counter, keys, versions)
      baselines/part-*.parquet  one row per simulation: what a baseline contributes to cells
      specs/<hash>.toml       every materialised spec that wrote here
      journal.jsonl           rows finished but not yet committed as a part
      .lock                   held by the sweep writing (one writer at a time)

A finished row is appended to the journal at once; every couple of seconds (and at the end of
a sweep, also after an error or Ctrl-C) the journaled rows become a Parquet part: written to a
temporary name, synced and renamed, then a line naming it is appended to ``manifest.jsonl``
and synced. A part counts only once that line is complete, so a crash at any point leaves the
committed store as it was (an orphan file is removed, and the journal committed, by the next
writer). Compaction merges the parts of a table into one the same way and commits the
replacement in one manifest line.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import json
import os
import re
import signal
import stat
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

FORMAT = "vcpulab-results"
FORMAT_VERSION = 1
TABLES = ("runs", "baselines")
# A sweep merges a table's parts once it has more than this many (each sweep adds a part every
# couple of seconds); `vcpulab` queries read any number of parts.
COMPACT_ABOVE = 32


class StoreError(Exception):
    """A results directory that cannot be used (not a store, locked, unreadable)."""


class StorePartUnreadable(StoreError):
    """A committed part that exists but cannot be read (no permission, an I/O error, not a
    regular file): not damage, so ``--repair`` leaves it where it is."""

    def __init__(self, root: Path, file: str, why: str) -> None:
        super().__init__(
            f"cannot read results store '{root}': {file}: {why} (nothing is set aside: `--repair` moves only a "
            "part that is missing or not Parquet; make the file readable and run again)"
        )
        self.file = file


class StorePartInvalid(StoreError):
    """A committed part that is valid Parquet but not what vcpulab writes (a column of the
    wrong type): reading it would fail in the middle of a command."""

    def __init__(self, root: Path, file: str, column: str, problem: str) -> None:
        super().__init__(
            f"results store '{root}': {file} is not as vcpulab writes it: column '{column}' {problem} "
            f"(the file was changed after vcpulab wrote it: restore it, or move it out of "
            f"the store and run `vcpulab run SPEC --results {root} --repair` to run its cells again)"
        )
        self.file = file
        self.column = column


# How a manifest may name a part: ``<table>/part-<hex>.parquet`` (nothing outside the table's folder).
_PART_NAME = re.compile(r"^(runs|baselines)/part-[0-9a-f]+\.parquet$")

# DuckDB's memory cap for `vcpulab query` (a huge query fails with a clear line instead of
# taking the machine's memory).
QUERY_MEMORY_LIMIT = "2GB"


@dataclass(frozen=True)
class Damage:
    """A committed part that cannot be read: ``file`` relative to the store, and why."""

    table: str
    file: str
    reason: str


class StoreDamaged(StoreError):
    """Committed parts of the store are missing or unreadable."""

    def __init__(self, root: Path, damage: Sequence[Damage]) -> None:
        first = damage[0]
        more = f" (and {len(damage) - 1} more damaged part(s))" if len(damage) > 1 else ""
        super().__init__(
            f"results store '{root}' is damaged: {first.file} {first.reason}{more}; repair it with "
            f"`vcpulab run SPEC --results {root} --repair` (sets the damaged parts aside in "
            f"{root / 'damaged'}/ and re-runs exactly their cells)"
        )
        self.damage = list(damage)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _TrackedFile(io.FileIO):
    """A file that remembers the error of its own system calls (``error``). pyarrow reads and
    writes Parquet through it and raises what it raised, so an error pyarrow raises is known to
    come from the disk (``error`` set) or from the content (``error`` None): only the latter
    means a part is damaged."""

    error: OSError | None = None

    def _track(self, call: Callable[..., Any], *args: Any) -> Any:
        try:
            return call(*args)
        except OSError as e:
            self.error = e
            raise

    def read(self, size: int | None = -1, /) -> Any:
        return self._track(super().read, size)

    def readall(self) -> bytes:
        data: bytes = self._track(super().readall)
        return data

    def readinto(self, buffer: Any, /) -> Any:
        return self._track(super().readinto, buffer)

    def write(self, data: Any, /) -> Any:
        return self._track(super().write, data)

    def seek(self, pos: int, whence: int = os.SEEK_SET, /) -> int:
        offset: int = self._track(super().seek, pos, whence)
        return offset

    def tell(self) -> int:
        offset: int = self._track(super().tell)
        return offset


def _open_part(path: Path) -> _TrackedFile:
    """``path`` open for reading. FileNotFoundError when there is nothing there; another
    OSError when it cannot be opened or is not a regular file (never blocks on a FIFO)."""
    st = os.stat(path)  # follows a symbolic link, as opening does
    if not stat.S_ISREG(st.st_mode):
        what = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise OSError(errno.EINVAL, f"it is {what}, not a Parquet file", str(path))
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced meanwhile
            raise OSError(errno.EINVAL, "it is not a regular file, not a Parquet file", str(path))
        os.set_blocking(fd, True)
        return _TrackedFile(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _why(e: OSError) -> str:
    """An OSError's reason, without the file name (the message names the file itself)."""
    return e.strerror or str(e) or type(e).__name__


@contextlib.contextmanager
def _writing(path: Path) -> Iterator[None]:
    """An OSError of the block (a full disk, no permission) as a :class:`StoreError` naming
    ``path``, the file being written (an OSError from a write has no file name of its own)."""
    try:
        yield
    except OSError as e:
        raise StoreError(f"cannot write '{path}': {_why(e)}") from None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _append_whole(fd: int, data: bytes, sync: bool = True) -> None:
    """Appends ``data`` to the file open at ``fd`` (O_APPEND), whole or not at all: after a
    failed or short write (a full disk) the file is cut back to where it ended, so no torn
    line is ever followed by a complete one."""
    start = os.fstat(fd).st_size
    try:
        _write_all(fd, data)
        if sync:
            os.fsync(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, start)
            if sync:
                os.fsync(fd)
        raise


# The types a column of a part may have: what vcpulab writes, NULL where a whole part has no
# value (an all-NULL column).
_TEXT, _INTEGER, _NUMBER = "text", "an integer", "a number"
_TEXT_COLUMNS = {
    "runs": frozenset(
        {
            "key",
            "config_key",
            "spec_hash",
            "vcpulab_version",
            "workload",
            "workload_hash",
            "scenario",
            "variant",
            "result_json",
            "run_json",
        }
    ),
    "baselines": frozenset({"key", "summary_json", "vcpulab_version"}),
}
_INTEGER_COLUMNS = frozenset({"workload_version", "vcpus", "threads", "oc_vms", "seed"})


def _expected_kind(table: str, column: str) -> str | None:
    """What ``column`` of a part of ``table`` holds (None: anything)."""
    if column in _TEXT_COLUMNS[table]:
        return _TEXT
    if table != "runs":
        return None
    # The cell's integers; every other column (results, counters, metrics) is a number.
    return _INTEGER if column in _INTEGER_COLUMNS else _NUMBER


def _is_kind(type_: Any, kind: str) -> bool:
    import pyarrow as pa

    if pa.types.is_null(type_):
        return True
    if pa.types.is_dictionary(type_):
        type_ = type_.value_type
    if kind == _TEXT:
        return bool(pa.types.is_string(type_) or pa.types.is_large_string(type_) or pa.types.is_string_view(type_))
    if kind == _INTEGER:
        return bool(pa.types.is_integer(type_))
    return bool(pa.types.is_integer(type_) or pa.types.is_float32(type_) or pa.types.is_float64(type_))


# Characters DuckDB gives a meaning to in a file name (glob patterns): a store whose path holds
# one is read through /proc/self/fd, as is one whose path is not UTF-8.
_DUCKDB_SPECIAL = frozenset("*?[]{}")
# An open descriptor of every store directory read through /proc/self/fd, by (device, inode):
# kept for the life of the process, so a DuckDB connection never outlives its directory's.
_ROOT_FDS: dict[tuple[int, int], int] = {}
_ROOT_FDS_LOCK = threading.Lock()


def _duckdb_safe(path: str) -> bool:
    """Whether DuckDB reads ``path`` as the file it names."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return not any(c in _DUCKDB_SPECIAL for c in path)


def _column(name: str) -> str:
    """A key of a result map as a SQL-friendly column name fragment: ``MSR-write`` → ``msr_write``."""
    return re.sub(r"[^0-9a-zA-Z]+", "_", name).strip("_").lower()


# Columns of a run row that come straight from the result object, in order.
SCALARS = (
    "workload",
    "workload_version",
    "workload_hash",
    "scenario",
    "vcpus",
    "threads",
    "oc_vms",
    "seed",
    "variant",
    "t_native_s",
    "t_virt_s",
    "delta_eta_r",
    "delta_eta_t",
    "omega",
    "weighted_speedup",
    "c_native_ns",
    "c_virt_ns",
    "guest_ns",
    "host_ns",
    "events",
    "duration_s",
    "wall_s",
)


def run_row(result: Mapping[str, Any], *, key: str, config_key: str, spec_hash: str, version: str) -> dict[str, Any]:
    """Flattens a result object into one row: identification, the scalar results, then
    ``exit_<reason>``, ``host_ns_<reason>``, ``ns_<layer>_<cause>`` and every metric under
    its own name; ``result_json`` keeps the result (without ``run``) and ``run_json`` the full
    scenario record."""
    row: dict[str, Any] = {
        "key": key,
        "config_key": config_key,
        "spec_hash": spec_hash,
        "vcpulab_version": version,
    }
    for name in SCALARS:
        row[name] = result.get(name)
    flat: dict[str, Any] = {}
    for reason, n in result.get("exits", {}).items():
        flat[f"exit_{_column(reason)}"] = n
    for reason, ns in result.get("host_ns_by_reason", {}).items():
        flat[f"host_ns_{_column(reason)}"] = ns
    for layer, causes in result.get("breakdown", {}).items():
        for cause, ns in causes.items():
            flat[f"ns_{_column(layer)}_{_column(cause)}"] = ns
    for name, value in result.get("metrics", {}).items():
        flat[_column(name)] = value
    clash = set(flat) & set(row)
    if clash:  # a new metric named like a fixed column: a bug of ours, not of the user
        raise RuntimeError(f"result fields clash with fixed columns: {sorted(clash)}")
    row.update(sorted(flat.items()))
    rest = {k: v for k, v in result.items() if k != "run"}
    row["result_json"] = json.dumps(rest, ensure_ascii=False, sort_keys=True)
    row["run_json"] = json.dumps(result.get("run"), ensure_ascii=False, sort_keys=True)
    return row


def journal_line(table: str, row: Mapping[str, Any]) -> str:
    """A row as a line of the store's journal."""
    return json.dumps({"table": table, "row": row}, ensure_ascii=False) + "\n"


def result_from_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """The result object back from a stored row."""
    result: dict[str, Any] = json.loads(row["result_json"])
    result["run"] = json.loads(row["run_json"])
    return result


@dataclass
class _Manifest:
    parts: dict[str, list[str]] = field(default_factory=lambda: {t: [] for t in TABLES})
    lines: int = 0


def _read_manifest(path: Path) -> _Manifest:
    m = _Manifest()
    if not path.exists():
        return m
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError:
        raise StoreError(f"{path}: not UTF-8 text (the manifest is damaged)") from None
    lines = text.split("\n")
    complete = lines[:-1] if not text.endswith("\n") else lines  # a torn last line never counted
    for number, line in enumerate(complete, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            raise StoreError(f"{path}:{number}: not a JSON line (the manifest is damaged)") from None
        if not isinstance(rec, dict):
            raise StoreError(f"{path}:{number}: not a JSON object (the manifest is damaged)")
        op = rec.get("op")
        if op == "format":
            if rec.get("format") != FORMAT or rec.get("version") != FORMAT_VERSION:
                raise StoreError(
                    f"{path}: unsupported store format {rec.get('format')!r} version {rec.get('version')!r}"
                )
        elif op in ("add", "replace"):
            table, name, gone = rec.get("table"), rec.get("file"), rec.get("files", [])
            names = [name, *gone] if isinstance(gone, list) else [name, gone]
            if (
                table not in TABLES
                or not isinstance(name, str)
                or not all(isinstance(n, str) and _PART_NAME.match(n) and n.startswith(f"{table}/") for n in names)
            ):
                raise StoreError(f"{path}:{number}: not a valid part record (the manifest is damaged)")
            if op == "add":
                m.parts[table].append(name)
            else:
                m.parts[table] = [p for p in m.parts[table] if p not in set(gone)] + [name]
        else:
            raise StoreError(f"{path}:{number}: unknown manifest operation {op!r}")
        m.lines += 1
    return m


class ResultsStore:
    """A results directory. Reading needs no lock; :meth:`writer` takes the directory's lock."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.manifest_path = self.root / "manifest.jsonl"
        self.repaired: list[Damage] = []
        """The damaged parts the last :meth:`writer` set aside."""

    # --- reading ----------------------------------------------------------------------------

    @classmethod
    def open_existing(cls, root: str | os.PathLike[str]) -> ResultsStore:
        """A store that must exist (for query and summary)."""
        store = cls(root)
        if not store.root.is_dir():
            raise StoreError(f"'{root}' is not a directory (run `vcpulab run SPEC --results {root}` first)")
        if not store.manifest_path.exists():
            raise StoreError(f"'{root}' is not a vcpulab results directory (no manifest.jsonl)")
        return store

    def parts(self, table: str) -> list[Path]:
        """The committed part files of ``table``."""
        return [self.root / p for p in _read_manifest(self.manifest_path).parts[table]]

    def connect(self) -> Any:
        """An in-memory DuckDB connection with the views ``runs`` and ``baselines`` over the
        committed parts (an empty table when there are none)."""
        import duckdb

        self.check()
        con = duckdb.connect(":memory:")
        self._create_views(con, self._duckdb_files())
        return con

    def _duckdb_files(self) -> dict[str, list[str]]:
        """The committed parts of each table as DuckDB is given them: absolute paths, or, when
        the store's path is not UTF-8 (DuckDB takes only UTF-8 names) or holds a character
        DuckDB reads as a pattern (``*?[]{}``), the same files through an open descriptor of
        the store's directory (``/proc/self/fd/<fd>/runs/part-….parquet``)."""
        root = self.root.resolve()
        base = str(root) if _duckdb_safe(str(root)) else self._fd_path()
        state = _read_manifest(self.manifest_path)
        return {t: [f"{base}/{p}" for p in state.parts[t]] for t in TABLES}

    def _fd_path(self) -> str:
        """``/proc/self/fd/<fd>`` of the store's directory (see :meth:`_duckdb_files`)."""
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        st = os.fstat(fd)
        with _ROOT_FDS_LOCK:
            kept = _ROOT_FDS.setdefault((st.st_dev, st.st_ino), fd)
        if kept != fd:
            os.close(fd)
        base = f"/proc/self/fd/{kept}"
        if not os.path.isdir(base):
            raise StoreError(
                f"cannot read results store '{self.root}': DuckDB takes only UTF-8 file names without * ? [ ] {{ }}, "
                "and this system has no /proc/self/fd to reach the parts another way; rename the directory"
            )
        return base

    @staticmethod
    def _create_views(con: Any, files: Mapping[str, Sequence[str]]) -> None:
        for table in TABLES:
            if files[table]:
                listed = ", ".join("'" + f.replace("'", "''") + "'" for f in files[table])
                con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet([{listed}], union_by_name = true)")
            else:
                con.execute(f"CREATE VIEW {table} AS SELECT NULL::VARCHAR AS key WHERE false")

    def query_connection(self, memory_limit: str = QUERY_MEMORY_LIMIT) -> Any:
        """A connection for user SQL (``vcpulab query``): the views of :meth:`connect`, then no
        file access beyond the committed parts (no COPY, ATTACH, EXPORT, reading other files,
        installing extensions), at most ``memory_limit`` of memory, and the configuration
        locked so the SQL cannot undo any of it."""
        import duckdb

        self.check()
        files = self._duckdb_files()
        con = duckdb.connect(":memory:")
        con.execute("SET allowed_paths = ?", [[f for t in TABLES for f in files[t]]])
        self._create_views(con, files)
        con.execute("SET memory_limit = ?", [memory_limit])
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
        return con

    # --- damage -----------------------------------------------------------------------------

    def damage(self, full: bool = False) -> list[Damage]:
        """The committed parts that are missing or not Parquet. Without ``full`` only the
        file's presence and its Parquet footer are checked (cheap); with it, every page is read.

        Only a part whose bytes were read and do not parse (or that is missing) is damage. A
        part that cannot be read (no permission, an I/O error, not a file) raises
        :class:`StorePartUnreadable`, and one whose columns are not of the types vcpulab writes
        :class:`StorePartInvalid`: setting either aside would lose rows that may be intact."""
        found = []
        state = _read_manifest(self.manifest_path)
        for table in TABLES:
            for name in state.parts[table]:
                problem = self._part_damage(table, name, full)
                if problem is not None:
                    found.append(problem)
        return found

    def _part_damage(self, table: str, name: str, full: bool) -> Damage | None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            f = _open_part(self.root / name)
        except FileNotFoundError:
            return Damage(table, name, "is listed in manifest.jsonl but missing")
        except OSError as e:
            raise StorePartUnreadable(self.root, name, _why(e)) from None
        with f:
            try:
                parquet = pq.ParquetFile(f)
                schema = parquet.schema_arrow
                if full:
                    for group in range(parquet.num_row_groups):
                        parquet.read_row_group(group)
            except MemoryError:  # (pyarrow's too): a limit of this machine, not damage
                raise
            except (OSError, ValueError, pa.ArrowException) as e:
                if f.error is not None:
                    raise StorePartUnreadable(self.root, name, _why(f.error)) from None
                why = (str(e).strip().splitlines() or [type(e).__name__])[0].split(". ")[0].rstrip(".")
                return Damage(table, name, f"is truncated or not a readable Parquet file ({why})")
        self._check_schema(table, name, schema)
        return None

    def _check_schema(self, table: str, name: str, schema: Any) -> None:
        """Raises :class:`StorePartInvalid` when a column of the part ``name`` is not of the
        type vcpulab writes there (docs/results.md, "Schema of runs")."""
        if "key" not in schema.names:
            raise StorePartInvalid(self.root, name, "key", "is missing (every part has one, of text)")
        for column in schema:
            kind = _expected_kind(table, column.name)
            if kind is not None and not _is_kind(column.type, kind):
                raise StorePartInvalid(self.root, name, column.name, f"is of type {column.type}, expected {kind}")

    def check(self) -> None:
        """Raises :class:`StoreDamaged` when a committed part is missing or has no valid footer,
        :class:`StorePartUnreadable` when one cannot be read, :class:`StorePartInvalid` when its
        columns are not of the types vcpulab writes."""
        found = self.damage()
        if found:
            # A writer may have compacted meanwhile (new parts in the manifest, the old ones
            # unlinked after it): look again before calling the store damaged.
            found = self.damage()
        if found:
            raise StoreDamaged(self.root, found)

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """Reads from the store: an error while reading (DuckDB's, Arrow's) that comes from a
        damaged part becomes a :class:`StoreDamaged` naming it; any other error passes as is."""
        import duckdb

        try:
            yield
        except StoreError:
            raise
        except (
            duckdb.ParserException,
            duckdb.BinderException,
            duckdb.CatalogException,
            duckdb.PermissionException,
            duckdb.OutOfMemoryException,
            MemoryError,
            KeyboardInterrupt,
        ):
            # The query's own errors, a limit, an interruption: no damaged file causes these, so
            # no reason to read every part in full.
            raise
        except Exception:
            # Possibly a damaged file (DuckDB reports some as a bare Error): read every part in
            # full, one at a time, to name it.
            found = self.damage(full=True)
            if found:
                raise StoreDamaged(self.root, found) from None
            raise

    def keys(self) -> set[str]:
        """Keys of the stored cells."""
        return {k for (k,) in self._scan("runs", "key")}

    def baselines(self) -> dict[str, str]:
        """Stored simulation summaries: job key → summary JSON."""
        return {k: s for k, s in self._scan("baselines", "key, summary_json")}

    def rows(self, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The stored rows of ``keys`` (every column), by key."""
        wanted = list(keys)
        if not wanted or not self.parts("runs"):
            return {}
        con = self.connect()
        con.execute("CREATE TEMP TABLE wanted(key VARCHAR)")
        con.executemany("INSERT INTO wanted VALUES (?)", [(k,) for k in wanted])
        cur = con.execute(
            "SELECT * FROM runs WHERE key IN (SELECT key FROM wanted) QUALIFY row_number() OVER (PARTITION BY key) = 1"
        )
        columns = [d[0] for d in cur.description]
        return {row[0]: dict(zip(columns, row, strict=True)) for row in cur.fetchall()}

    def _scan(self, table: str, columns: str) -> list[tuple[Any, ...]]:
        if not self.manifest_path.exists() or not self.parts(table):
            return []
        rows: list[tuple[Any, ...]] = self.connect().execute(f"SELECT {columns} FROM {table}").fetchall()
        return rows

    # --- writing ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def writer(self, repair: bool = False) -> Iterator[StoreWriter]:
        """Creates the store if needed, takes its lock (one writer at a time), removes what an
        earlier crash left uncommitted, and yields a :class:`StoreWriter`.

        A damaged store (a committed part missing or unreadable) raises :class:`StoreDamaged`;
        with ``repair`` every part is read in full and the damaged ones are set aside (see
        :meth:`set_aside`, listed in :attr:`repaired`), so their cells are no longer stored."""
        if self.root.exists() and not self.root.is_dir():
            raise StoreError(f"cannot use '{self.root}' as a results directory: it is a file")
        if self.root.is_dir() and any(self.root.iterdir()) and not self.manifest_path.exists():
            raise StoreError(
                f"'{self.root}' exists and is not a vcpulab results directory (no manifest.jsonl); "
                "choose an empty or new directory"
            )
        for sub in ("runs", "baselines", "specs"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        lock = open(self.root / ".lock", "a+")
        try:
            try:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise StoreError(
                    f"'{self.root}' is being written by another vcpulab process (lock {self.root / '.lock'})"
                ) from None
            if not self.manifest_path.exists():
                self._append_line({"op": "format", "format": FORMAT, "version": FORMAT_VERSION})
            self._truncate_torn_line()
            self._remove_orphans()
            found = self.damage(full=repair)
            if found and not repair:
                raise StoreDamaged(self.root, found)
            if found:
                self.set_aside(found)
            with self.reading():
                writer = StoreWriter(self)
            try:
                yield writer
            finally:
                # Also on errors and Ctrl-C: every finished row is committed.
                writer.close()
        finally:
            lock.close()

    def _append_line(self, rec: Mapping[str, Any]) -> None:
        """Appends ``rec`` to the manifest as one line, whole and synced, or not at all."""
        line = (json.dumps(rec, sort_keys=True) + "\n").encode("utf-8")
        with _writing(self.manifest_path):
            fd = os.open(self.manifest_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
            try:
                _append_whole(fd, line)
            finally:
                os.close(fd)

    def _truncate_torn_line(self) -> None:
        data = self.manifest_path.read_bytes()
        if data and not data.endswith(b"\n"):
            with open(self.manifest_path, "r+b") as f:
                f.truncate(data.rfind(b"\n") + 1)
                os.fsync(f.fileno())

    def _remove_orphans(self) -> None:
        committed = {p for parts in _read_manifest(self.manifest_path).parts.values() for p in parts}
        for table in TABLES:
            for path in (self.root / table).iterdir():
                if f"{table}/{path.name}" not in committed and not path.is_dir():
                    path.unlink()

    def set_aside(self, damage: Sequence[Damage]) -> None:
        """Moves damaged parts into ``damaged/`` (never deleting them), notes each in
        ``damaged/NOTES.txt``, and rewrites the manifest without them (atomically): their
        rows are no longer committed, so the next sweep re-runs exactly their cells. Needs the
        writer's lock."""
        aside = self.root / "damaged"
        aside.mkdir(exist_ok=True)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S %Z")
        notes = []
        for d in damage:
            src = self.root / d.file
            where = "it was already missing"
            if src.exists():
                dest = aside / f"{d.table}-{src.name}"
                n = 1
                while dest.exists():
                    n += 1
                    dest = aside / f"{d.table}-{src.stem}.{n}{src.suffix}"
                with _writing(dest):
                    os.replace(src, dest)
                where = f"moved to damaged/{dest.name}"
            notes.append(
                f"{stamp}: {d.file} {d.reason}; {where}. Its rows were removed from manifest.jsonl: "
                "the next `vcpulab run` of the spec re-runs their cells.\n"
            )
        with _writing(aside / "NOTES.txt"):
            fd = os.open(aside / "NOTES.txt", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
            try:
                _append_whole(fd, "".join(notes).encode("utf-8"))
            finally:
                os.close(fd)
            _sync_dir(aside)
            for table in TABLES:
                _sync_dir(self.root / table)
        gone = {d.file for d in damage}
        state = _read_manifest(self.manifest_path)
        self._rewrite_manifest({t: [p for p in state.parts[t] if p not in gone] for t in TABLES})
        self.repaired = list(damage)

    def _rewrite_manifest(self, parts: Mapping[str, Sequence[str]]) -> None:
        """Replaces the manifest (atomically) by one listing exactly ``parts``."""
        from .atomic import AtomicWriter

        with _writing(self.manifest_path), AtomicWriter(self.manifest_path) as f:
            f.write(json.dumps({"format": FORMAT, "op": "format", "version": FORMAT_VERSION}, sort_keys=True) + "\n")
            for table in TABLES:
                for part in parts[table]:
                    f.write(json.dumps({"file": part, "op": "add", "table": table}, sort_keys=True) + "\n")


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Holds SIGINT and SIGTERM until the block ends, then acts on the first that came: a
    commit (a part file and the manifest line that lists it) is never cut in two, which would
    leave a part on disk that no manifest line names. Only the main thread can hold them (it
    is the one Python runs signal handlers in); elsewhere the block runs as it is."""
    held = (signal.SIGINT, signal.SIGTERM)
    if threading.current_thread() is not threading.main_thread() or any(signal.getsignal(s) is None for s in held):
        yield  # (None: a handler installed outside Python, which could not be put back)
        return
    caught: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: caught.append(signum)) for s in held}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if caught:
            signal.raise_signal(caught[0])  # now handled as it would have been


class StoreWriter:
    """Adds rows to a locked store.

    Rows are first appended to ``journal.jsonl`` (one JSON line each, written through to the
    OS at once, so a killed process keeps every row it finished), then committed in batches
    as Parquet parts by :meth:`flush` (at most every ``flush_every`` seconds, and at the end).
    The next writer commits whatever a crashed one left in the journal; rows whose key is
    already committed are dropped, so replaying a journal twice is harmless.
    """

    def __init__(self, store: ResultsStore, flush_every: float = 2.0) -> None:
        self.store = store
        self.flush_every = flush_every
        self.journal_path = store.root / "journal.jsonl"
        self._pending: dict[str, list[Mapping[str, Any]]] = {t: [] for t in TABLES}
        # Keys committed so far, per table: read once, then kept up to date by flush.
        self._committed = {t: {k for (k,) in store._scan(t, "key")} for t in TABLES}
        self._last_flush = time.monotonic()
        self._recover()
        with _writing(self.journal_path):
            self._journal = os.open(self.journal_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)

    def close(self) -> None:
        """Commits what is pending and closes the journal."""
        try:
            self.flush()
        finally:
            os.close(self._journal)

    def _recover(self) -> None:
        if not self.journal_path.exists():
            return
        text = self.journal_path.read_text(encoding="utf-8", errors="replace")
        for line in text.split("\n")[:-1]:  # the last piece is "" or a torn line
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            # A line that is not a row of ours (damaged) is skipped like a torn one.
            if isinstance(rec, dict) and rec.get("table") in TABLES and isinstance(rec.get("row"), dict):
                if isinstance(rec["row"].get("key"), str):
                    self._pending[rec["table"]].append(rec["row"])
        self.flush(force=True)

    def append(self, table: str, rows: Sequence[Mapping[str, Any]], lines: Sequence[str] | None = None) -> None:
        """Adds ``rows`` to ``table``: journaled now, committed by the next :meth:`flush`.
        ``lines`` are the rows' :func:`journal_line` when already encoded."""
        text = "".join(lines) if lines is not None else "".join(journal_line(table, row) for row in rows)
        # Pending first: a row the journal could not take (a full disk) is still committed by
        # the next flush if there is room for a part by then.
        self._pending[table].extend(rows)
        with _writing(self.journal_path):
            # Whole lines or nothing (a torn line would make the next one unreadable too);
            # written through to the OS, not synced: a killed process keeps them.
            _append_whole(self._journal, text.encode("utf-8"), sync=False)
        if time.monotonic() - self._last_flush >= self.flush_every:
            self.flush()

    def add_baselines(self, summaries: Iterable[tuple[str, str]], version: str) -> None:
        """Adds simulation summaries (job key, summary JSON)."""
        self.append("baselines", [{"key": k, "summary_json": s, "vcpulab_version": version} for k, s in summaries])

    def flush(self, force: bool = False) -> None:
        """Commits the journaled rows as one part per table, then empties the journal."""
        self._last_flush = time.monotonic()
        if not force and not any(self._pending.values()):
            return
        with _signals_held():
            self._commit_pending()

    def _commit_pending(self) -> None:
        for table in TABLES:
            rows = self._pending[table]
            if not rows:
                continue
            have = self._committed[table]
            fresh: dict[str, Mapping[str, Any]] = {}
            for row in rows:
                if row["key"] not in have:
                    fresh.setdefault(row["key"], row)
            if fresh:
                name = self._write_part(table, list(fresh.values()))
                self.store._append_line({"op": "add", "table": table, "file": name, "rows": len(fresh)})
            # Only now, the part committed: after a failure (a full disk) the rows stay pending
            # and journaled, and the next flush tries again.
            have.update(fresh)
            self._pending[table] = []
        with _writing(self.journal_path), open(self.journal_path, "w", encoding="utf-8") as f:
            f.flush()
            os.fsync(f.fileno())

    def _write_part(self, table: str, rows: Sequence[Mapping[str, Any]]) -> str:
        import pyarrow as pa
        import pyarrow.parquet as pq

        def write(out: BinaryIO) -> None:
            # Rows differ in their columns (a metric only some workloads have): the part has
            # the union, in first-seen order, NULL where a row lacks one.
            columns = list(dict.fromkeys(k for row in rows for k in row))
            part = pa.Table.from_pylist([{c: row.get(c) for c in columns} for row in rows])
            pq.write_table(part, out, compression="zstd")

        return self._new_part(table, write)

    def _merge_parts(self, table: str, parts: Sequence[Path]) -> str:
        """Writes the rows of ``parts`` as one new part, the first row of each key kept, part by
        part: one row group per source part, so no column is ever concatenated in memory (a
        store's result JSON can exceed the 2 GiB a single Arrow string array holds)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        schemas = []
        for p in parts:
            with self._reading_part(p) as f:
                schemas.append(pq.read_schema(f))
        schema = pa.unify_schemas(schemas, promote_options="default")

        def write(sink: BinaryIO) -> None:
            seen: set[str] = set()
            with pq.ParquetWriter(sink, schema, compression="zstd") as out:
                for p in parts:
                    with self._reading_part(p) as f:
                        part = pq.read_table(f)
                    keep = []
                    for k in part.column("key").to_pylist():
                        keep.append(k not in seen)
                        seen.add(k)
                    part = part.filter(pa.array(keep, pa.bool_()))
                    if part.num_rows == 0:
                        continue
                    n = part.num_rows
                    cols = [
                        part.column(f.name).cast(f.type) if f.name in part.column_names else pa.nulls(n, f.type)
                        for f in schema
                    ]
                    out.write_table(pa.Table.from_arrays(cols, schema=schema))

        return self._new_part(table, write)

    @contextlib.contextmanager
    def _reading_part(self, path: Path) -> Iterator[_TrackedFile]:
        """A committed part open for pyarrow. An error reading it (not parsing it) is a
        :class:`StorePartUnreadable` naming it; a parse error passes as pyarrow raised it (a
        damaged part, which :meth:`ResultsStore.reading` names)."""
        name = f"{path.parent.name}/{path.name}"
        try:
            f = _open_part(path)
        except OSError as e:
            raise StorePartUnreadable(self.store.root, name, _why(e)) from None
        with f:
            try:
                yield f
            except OSError:
                if f.error is not None:
                    raise StorePartUnreadable(self.store.root, name, _why(f.error)) from None
                raise

    def _new_part(self, table: str, write: Callable[[BinaryIO], None]) -> str:
        """A new part file of ``table``, written by ``write(file)`` to a temporary file and
        then moved into place atomically (never a partial part under its final name). An
        error writing it (a full disk) is a :class:`StoreError` naming the part."""
        name = f"{table}/part-{uuid.uuid4().hex[:16]}.parquet"
        target = self.store.root / name
        with _writing(target):
            fd, tmp = tempfile.mkstemp(prefix=".part-", suffix=".tmp", dir=target.parent)
        raw = _TrackedFile(fd, "wb")
        out = io.BufferedWriter(raw, 1 << 20)
        try:
            try:
                write(out)
                out.flush()
            except OSError as e:
                if raw.error is None:
                    raise  # not from writing the part (e.g. from reading one being merged)
                raise StoreError(f"cannot write '{target}': {_why(raw.error)}") from e
            with _writing(target):
                os.fsync(fd)
                os.fchmod(fd, 0o666 & ~_umask())
                out.close()
                os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                out.close()
            Path(tmp).unlink(missing_ok=True)
            raise
        with _writing(target):
            _sync_dir(target.parent)
        return name

    def save_spec(self, spec_hash: str, text: str) -> None:
        """Keeps the materialised spec that produced rows (once per hash)."""
        path = self.store.root / "specs" / f"{spec_hash}.toml"
        if path.exists():
            return
        from .atomic import AtomicWriter

        with _writing(path), AtomicWriter(path) as f:
            f.write(text)

    def compact(self, above: int = 1) -> None:
        """Merges the parts of each table that has more than ``above`` of them into one part
        (rows with the same key kept once), then rewrites the manifest to the current state.
        A sweep compacts with ``above = COMPACT_ABOVE``: rewriting the whole store after every
        sweep would cost time in proportion to everything stored so far."""
        self.flush()
        store = self.store
        merged_any = False
        for table in TABLES:
            parts = store.parts(table)
            if len(parts) <= max(1, above):
                continue
            merged_any = True
            name = self._merge_parts(table, parts)
            files = [f"{table}/{p.name}" for p in parts]
            store._append_line({"op": "replace", "table": table, "files": files, "file": name})
            for p in parts:
                p.unlink(missing_ok=True)
        if not merged_any:
            return
        # The log now folds to its current parts: rewrite it as such (atomically).
        store._rewrite_manifest(_read_manifest(store.manifest_path).parts)
