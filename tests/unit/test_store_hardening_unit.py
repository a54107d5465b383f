"""Issue 21: the store's defences below the command line — the manifest names only part files,
the query connection cannot reach beyond the parts nor grow past its memory limit, damaged
parts are found and set aside (and only they: a part that cannot be read, or whose columns
have the wrong types, is refused), categorize tells configurations apart, a store works in a
directory whose name is not UTF-8 or is a DuckDB pattern, and a full disk names the file and
loses no row."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import fill
from vcpulab.analysis import _settings
from vcpulab.store import ResultsStore, StoreDamaged, StoreError, StorePartInvalid, StorePartUnreadable


def make_store(root: Path, parts: int = 2) -> ResultsStore:
    store = ResultsStore(root)
    for p in range(parts):
        with store.writer() as w:
            w.append("runs", [{"key": f"k{p}{i}", "config_key": "c", "value": float(i)} for i in range(3)])
    return store


@pytest.mark.parametrize(
    "record",
    [
        {"op": "add", "table": "runs", "file": "../../outside.parquet"},
        {"op": "add", "table": "runs", "file": "/etc/passwd"},
        {"op": "add", "table": "runs", "file": "baselines/part-00.parquet"},
        {"op": "add", "table": "other", "file": "other/part-00.parquet"},
        {"op": "add", "table": "runs"},
        {"op": "replace", "table": "runs", "files": ["../x"], "file": "runs/part-00.parquet"},
        ["not", "an", "object"],
    ],
)
def test_a_manifest_names_only_part_files_of_its_table(tmp_path: Path, record: Any) -> None:
    store = make_store(tmp_path / "r", parts=1)
    with open(store.manifest_path, "a") as f:
        f.write(json.dumps(record) + "\n")
    with pytest.raises(StoreError, match="manifest is damaged"):
        store.parts("runs")


def test_the_query_connection_reads_the_parts_and_nothing_else(tmp_path: Path) -> None:
    store = make_store(tmp_path / "r")
    con = store.query_connection()
    assert con.execute("SELECT count(*), sum(value) FROM runs").fetchall() == [(6, 6.0)]
    manifest = store.manifest_path.resolve()
    before = manifest.read_bytes()
    for sql in (
        f"COPY (SELECT 1) TO '{tmp_path}/x.csv'",
        f"COPY (SELECT 'x') TO '{manifest}'",
        f"ATTACH '{tmp_path}/y.db'",
        f"EXPORT DATABASE '{tmp_path}/z'",
        f"SELECT * FROM read_text('{manifest}')",
        "SET enable_external_access = true",
        "SET memory_limit = '100GB'",
        "INSTALL httpfs",
    ):
        with pytest.raises(duckdb.Error):
            con.execute(sql)
    assert manifest.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]
    assert con.execute("SELECT count(*) FROM runs").fetchall() == [(6,)]


def test_the_query_connection_has_a_memory_limit(tmp_path: Path) -> None:
    store = make_store(tmp_path / "r", parts=1)
    con = store.query_connection(memory_limit="64MB")
    with pytest.raises(duckdb.OutOfMemoryException):
        con.execute("SELECT list(range) FROM range(50000000)").fetchall()


def test_damaged_parts_are_found_and_set_aside(tmp_path: Path) -> None:
    store = make_store(tmp_path / "r")
    first, second = store.parts("runs")
    first.write_bytes(first.read_bytes()[:100])
    found = store.damage()
    assert [(d.table, d.file) for d in found] == [("runs", f"runs/{first.name}")]
    with pytest.raises(StoreDamaged, match=f"runs/{first.name} is truncated"):
        store.connect()
    with pytest.raises(StoreDamaged):
        with store.writer():
            pass
    assert first.exists()  # reporting never moves anything

    damaged = first.read_bytes()
    with store.writer(repair=True) as w:
        assert [d.file for d in store.repaired] == [f"runs/{first.name}"]
        assert w._committed["runs"] == {"k10", "k11", "k12"}  # the lost rows are no longer stored
    assert store.parts("runs") == [second]
    assert (store.root / "damaged" / f"runs-{first.name}").read_bytes() == damaged
    assert first.name in (store.root / "damaged" / "NOTES.txt").read_text()
    assert store.keys() == {"k10", "k11", "k12"}


def test_a_missing_part_is_set_aside_too(tmp_path: Path) -> None:
    store = make_store(tmp_path / "r")
    first, second = store.parts("runs")
    first.unlink()
    with pytest.raises(StoreDamaged, match="listed in manifest.jsonl but missing"):
        store.keys()
    with store.writer(repair=True):
        pass
    assert store.parts("runs") == [second]
    assert "already missing" in (store.root / "damaged" / "NOTES.txt").read_text()


def part(scenario: str, config: str, spec: str, total: float, n: int) -> tuple[Any, ...]:
    return (scenario, config, spec, "v1", total, n)


def means(result: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(spec[0], {s: m["x"] for s, m in by.items()}) for spec, by in result]


def test_categorize_configurations() -> None:
    # Seeds 1 stored by spec A, seeds 2 by spec A2 (the same settings with more seeds): one
    # configuration, its means over all rows.
    same = [part("native", "N", "A", 2.0, 1), part("native", "N", "A2", 4.0, 1),
            part("UC", "U", "A", 1.0, 1), part("UC", "U", "A2", 3.0, 1)]  # fmt: skip
    assert means(_settings(same, ["x"])) == [("A", {"native": 3.0, "UC": 2.0, "OC": None, "OC2": None})]

    # Spec B changed a VM setting: its UC is another configuration; the native cell (stored
    # once, by A) is shared.
    other = [part("native", "N", "A", 2.0, 1), part("UC", "U", "A", 1.0, 1), part("UC", "U2", "B", 5.0, 1)]
    assert means(_settings(other, ["x"])) == [
        ("A", {"native": 2.0, "UC": 1.0, "OC": None, "OC2": None}),
        ("B", {"native": 2.0, "UC": 5.0, "OC": None, "OC2": None}),
    ]

    # Two native configurations (a machine setting changed): a spec that stored none of them
    # cannot tell which is its own.
    two = [part("native", "N", "A", 2.0, 1), part("native", "N2", "B", 6.0, 1), part("UC", "U3", "C", 1.0, 1)]
    assert means(_settings(two, ["x"]))[2] == ("C", {"native": None, "UC": 1.0, "OC": None, "OC2": None})


def test_a_commit_is_never_cut_by_ctrl_c(ctrl_c: None) -> None:
    # Ctrl-C between a part's rename and its manifest line used to leave a part no line names.
    import os
    import signal

    from vcpulab.store import _signals_held

    done = []
    with pytest.raises(KeyboardInterrupt):
        with _signals_held():
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):  # the handler would have run by now, between bytecodes
                done.append(1)
    assert len(done) == 1000
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


# --- paths pyarrow and DuckDB cannot take as they are ------------------------------------------------

ODD = os.fsdecode(b"st\xffore")  # the directory b'st\xffore' (not UTF-8) as Python names it


def test_a_store_in_a_non_utf8_directory_is_written_read_and_compacted(tmp_path: Path) -> None:
    store = make_store(tmp_path / ODD)  # writing a part failed: pyarrow cannot encode the path
    assert store.damage(full=True) == []
    assert store.keys() == {"k00", "k01", "k02", "k10", "k11", "k12"}
    con = store.query_connection()
    assert con.execute("SELECT count(*), sum(value) FROM runs").fetchall() == [(6, 6.0)]
    files = [f for (f,) in con.execute("SELECT DISTINCT filename FROM read_parquet(" + _listed(store) + ")").fetchall()]
    assert all(f.startswith("/proc/self/fd/") for f in files)  # the parts, reached through the directory's fd
    # The sandbox holds through that path too: nothing but the parts.
    base = files[0].rsplit("/runs/", 1)[0]
    for sql in (
        f"SELECT * FROM read_text('{base}/manifest.jsonl')",
        f"SELECT * FROM read_text('{base}/runs/../manifest.jsonl')",
        f"COPY (SELECT 1) TO '{base}/x.csv'",
        "SELECT * FROM glob('/proc/self/fd/*')",
    ):
        with pytest.raises(duckdb.Error):
            con.execute(sql).fetchall()
    with store.writer() as w:
        w.compact()
    assert len(store.parts("runs")) == 1 and store.keys() == {"k00", "k01", "k02", "k10", "k11", "k12"}
    with store.writer(repair=True):
        pass
    assert store.repaired == [] and not (store.root / "damaged").exists()


def _listed(store: ResultsStore) -> str:
    return "[" + ", ".join(f"'{f}'" for f in store._duckdb_files()["runs"]) + "]"


def test_a_store_named_tilde_is_not_the_home_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # pyarrow and DuckDB expand a leading ~: `--results '~'` (a directory of that name here)
    # read ~/runs/part-... of the home directory, and the store was reported damaged.
    monkeypatch.chdir(tmp_path)
    make_store(Path("~"))
    store = ResultsStore("~")
    assert store.damage(full=True) == []
    assert store.keys() == {"k00", "k01", "k02", "k10", "k11", "k12"}
    assert store.query_connection().execute("SELECT count(*) FROM runs").fetchall() == [(6,)]


def test_a_store_whose_path_is_a_duckdb_pattern_reads_only_its_own_parts(tmp_path: Path) -> None:
    # DuckDB expands * ? [ ] in a file name: the parts of a sibling directory matching it were
    # read too (every row twice).
    store = make_store(tmp_path / "st*re")
    shutil.copytree(store.root, tmp_path / "stXre")
    assert store.connect().execute("SELECT count(*) FROM runs").fetchall() == [(6,)]
    assert store.query_connection().execute("SELECT count(*) FROM runs").fetchall() == [(6,)]


# --- only what does not parse is damage ----------------------------------------------------------------


def test_an_io_error_is_not_damage_and_repair_moves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = make_store(tmp_path / "r")
    first, second = store.parts("runs")
    before = {p: p.read_bytes() for p in (first, second)}
    from vcpulab import store as store_module

    real_read = store_module._TrackedFile.read
    real_readinto = store_module._TrackedFile.readinto

    def failing(real: Any) -> Any:
        def call(self: Any, *args: Any) -> Any:
            if self.name is not None and os.path.samefile(self.fileno(), first):
                self.error = OSError(errno.EIO, os.strerror(errno.EIO))
                raise self.error
            return real(self, *args)

        return call

    monkeypatch.setattr(store_module._TrackedFile, "read", failing(real_read))
    monkeypatch.setattr(store_module._TrackedFile, "readinto", failing(real_readinto))
    for full in (False, True):
        with pytest.raises(StorePartUnreadable, match=f"runs/{first.name}: Input/output error"):
            store.damage(full=full)
    with pytest.raises(StorePartUnreadable, match="nothing is set aside"):
        with store.writer(repair=True):
            pass
    assert store.repaired == [] and not (store.root / "damaged").exists()
    assert {p: p.read_bytes() for p in (first, second)} == before
    monkeypatch.undo()
    assert store.damage(full=True) == []


# --- columns of the wrong type ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "row", "message"),
    [
        ("runs", {"key": 1, "value": 1.0}, "column 'key' is of type int64, expected text"),
        ("runs", {"key": "a", "delta_eta_t": "0.1"}, "column 'delta_eta_t' is of type string, expected a number"),
        ("runs", {"key": "a", "vcpus": 2.5}, "column 'vcpus' is of type double, expected an integer"),
        (
            "runs",
            {"key": "a", "my_metric": [1.0]},
            "column 'my_metric' is of type list<element: double>, expected a number",
        ),
        ("runs", {"value": 1.0}, "column 'key' is missing"),
        ("baselines", {"key": "a", "summary_json": 3}, "column 'summary_json' is of type int64, expected text"),
    ],
)
def test_a_part_with_columns_of_the_wrong_type_is_refused(
    tmp_path: Path, table: str, row: dict[str, Any], message: str
) -> None:
    store = make_store(tmp_path / "r", parts=1)
    name = f"{table}/part-00.parquet"
    pq.write_table(pa.Table.from_pylist([row]), store.root / name)
    with open(store.manifest_path, "a") as f:
        f.write(json.dumps({"op": "add", "table": table, "file": name}) + "\n")
    for read in (store.check, store.connect, store.query_connection, lambda: store.damage(full=True)):
        with pytest.raises(StorePartInvalid, match=f"{name} is not as vcpulab writes it: {re.escape(message)}"):
            read()
    with pytest.raises(StorePartInvalid):
        with store.writer(repair=True):
            pass
    assert (store.root / name).exists() and not (store.root / "damaged").exists()


def test_the_columns_vcpulab_writes_pass_the_check(tmp_path: Path) -> None:
    # Every column of a real row (run_row of a result with exits, breakdown and metrics), and
    # an all-NULL column (a part of native cells only has no omega).
    from vcpulab.store import run_row

    result = {
        "workload": "lock", "workload_version": 1, "workload_hash": "h", "scenario": "native", "vcpus": 2,
        "threads": 2, "oc_vms": 2, "seed": 1, "variant": None, "t_native_s": 0.1, "t_virt_s": None,
        "omega": None, "events": 10, "guest_ns": 5, "exits": {"HLT": 3}, "host_ns_by_reason": {"HLT": 7},
        "breakdown": {"user": {"compute": 9}}, "metrics": {"parallelism": 1.5}, "run": {"x": 1},
    }  # fmt: skip
    store = ResultsStore(tmp_path / "r")
    with store.writer() as w:
        w.append("runs", [run_row(result, key="k", config_key="c", spec_hash="s", version="v")])
        w.add_baselines([("b", "{}")], "v")
    store.check()
    assert store.keys() == {"k"}


# --- a full disk -----------------------------------------------------------------------------------------




def test_a_full_disk_names_the_part_and_keeps_every_row(small_disk: Path) -> None:
    store = ResultsStore(small_disk / "r")
    rows = [{"key": f"k{i}", "result_json": os.urandom(3000).hex()} for i in range(4)]  # a part of several pages
    part = re.escape(str(store.root / "runs")) + r"/part-[0-9a-f]+\.parquet"
    with pytest.raises(StoreError, match=rf"^cannot write '{part}': No space left on device$"):
        with store.writer() as w:
            w.append("runs", rows)  # journaled
            filler = fill(small_disk)
            w.flush()  # pyarrow's OSError named no file ("cannot access No space left on device")
    assert store.parts("runs") == [] and not list((store.root / "runs").iterdir())  # no partial part left
    # Nothing lost: the rows are still journaled (a second try at the end dropped them, as if
    # committed), and the next writer commits them.
    assert [json.loads(line)["row"]["key"] for line in (store.root / "journal.jsonl").read_text().splitlines()] == [
        "k0", "k1", "k2", "k3"
    ]  # fmt: skip
    filler.unlink()
    with store.writer():
        pass
    assert store.keys() == {"k0", "k1", "k2", "k3"}


def test_a_failed_commit_is_tried_again(small_disk: Path) -> None:
    # The writer's own retry (its final flush after an error) committed nothing and emptied
    # the journal: the rows were lost with the store still open.
    store = ResultsStore(small_disk / "r")
    with store.writer() as w:
        w.append("runs", [{"key": f"k{i}", "result_json": os.urandom(3000).hex()} for i in range(4)])
        filler = fill(small_disk)
        with pytest.raises(StoreError, match="No space left on device"):
            w.flush()
        filler.unlink()
        w.flush()
    assert store.keys() == {"k0", "k1", "k2", "k3"}


def test_a_manifest_line_is_appended_whole_or_not_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A full disk part-way through a line left a torn line, and the next line appended after it
    # made the manifest unreadable.
    store = make_store(tmp_path / "r", parts=1)
    before = store.manifest_path.read_bytes()
    manifest = os.stat(store.manifest_path).st_ino
    real_write = os.write

    def write(fd: int, data: Any) -> int:
        if os.fstat(fd).st_ino == manifest:
            real_write(fd, bytes(data[:10]))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    with store.writer() as w:
        w.append("runs", [{"key": "new", "value": 1.0}])
        monkeypatch.setattr(os, "write", write)
        with pytest.raises(StoreError, match=rf"^cannot write '{re.escape(str(store.manifest_path))}': No space"):
            w.flush()
        monkeypatch.undo()
        assert store.manifest_path.read_bytes() == before
        w.flush()  # room again
    assert store.keys() == {"k00", "k01", "k02", "new"}
