"""The results store (Parquet parts committed through manifest.jsonl) and the sweep's planning
helpers, without the command line."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

import vcpulab
from vcpulab.store import SCALARS, ResultsStore, StoreError, result_from_row, run_row
from vcpulab.sweep import (
    CELL_FIELDS,
    InlineExecutor,
    OnlyError,
    SpecPayload,
    plan_sweep,
    run_sweep,
    select_cells,
)
from vcpulab.sweep import parse_only as _parse_only

FOUR = ("native", "UC", "OC", "OC2")


def parse_only(*texts: str) -> dict[str, set[str]]:
    return _parse_only(list(texts))


def small_plan(
    scenarios: tuple[str, ...] = FOUR, seeds: tuple[int, ...] = (1,), workloads: tuple[str, ...] = ("lock",)
) -> vcpulab.Plan:
    experiment = {"workloads": list(workloads), "scenarios": list(scenarios), "vcpus": [2], "seeds": list(seeds)}
    return vcpulab.plan({"experiment": experiment})


@pytest.fixture(scope="module")
def real_results() -> list[dict[str, Any]]:
    """Results of real cells of two workloads (their counters and metrics differ)."""
    out = []
    for wl in ("lock", "heapchurn"):
        p = small_plan(workloads=(wl,))
        out += [json.loads(p.run_cell(i)) for i in range(len(p.cells()))]
    return out


def rows_of(results: list[dict[str, Any]], prefix: str = "k") -> list[dict[str, Any]]:
    return [
        run_row(r, key=f"{prefix}{i}", config_key=f"c{i}", spec_hash="h" * 16, version="test")
        for i, r in enumerate(results)
    ]


def sql_name(name: str) -> str:
    return re.sub(r"[^0-9a-zA-Z]+", "_", name).strip("_").lower()


def append_one_part_per_row(store: ResultsStore, rows: list[dict[str, Any]]) -> None:
    """Appends ``rows`` to ``runs`` in one writer session each, so each becomes a part."""
    for row in rows:
        with store.writer() as w:
            w.append("runs", [row])


def manifest_lines(root: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (root / "manifest.jsonl").read_text().splitlines()]


def part_files(root: Path, table: str) -> list[str]:
    return sorted(p.name for p in (root / table).iterdir())


# --- run_row ----------------------------------------------------------------------------------

SYNTHETIC = {
    "workload": "w",
    "scenario": "OC2",
    "vcpus": 4,
    "seed": 7,
    "delta_eta_t": 0.25,
    "wall_s": 0.5,
    "exits": {"MSR-write ICR": 3, "HLT": 2},
    "host_ns_by_reason": {"HLT": 100, "SCHED": 40},
    "breakdown": {"host": {"exit HLT": 90, "vcpu_switch": 10}, "Kernel": {"syscall": 5}},
    "metrics": {"TLB shootdowns/s": 1.5, "parallelism": 3.0},
    "run": {"layout": "2 VM(s)", "instances": [{"name": "vm0"}]},
    "instances": [{"name": "vm0", "t_s": 1.0}],
}


def test_run_row_flattens_counters_and_metrics() -> None:
    row = run_row(SYNTHETIC, key="K", config_key="C", spec_hash="S", version="V")
    names = list(row)
    assert names[:4] == ["key", "config_key", "spec_hash", "vcpulab_version"]
    assert [row["key"], row["config_key"], row["spec_hash"], row["vcpulab_version"]] == ["K", "C", "S", "V"]
    # Every scalar column is there, in order, None when the result lacks it.
    assert names[4 : 4 + len(SCALARS)] == list(SCALARS)
    assert row["workload"] == "w" and row["vcpus"] == 4 and row["seed"] == 7 and row["wall_s"] == 0.5
    assert row["t_native_s"] is None and row["omega"] is None
    flat = {
        "exit_msr_write_icr": 3,
        "exit_hlt": 2,
        "host_ns_hlt": 100,
        "host_ns_sched": 40,
        "ns_host_exit_hlt": 90,
        "ns_host_vcpu_switch": 10,
        "ns_kernel_syscall": 5,
        "tlb_shootdowns_s": 1.5,
        "parallelism": 3.0,
    }
    middle = names[4 + len(SCALARS) : -2]
    assert middle == sorted(flat), "flattened columns come sorted after the scalars"
    assert {k: row[k] for k in middle} == flat
    assert names[-2:] == ["result_json", "run_json"]
    # result_json is the result without "run"; run_json the scenario record.
    assert "run" not in json.loads(row["result_json"])
    assert json.loads(row["run_json"]) == SYNTHETIC["run"]
    assert result_from_row(row) == SYNTHETIC


def test_run_row_without_optional_parts() -> None:
    row = run_row({"workload": "w"}, key="K", config_key="C", spec_hash="S", version="V")
    assert list(row)[-2:] == ["result_json", "run_json"]
    assert not [k for k in row if k.startswith(("exit_", "host_ns_", "ns_"))]
    assert json.loads(row["run_json"]) is None
    assert result_from_row(row) == {"workload": "w", "run": None}


def test_run_row_refuses_a_metric_named_like_a_fixed_column() -> None:
    with pytest.raises(RuntimeError, match="seed"):
        run_row({"metrics": {"Seed": 1.0}}, key="K", config_key="C", spec_hash="S", version="V")


def test_run_row_of_real_results_round_trips(real_results: list[dict[str, Any]]) -> None:
    for result in real_results:
        row = run_row(result, key="K", config_key="C", spec_hash="S", version="V")
        assert result_from_row(row) == result  # floats included: JSON keeps them exactly
        for reason, n in result["exits"].items():
            assert row[f"exit_{sql_name(reason)}"] == n, reason
        for name, value in result["metrics"].items():
            assert row[sql_name(name)] == value, name
        for reason, ns in result["host_ns_by_reason"].items():
            assert row[f"host_ns_{sql_name(reason)}"] == ns, reason
        for layer, causes in result["breakdown"].items():
            for cause, ns in causes.items():
                assert row[f"ns_{sql_name(layer)}_{sql_name(cause)}"] == ns


def stored_records(store: ResultsStore) -> dict[str, dict[str, Any]]:
    """Every stored run row by key, NULL columns left out."""
    cur = store.connect().execute("SELECT * FROM runs")
    names = [d[0] for d in cur.description]
    out = {}
    for values in cur.fetchall():
        rec = {k: v for k, v in zip(names, values, strict=True) if v is not None}
        out[rec["key"]] = rec
    return out


def non_null(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if v is not None}


def test_rows_with_the_same_columns_survive_parquet_exactly(tmp_path: Path, real_results: list[dict[str, Any]]) -> None:
    store = ResultsStore(tmp_path / "r")
    rows = [r for r in rows_of(real_results) if r["scenario"] == "OC"]  # same workload → same columns
    same = [r for r in rows if list(r) == list(rows[0])]
    assert len(same) >= 1
    with store.writer() as w:
        w.append("runs", same)
    assert stored_records(store) == {r["key"]: non_null(r) for r in same}
    stored = store.rows(r["key"] for r in same)
    for row in same:
        assert stored[row["key"]] == row  # every column, exactly


def test_a_batch_of_different_cells_keeps_every_column(tmp_path: Path, real_results: list[dict[str, Any]]) -> None:
    # A sweep stores many cells at once (a task's cells, or a batch of finished cells): a native
    # cell has no exit counters, lock and heapchurn have different metrics.
    store = ResultsStore(tmp_path / "r")
    rows = rows_of(real_results)
    assert rows[0]["scenario"] == "native"
    with store.writer() as w:
        w.append("runs", rows)
    assert stored_records(store) == {r["key"]: non_null(r) for r in rows}


def test_append_keeps_the_columns_of_every_row(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path / "r")
    with store.writer() as w:
        w.append("runs", [{"key": "a", "x": 1}, {"key": "b", "x": 2, "only_b": 3.5}])
    assert store.connect().execute("SELECT key, only_b FROM runs ORDER BY key").fetchall() == [("a", None), ("b", 3.5)]


def test_every_row_of_a_result_survives_when_stored_one_by_one(
    tmp_path: Path, real_results: list[dict[str, Any]]
) -> None:
    store = ResultsStore(tmp_path / "r")
    rows = rows_of(real_results)
    append_one_part_per_row(store, rows)
    assert len(store.parts("runs")) == len(rows)
    assert stored_records(store) == {r["key"]: non_null(r) for r in rows}
    for key, rec in store.rows(r["key"] for r in rows).items():
        assert result_from_row(rec) == real_results[int(key[1:])]


# --- writing and reading ------------------------------------------------------------------------

# What a store directory holds (a writer may keep more bookkeeping, e.g. a journal file).
LAYOUT = {".lock", "baselines", "manifest.jsonl", "runs", "specs"}


def test_new_store_layout_and_reads(tmp_path: Path, real_results: list[dict[str, Any]]) -> None:
    root = tmp_path / "r"
    store = ResultsStore(root)
    assert store.keys() == set() and store.baselines() == {} and store.rows(["x"]) == {}
    rows = rows_of(real_results)
    with store.writer() as w:
        assert LAYOUT <= {p.name for p in root.iterdir()}
        assert manifest_lines(root) == [{"format": "vcpulab-results", "op": "format", "version": 1}]
        assert store.keys() == set()  # the views exist, empty
        assert store.connect().execute("SELECT count(*) FROM runs").fetchone() == (0,)
        w.append("runs", rows[:3])
        w.append("runs", rows[3:])
        w.append("runs", [])
        w.add_baselines([("b1", '{"x":1}'), ("b2", '{"x":2.5}')], "test")
        w.save_spec("abc", "[experiment]\n")
        w.save_spec("abc", "ignored: one file per hash\n")
    # Once the writer is done, everything appended is committed.
    lines = manifest_lines(root)
    assert lines[0] == {"format": "vcpulab-results", "op": "format", "version": 1}
    assert {rec["op"] for rec in lines[1:]} == {"add"}
    for table, n in (("runs", len(rows)), ("baselines", 2)):
        adds = [rec for rec in lines if rec.get("table") == table]
        assert sum(rec["rows"] for rec in adds) == n
        assert [rec["file"] for rec in adds] == [f"{table}/{p.name}" for p in store.parts(table)]
        assert sorted(rec["file"].split("/")[1] for rec in adds) == part_files(root, table)
    assert (root / "specs" / "abc.toml").read_text() == "[experiment]\n"
    assert sorted(p.name for p in (root / "specs").iterdir()) == ["abc.toml"]

    assert store.keys() == {r["key"] for r in rows}
    assert store.baselines() == {"b1": '{"x":1}', "b2": '{"x":2.5}'}
    got = store.rows(["k1", "k5", "no-such-key"])
    assert set(got) == {"k1", "k5"}
    assert {k: got["k1"][k] for k in ("key", "result_json", "run_json")} == {
        k: rows[1][k] for k in ("key", "result_json", "run_json")
    }
    assert store.rows([]) == {}
    # open_existing accepts it; reading needs no lock.
    assert ResultsStore.open_existing(root).keys() == store.keys()


def test_a_writer_that_appends_nothing_commits_nothing(tmp_path: Path) -> None:
    root = tmp_path / "r"
    with ResultsStore(root).writer() as w:
        w.append("runs", [])
        w.add_baselines([], "test")
    assert [rec["op"] for rec in manifest_lines(root)] == ["format"]
    assert part_files(root, "runs") == [] and part_files(root, "baselines") == []
    before = (root / "manifest.jsonl").read_bytes()
    with ResultsStore(root).writer():
        pass
    assert (root / "manifest.jsonl").read_bytes() == before  # no second format line


def test_torn_last_manifest_line_is_ignored_then_truncated(tmp_path: Path, real_results: list[dict[str, Any]]) -> None:
    root = tmp_path / "r"
    store = ResultsStore(root)
    rows = rows_of(real_results)
    with store.writer() as w:
        w.append("runs", rows[:2])
    good = (root / "manifest.jsonl").read_bytes()
    # A crash while appending the line of a part that was already renamed into place.
    part = root / "runs" / "part-0123456789abcdef.parquet"
    shutil.copy(store.parts("runs")[0], part)
    with open(root / "manifest.jsonl", "ab") as f:
        f.write(b'{"file": "runs/part-0123456789abcdef.parquet", "op": "add", "table": "runs"}')  # no newline
    assert len(store.parts("runs")) == 1
    assert store.keys() == {"k0", "k1"}
    assert store.connect().execute("SELECT count(*) FROM runs").fetchone() == (2,)  # not 4

    with store.writer() as w:
        assert (root / "manifest.jsonl").read_bytes() == good  # truncated to the last whole line
        assert not part.exists()  # its part was never committed: removed
        w.append("runs", rows_of(real_results[2:3], prefix="n"))
    lines = manifest_lines(root)  # every line parses: the new one was not glued to the torn one
    assert [rec["op"] for rec in lines] == ["format", "add", "add"]
    assert store.keys() == {"k0", "k1", "n0"}


def test_torn_line_alone_is_not_an_error(tmp_path: Path) -> None:
    root = tmp_path / "r"
    with ResultsStore(root).writer():
        pass
    with open(root / "manifest.jsonl", "a") as f:
        f.write('{"op": "ad')
    assert ResultsStore(root).keys() == set()


def test_orphan_parts_are_never_read_and_removed_by_the_next_writer(
    tmp_path: Path, real_results: list[dict[str, Any]]
) -> None:
    root = tmp_path / "r"
    store = ResultsStore(root)
    rows = rows_of(real_results)
    with store.writer() as w:
        w.append("runs", rows[:2])
        w.add_baselines([("b1", "{}")], "test")
    committed_runs = part_files(root, "runs")
    committed_base = part_files(root, "baselines")
    # A crash after the rename but before the manifest line; and one before the rename.
    other = ResultsStore(tmp_path / "other")
    with other.writer() as w:
        w.append("runs", rows_of(real_results[2:], prefix="orphan"))
        w.add_baselines([("orphan-b", "{}")], "test")
    shutil.copy(other.parts("runs")[0], root / "runs" / "part-ffffffffffffffff.parquet")
    shutil.copy(other.parts("baselines")[0], root / "baselines" / "part-eeeeeeeeeeeeeeee.parquet")
    (root / "runs" / ".part-abc.tmp").write_bytes(b"half a parquet file")

    assert store.keys() == {"k0", "k1"}
    assert store.baselines() == {"b1": "{}"}
    assert store.rows(["orphan0"]) == {}
    assert store.connect().execute("SELECT count(*) FROM runs WHERE key LIKE 'orphan%'").fetchone() == (0,)

    with store.writer():
        assert part_files(root, "runs") == committed_runs
        assert part_files(root, "baselines") == committed_base
    assert store.keys() == {"k0", "k1"}


def test_compaction_keeps_one_part_per_table_and_the_same_rows(
    tmp_path: Path, real_results: list[dict[str, Any]]
) -> None:
    root = tmp_path / "r"
    store = ResultsStore(root)
    rows = rows_of(real_results)
    native = [r for r in rows if r["scenario"] == "native"]  # no t_native_s, no exit counters
    assert native and len(native) < len(rows)
    # Several sessions, so several parts (each part holds rows of the same columns).
    sessions = [[r] for r in rows] + [[rows[-1]]]  # the last key a second time
    for i, batch in enumerate(sessions):
        with store.writer() as w:
            w.append("runs", batch)
            w.add_baselines([(f"b{i % 3}", f'{{"a":{i % 3}}}')], "test")
    assert len(store.parts("runs")) >= len(rows)
    assert len(store.parts("baselines")) >= 3

    def snapshot() -> tuple[list[str], list[str], list[tuple[Any, ...]]]:
        con = store.connect()
        cur = con.execute("SELECT DISTINCT * FROM runs")
        names = sorted(d[0] for d in cur.description)
        base = con.execute("SELECT DISTINCT * FROM baselines ORDER BY key").fetchall()
        return names, sorted(map(repr, cur.fetchall())), base

    before = snapshot()
    assert stored_records(store) == {r["key"]: non_null(r) for r in rows}
    with store.writer() as w:
        w.compact()
        assert len(store.parts("runs")) == 1 and len(store.parts("baselines")) == 1
        assert len(part_files(root, "runs")) == 1 and len(part_files(root, "baselines")) == 1
        lines = manifest_lines(root)
        assert lines[0] == {"format": "vcpulab-results", "op": "format", "version": 1}
        assert sorted((rec["op"], rec["table"]) for rec in lines[1:]) == [("add", "baselines"), ("add", "runs")]
        after = snapshot()
        assert after == before
        con = store.connect()
        assert con.execute("SELECT count(*), count(DISTINCT key) FROM runs").fetchone() == (len(rows), len(rows))
        assert con.execute("SELECT count(*) FROM baselines").fetchone() == (3,)
        assert store.baselines() == {"b0": '{"a":0}', "b1": '{"a":1}', "b2": '{"a":2}'}
        assert stored_records(store) == {r["key"]: non_null(r) for r in rows}
        for key, rec in store.rows(r["key"] for r in rows).items():
            assert result_from_row(rec) == real_results[int(key[1:])]
        # Compacting again changes nothing.
        w.compact()
        assert snapshot() == after and len(store.parts("runs")) == 1
    # Appending after a compaction still works, and the compacted store reopens.
    with store.writer() as w:
        w.append("runs", rows_of(real_results[:1], prefix="new"))
    assert store.keys() == {r["key"] for r in rows} | {"new0"}
    assert len(store.parts("runs")) == 2


def test_compaction_streams_part_by_part(tmp_path: Path, real_results: list[dict[str, Any]]) -> None:
    # A store's result JSON can exceed the 2 GiB one Arrow string array holds (a full
    # `vcpulab reproduce` store did: "offset overflow while concatenating arrays"), so the
    # merged part is written one row group per source part, never as one concatenated table.
    import pyarrow.parquet as pq

    root = tmp_path / "r"
    store = ResultsStore(root)
    rows = rows_of(real_results)
    append_one_part_per_row(store, rows)
    with store.writer() as w:
        w.append("runs", [rows[0]])  # a key stored twice: journaled, not a new part
        w.compact()
    (part,) = store.parts("runs")
    meta = pq.ParquetFile(part).metadata
    assert meta.num_row_groups == len(rows) and meta.num_rows == len(rows)
    assert store.keys() == {r["key"] for r in rows}


def test_compaction_of_a_single_part_keeps_it(tmp_path: Path, real_results: list[dict[str, Any]]) -> None:
    root = tmp_path / "r"
    store = ResultsStore(root)
    with store.writer() as w:
        w.append("runs", rows_of(real_results))
    part = part_files(root, "runs")
    assert len(part) == 1
    with store.writer() as w:
        w.compact()
    assert part_files(root, "runs") == part
    assert part_files(root, "baselines") == []
    assert [(rec["op"], rec["table"]) for rec in manifest_lines(root)[1:]] == [("add", "runs")]


def test_compaction_above_a_part_count_leaves_smaller_tables_alone(
    tmp_path: Path, real_results: list[dict[str, Any]]
) -> None:
    root = tmp_path / "r"
    store = ResultsStore(root)
    rows = rows_of(real_results)
    append_one_part_per_row(store, rows)
    with store.writer() as w:
        w.add_baselines([("b", "{}")], "test")
    n = len(rows)
    assert n >= 3 and len(store.parts("runs")) == n
    before = manifest_lines(root)
    with store.writer() as w:
        w.compact(above=n)  # not more than `above` parts: nothing to do, the manifest untouched
    assert len(store.parts("runs")) == n and manifest_lines(root) == before
    with store.writer() as w:
        w.compact(above=n - 1)  # runs has more: merged; baselines has one part: kept
    assert len(store.parts("runs")) == 1 and len(store.parts("baselines")) == 1
    assert store.keys() == {r["key"] for r in rows}


def test_one_writer_at_a_time(tmp_path: Path) -> None:
    root = tmp_path / "r"
    with ResultsStore(root).writer() as w:
        w.add_baselines([("a", "{}")], "test")
    with ResultsStore(root).writer() as w:
        w.add_baselines([("b", "{}")], "test")
        with pytest.raises(StoreError, match="another vcpulab process"):
            with ResultsStore(root).writer():
                pass  # pragma: no cover
        # Readers need no lock.
        assert "a" in ResultsStore(root).baselines()
    with ResultsStore(root).writer() as w:  # released
        w.add_baselines([("c", "{}")], "test")
    assert set(ResultsStore(root).baselines()) == {"a", "b", "c"}


def test_a_directory_that_is_not_a_store_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "mine"
    root.mkdir()
    (root / "notes.txt").write_text("keep me\n")
    with pytest.raises(StoreError, match="not a vcpulab results directory"):
        with ResultsStore(root).writer():
            pass  # pragma: no cover
    assert sorted(p.name for p in root.iterdir()) == ["notes.txt"]  # nothing created in it
    with pytest.raises(StoreError, match="not a vcpulab results directory"):
        ResultsStore.open_existing(root)
    with pytest.raises(StoreError, match="is a file"):
        with ResultsStore(root / "notes.txt").writer():
            pass  # pragma: no cover
    with pytest.raises(StoreError, match="not a directory"):
        ResultsStore.open_existing(tmp_path / "missing")
    assert not (tmp_path / "missing").exists()
    # An empty directory is fine.
    (tmp_path / "empty").mkdir()
    with ResultsStore(tmp_path / "empty").writer():
        pass
    assert (tmp_path / "empty" / "manifest.jsonl").exists()


@pytest.mark.parametrize(
    "line, message",
    [
        ("this is not json\n", "not a JSON line"),
        ('{"op": "delete", "table": "runs"}\n', "unknown manifest operation"),
    ],
)
def test_a_damaged_manifest_is_an_error(tmp_path: Path, line: str, message: str) -> None:
    root = tmp_path / "r"
    with ResultsStore(root).writer():
        pass
    with open(root / "manifest.jsonl", "a") as f:
        f.write(line)
    with pytest.raises(StoreError, match=message):
        ResultsStore(root).keys()


def test_another_format_version_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "r"
    root.mkdir()
    (root / "manifest.jsonl").write_text('{"format": "vcpulab-results", "op": "format", "version": 99}\n')
    with pytest.raises(StoreError, match="version 99"):
        ResultsStore(root).keys()


# --- --only -----------------------------------------------------------------------------------


def test_parse_only() -> None:
    assert parse_only() == {}
    assert parse_only("workload=lock") == {"workload": {"lock"}}
    assert parse_only("workload=parsec.dedup,vcpus=16|32") == {"workload": {"parsec.dedup"}, "vcpus": {"16", "32"}}
    # Repeated filters and repeated fields add alternatives; blanks and empty parts are ignored.
    assert parse_only(" seed = 1 | 2 ,", "seed=3", "scenario=UC") == {"seed": {"1", "2", "3"}, "scenario": {"UC"}}
    assert set(CELL_FIELDS) == {"workload", "scenario", "vcpus", "threads", "oc_vms", "seed", "variant"}
    for name in CELL_FIELDS:
        assert parse_only(f"{name}=x") == {name: {"x"}}


@pytest.mark.parametrize(
    "text, message",
    [
        ("vcpus", "expected FIELD=VALUE"),
        ("vcpus=", "expected FIELD=VALUE"),
        ("vcpus= ", "expected FIELD=VALUE"),
        ("workload=lock,cores=4", "unknown field 'cores'"),
        ("Workload=lock", "unknown field 'Workload'"),
    ],
)
def test_parse_only_errors(text: str, message: str) -> None:
    with pytest.raises(OnlyError, match=message):
        parse_only(text)
    assert issubclass(OnlyError, ValueError)


def test_select_cells() -> None:
    plan = vcpulab.plan(
        {"experiment": {"workloads": ["lock", "ep"], "scenarios": list(FOUR), "vcpus": [2, 4], "seeds": [1, 2]}}
    )
    cells = plan.cells()
    assert len(cells) == 32

    def sel(*texts: str) -> list[tuple[Any, ...]]:
        picked = select_cells(cells, parse_only(*texts))
        return [(cells[i]["workload"], cells[i]["scenario"], cells[i]["vcpus"], cells[i]["seed"]) for i in picked]

    assert select_cells(cells, {}) == list(range(32))
    got = sel("workload=lock,vcpus=4")
    assert len(got) == 8 and all(w == "lock" and v == 4 for w, _, v, _ in got)
    assert sel("workload=lock,vcpus=4,scenario=uc|oc2,seed=2") == [("lock", "UC", 4, 2), ("lock", "OC2", 4, 2)]
    assert sel("scenario=NATIVE", "seed=1", "vcpus=2") == [("lock", "native", 2, 1), ("ep", "native", 2, 1)]
    assert sel("workload=lock|ep,seed=1|2,vcpus=2|4,scenario=OC") == sel("scenario=OC")
    assert len(sel("scenario=OC")) == 8
    assert sel("workload=LOCK") == []  # only scenario names ignore case
    assert sel("vcpus=3") == [] and sel("workload=lock,workload=nope") == sel("workload=lock")
    # threads, oc_vms and variant match their string forms too (variant is "" without vary,
    # which a filter cannot name: `variant=` is refused by parse_only).
    assert len(select_cells(cells, {"threads": {"4"}, "oc_vms": {"2"}, "variant": {""}})) == 16
    # Order is the plan's.
    idx = select_cells(cells, parse_only("scenario=OC2|native"))
    assert idx == sorted(idx)


# --- planning a sweep -------------------------------------------------------------------------


def jobs(plan: vcpulab.Plan) -> list[dict[str, Any]]:
    return [json.loads(plan.cell_jobs(i)) for i in range(len(plan.cells()))]


def test_plan_sweep_all_scenarios_needs_only_the_oc2_baseline() -> None:
    plan = small_plan(seeds=(1, 2))
    cells = plan.cells()
    j = jobs(plan)
    sweep = plan_sweep(plan, range(len(cells)), set(), {})
    assert sweep.cells == list(range(8)) and sweep.stored == [] and sweep.known == {}
    baselines = [t for t in sweep.tasks if t.kind == "baseline"]
    cell_tasks = [t for t in sweep.tasks if t.kind == "cell"]
    assert sweep.tasks == baselines + cell_tasks  # baselines first
    # One baseline per seed: OC2's two native instances, the only dependency no cell provides.
    assert [(t.layout, t.count, cells[t.cells[0]]["scenario"], cells[t.cells[0]]["seed"]) for t in baselines] == [
        ("native", 2, "OC2", 1),
        ("native", 2, "OC2", 2),
    ]
    for t in baselines:
        assert t.key == j[t.cells[0]]["base"]["key"] and t.deps == ()
    # OC and OC2 (same k) share their own run: one task; native and UC one each.
    scenarios = [tuple(cells[i]["scenario"] for i in t.cells) for t in cell_tasks]
    assert scenarios == [("native",), ("UC",), ("OC", "OC2")] * 2
    for t in cell_tasks:
        assert all(j[i]["main"]["key"] == t.key for i in t.cells)
        assert len(set(t.deps)) == len(t.deps) and t.key not in t.deps
        expected = {j[i][r]["key"] for i in t.cells for r in ("base", "alone") if j[i][r] is not None} - {t.key}
        assert set(t.deps) == expected
    native, uc, oc = cell_tasks[:3]
    assert native.deps == () and uc.deps == (native.key,)
    assert set(oc.deps) == {native.key, uc.key, baselines[0].key}
    # Every simulation is run exactly once.
    assert len({t.key for t in sweep.tasks}) == len(sweep.tasks)


def test_plan_sweep_oc2_alone_needs_its_baseline_and_reference() -> None:
    plan = small_plan(scenarios=("OC2",))
    j = jobs(plan)[0]
    sweep = plan_sweep(plan, [0], set(), {})
    assert [(t.kind, t.layout, t.count) for t in sweep.tasks] == [
        ("baseline", "native", 2),
        ("baseline", "vms", 1),
        ("cell", "vms", 2),  # a cell task's own simulation: its summary is reported too
    ]
    base, alone, cell = sweep.tasks
    assert (base.key, alone.key) == (j["base"]["key"], j["alone"]["key"])
    assert cell.cells == (0,) and cell.key == j["main"]["key"] and cell.deps == (base.key, alone.key)


def test_plan_sweep_uc_alone_needs_the_native_run() -> None:
    plan = small_plan(scenarios=("UC",))
    j = jobs(plan)[0]
    sweep = plan_sweep(plan, [0], set(), {})
    assert [(t.kind, t.layout, t.count, t.key) for t in sweep.tasks] == [
        ("baseline", "native", 1, j["base"]["key"]),
        ("cell", "vms", 1, j["main"]["key"]),
    ]
    assert sweep.tasks[1].deps == (j["base"]["key"],)


def test_plan_sweep_selection_decides_what_is_a_baseline() -> None:
    plan = small_plan()
    cells = plan.cells()
    j = jobs(plan)
    oc2 = next(i for i, c in enumerate(cells) if c["scenario"] == "OC2")
    native = next(i for i, c in enumerate(cells) if c["scenario"] == "native")
    sweep = plan_sweep(plan, [native, oc2], set(), {})
    # The native cell is selected; OC2's 2-native and 1-VM runs are not any selected cell's own run.
    assert [(t.kind, t.layout, t.count) for t in sweep.tasks] == [
        ("baseline", "native", 2),
        ("baseline", "vms", 1),
        ("cell", "native", 1),
        ("cell", "vms", 2),
    ]
    assert [t.cells for t in sweep.tasks[2:]] == [(native,), (oc2,)]
    assert sweep.tasks[3].deps == (j[oc2]["base"]["key"], j[oc2]["alone"]["key"])


def test_plan_sweep_skips_stored_cells_and_known_baselines() -> None:
    plan = small_plan()
    cells = plan.cells()
    j = jobs(plan)
    uc = next(i for i, c in enumerate(cells) if c["scenario"] == "UC")
    oc = next(i for i, c in enumerate(cells) if c["scenario"] == "OC")
    all_cells = list(range(len(cells)))

    # A stored cell is not run; the cells that need its simulation get it as a baseline.
    sweep = plan_sweep(plan, all_cells, {j[uc]["key"]}, {})
    assert sweep.stored == [uc]
    assert all(uc not in t.cells or t.kind == "baseline" for t in sweep.tasks)
    ran = [i for t in sweep.tasks if t.kind == "cell" for i in t.cells]
    assert sorted(ran) == [i for i in all_cells if i != uc]
    assert j[uc]["main"]["key"] in {t.key for t in sweep.tasks if t.kind == "baseline"}

    # Known summaries are not simulated again: no task for them, and the cells that need them
    # are ready at once, given them as dependencies known from the start.
    summaries = {j[i][role]["key"]: "{}" for i in all_cells for role in ("main", "base") if j[i][role] is not None}
    sweep = plan_sweep(plan, all_cells, {j[uc]["key"]}, summaries)
    assert sweep.known == summaries
    assert [[cells[i]["scenario"] for i in t.cells] for t in sweep.tasks] == [["native"], ["OC", "OC2"]]
    assert all(set(t.deps) <= summaries.keys() for t in sweep.tasks)
    oc_task = sweep.tasks[1]
    assert j[oc]["alone"]["key"] in oc_task.deps and j[oc]["base"]["key"] in oc_task.deps

    # Everything stored: nothing to do.
    sweep = plan_sweep(plan, all_cells, {x["key"] for x in j}, {})
    assert sweep.tasks == [] and sweep.stored == all_cells
    assert oc in sweep.stored


def test_run_sweep_inline_matches_simulate_and_stores_everything(tmp_path: Path) -> None:
    spec = {"experiment": {"workloads": ["lock"], "scenarios": ["UC", "OC2"], "vcpus": [2], "seeds": [1, 2]}}
    from vcpulab.spec import load_spec

    loaded = load_spec(spec, None)
    plan = vcpulab.Plan(loaded.text, loaded.source, [])
    payload = SpecPayload(loaded.text, loaded.source, (), "h")
    selected = list(range(len(plan.cells())))
    sweep = plan_sweep(plan, selected, set(), {})
    store = ResultsStore(tmp_path / "r")
    seen: list[int] = []
    with store.writer() as w:
        report = run_sweep(plan, payload, sweep, InlineExecutor(), w, on_result=lambda i, r: seen.append(i))
    assert report.ran == 4 and report.skipped == 0
    assert report.baselines == sum(t.kind == "baseline" for t in sweep.tasks) > 0
    assert sorted(seen) == selected
    expected = vcpulab.simulate(spec)
    strip = lambda r: {k: v for k, v in r.items() if k != "wall_s"}  # noqa: E731
    assert [strip(result_from_row(report.rows[i])) for i in selected] == [strip(r) for r in expected]
    assert {report.rows[i]["spec_hash"] for i in selected} == {"h"}
    j = jobs(plan)
    assert store.keys() == {x["key"] for x in j}
    stored = store.rows(x["key"] for x in j)
    assert [strip(result_from_row(stored[x["key"]])) for x in j] == [strip(r) for r in expected]
    # Every simulation's summary is stored (baselines and the cells' own runs).
    sims = {x[role]["key"] for x in j for role in ("main", "base", "alone") if x[role] is not None}
    assert set(store.baselines()) == sims

    # Planned again against the store: nothing left to run.
    again = plan_sweep(plan, selected, store.keys(), store.baselines())
    assert again.tasks == [] and again.stored == selected
