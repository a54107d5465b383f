"""Issue 21: the store's defences below the command line — the manifest names only part files,
the query connection cannot reach beyond the parts nor grow past its memory limit, damaged
parts are found and set aside, and categorize tells configurations apart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pytest

from vcpulab.analysis import _settings
from vcpulab.store import ResultsStore, StoreDamaged, StoreError


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


def test_a_commit_is_never_cut_by_ctrl_c() -> None:
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
