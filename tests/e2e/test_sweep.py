"""Sweeps through the command line, as a user runs them: the results store, executors,
resuming after a crash or Ctrl-C, --only, and query / summary / categorize over the store.

The stored Parquet content is read here independently of vcpulab's reader: the manifest is
folded by hand and the committed parts are read with DuckDB.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import duckdb
import pytest

from conftest import Result, busy_spec, one_line_error, run_cli, spawn_cli, without_wall

SPEC = """\
[experiment]
workloads = ["lock", "heapchurn"]
scenarios = ["native", "UC", "OC", "OC2"]
vcpus = [2, 4]
seeds = [1, 2]
"""
N_CELLS = 2 * 4 * 2 * 2

# Enough cells, each ~0.1 s, that a sweep is still running a few seconds after it committed
# its first part (parts may be committed in batches every couple of seconds).
RESUME_SEEDS = 60
RESUME_SPEC = busy_spec(RESUME_SEEDS, 200000)
RESUME_CELLS = 2 * RESUME_SEEDS

SUMMARY_SPEC = """\
[experiment]
workloads = ["lock"]
scenarios = ["native", "UC", "OC2"]
vcpus = [2]
seeds = [1, 2, 3]
"""


def vcpulab(*args: object, cwd: Path, timeout: float = 300) -> Result:
    return run_cli(*args, cwd=cwd, timeout=timeout)


def ok(r: Result) -> Result:
    assert r.code == 0, r.err
    return r


def run_summary_line(r: Result) -> tuple[int, int]:
    """(cells run, cells already stored) from the last line of a table run."""
    m = re.search(r"\((\d+) cells run, (\d+) already stored\)", r.out)
    assert m, r.out
    return int(m[1]), int(m[2])


# --- reading a store independently ------------------------------------------------------------


def committed(root: Path) -> dict[str, list[str]]:
    """The committed part files of each table: the manifest folded line by line (a torn last
    line does not count)."""
    parts: dict[str, list[str]] = {"runs": [], "baselines": []}
    text = (root / "manifest.jsonl").read_text()
    lines = text.split("\n")[:-1]  # what follows the last newline is "" or a torn line
    for line in filter(None, lines):
        rec = json.loads(line)
        if rec["op"] == "add":
            parts[rec["table"]].append(rec["file"])
        elif rec["op"] == "replace":
            parts[rec["table"]] = [p for p in parts[rec["table"]] if p not in rec["files"]] + [rec["file"]]
        else:
            assert rec["op"] == "format", rec
    return parts


def read_table(root: Path, table: str) -> tuple[list[str], list[dict[str, Any]]]:
    """Column names and rows (ordered by key) of the committed parts of ``table``."""
    files = [str(root / f) for f in committed(root)[table]]
    if not files:
        return [], []
    listed = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
    con = duckdb.connect(":memory:")
    cur = con.execute(f"SELECT * FROM read_parquet([{listed}], union_by_name = true) ORDER BY key")
    names = [d[0] for d in cur.description]
    return names, [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def normalized(row: dict[str, Any]) -> dict[str, Any]:
    """A run row without what is measured on the host (``wall_s``, also inside result_json),
    its JSON columns parsed, and NULL columns left out."""
    out = {k: v for k, v in row.items() if v is not None and k != "wall_s"}
    if "result_json" in out:
        out["result_json"] = without_wall(json.loads(out["result_json"]))
    if "run_json" in out:
        out["run_json"] = json.loads(out["run_json"])
    return out


def runs(root: Path) -> dict[str, dict[str, Any]]:
    """The stored cells by key (normalized); fails on a key stored twice."""
    _, rows = read_table(root, "runs")
    keys = [r["key"] for r in rows]
    assert len(keys) == len(set(keys)), "a cell is stored twice"
    return {r["key"]: normalized(r) for r in rows}


CORE_COLUMNS = {
    "key",
    "config_key",
    "spec_hash",
    "vcpulab_version",
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
    "c_native_ns",
    "guest_ns",
    "host_ns",
    "events",
    "duration_s",
    "result_json",
    "run_json",
}  # fmt: skip (t_virt_s, c_virt_ns, delta_eta_* are NULL in native cells)


def comparable(a: dict[str, dict[str, Any]], b: dict[str, dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both stores' cells, every column (wall_s already left out): they must be equal."""
    assert a.keys() == b.keys()
    for key in a:
        assert CORE_COLUMNS <= a[key].keys(), sorted(CORE_COLUMNS - a[key].keys())
    return a, b


def assert_clean(root: Path) -> None:
    """Only committed parts on disk, no temporary file anywhere."""
    parts = committed(root)
    for table in ("runs", "baselines"):
        on_disk = sorted(f"{table}/{p.name}" for p in (root / table).iterdir())
        assert on_disk == sorted(parts[table]), table
    assert not [p for p in root.rglob("*") if p.name.endswith(".tmp")]


# --- shared sweeps ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[dict[str, Any]]]:
    """SPEC swept inline into its own store: (working dir, store, --json results)."""
    work = tmp_path_factory.mktemp("full")
    (work / "spec.toml").write_text(SPEC)
    r = ok(vcpulab("run", "spec.toml", "--results", "store", "-j", "1", "--json", cwd=work))
    results = r.json_lines()
    assert len(results) == N_CELLS
    return work, work / "store", results


@pytest.fixture(scope="module")
def resume_reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, Any]]]:
    """RESUME_SPEC swept without interruption: (working dir with the spec, stored cells)."""
    work = tmp_path_factory.mktemp("resume")
    (work / "many.toml").write_text(RESUME_SPEC)
    ok(vcpulab("run", "many.toml", "--results", "reference", "-j", "2", cwd=work))
    stored = runs(work / "reference")
    assert len(stored) == RESUME_CELLS
    return work, stored


# --- executors --------------------------------------------------------------------------------


def test_inline_local_pool_and_dask_store_the_same_results(
    full: tuple[Path, Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    from distributed import LocalCluster

    work, inline_store, inline_json = full
    shutil.copy(work / "spec.toml", tmp_path / "spec.toml")
    pool = ok(vcpulab("run", "spec.toml", "--results", "pool", "-j", "2", "--json", cwd=tmp_path))
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    ) as cluster:
        address = cluster.scheduler_address
        dask = ok(vcpulab("run", "spec.toml", "--results", "dask", "--cluster", address, "--json", cwd=tmp_path))

    # Printed in the plan's order, whatever the order of completion.
    expected = [without_wall(r) for r in inline_json]
    assert [without_wall(r) for r in pool.json_lines()] == expected
    assert [without_wall(r) for r in dask.json_lines()] == expected

    inline = runs(inline_store)
    assert len(inline) == N_CELLS
    for name in ("pool", "dask"):
        other = runs(tmp_path / name)
        assert sorted(other) == sorted(inline), name
        a, b = comparable(inline, other)
        assert a == b, name
        assert_clean(tmp_path / name)
        # The summaries of the simulations are the same too.
        assert read_table(tmp_path / name, "baselines")[1] == read_table(inline_store, "baselines")[1]
    assert_clean(inline_store)
    # One row per cell, whose result is the one printed.
    by_cell = {
        (r["workload"], r["scenario"], r["vcpus"], r["seed"]): {**r["result_json"], "run": r["run_json"]}
        for r in inline.values()
    }
    assert len(by_cell) == N_CELLS
    for r in inline_json:
        assert by_cell[(r["workload"], r["scenario"], r["vcpus"], r["seed"])] == without_wall(r)


def test_every_counter_and_metric_is_stored_as_a_column(full: tuple[Path, Path, list[dict[str, Any]]]) -> None:
    _, store, _ = full
    _, rows = read_table(store, "runs")

    def col(name: str) -> str:
        return re.sub(r"[^0-9a-zA-Z]+", "_", name).strip("_").lower()

    missing: set[str] = set()
    for row in rows:
        result = json.loads(row["result_json"])
        want = {f"exit_{col(k)}": v for k, v in result["exits"].items()}
        want |= {f"host_ns_{col(k)}": v for k, v in result["host_ns_by_reason"].items()}
        want |= {f"ns_{col(layer)}_{col(c)}": v for layer, cs in result["breakdown"].items() for c, v in cs.items()}
        want |= {col(k): v for k, v in result["metrics"].items()}
        missing |= {c for c, v in want.items() if row.get(c) != v and v is not None}
    assert not missing, f"{len(missing)} columns missing or wrong, e.g. {sorted(missing)[:5]}"


# --- resuming ---------------------------------------------------------------------------------


def start_sweep(work: Path, results: str) -> subprocess.Popen[str]:
    return spawn_cli("run", "many.toml", "--results", results, "-j", 2, cwd=work)  # its group: the workers too


def wait_for_a_committed_part(proc: subprocess.Popen[str], root: Path, timeout: float = 120) -> None:
    manifest = root / "manifest.jsonl"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if manifest.exists() and committed(root)["runs"]:
            return
        if proc.poll() is not None:
            _, err = proc.communicate()
            pytest.fail(f"the sweep ended (code {proc.returncode}) before committing a part: {err}")
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    pytest.fail("no part committed in time")


def check_resumed(work: Path, results: str, reference: dict[str, dict[str, Any]], *, all_committed: bool) -> None:
    before = runs(work / results)
    assert 0 < len(before) < RESUME_CELLS, "the sweep was stopped part-way"
    r = ok(vcpulab("run", "many.toml", "--results", results, "-j", "2", cwd=work))
    ran, kept = run_summary_line(r)
    assert ran + kept == RESUME_CELLS
    # After Ctrl-C every finished cell is committed; after a kill, cells finished but not yet
    # committed are recovered by the next run (and count as stored).
    assert kept == len(before) if all_committed else kept >= len(before)
    after = runs(work / results)  # fails on a duplicate key
    assert sorted(after) == sorted(reference)
    a, b = comparable(after, reference)
    assert a == b
    for key, row in before.items():  # what was stored before stays as it was
        assert after[key]["result_json"] == row["result_json"]
    assert_clean(work / results)
    # Once complete, running again does nothing.
    again = ok(vcpulab("run", "many.toml", "--results", results, "-j", "2", cwd=work))
    assert run_summary_line(again) == (0, RESUME_CELLS)


def test_a_killed_sweep_resumes_to_the_same_results(resume_reference: tuple[Path, dict[str, dict[str, Any]]]) -> None:
    work, reference = resume_reference
    proc = start_sweep(work, "killed")
    try:
        wait_for_a_committed_part(proc, work / "killed")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "the sweep had already finished: make it longer"
    check_resumed(work, "killed", reference, all_committed=False)


def test_ctrl_c_stops_a_sweep_that_then_resumes(resume_reference: tuple[Path, dict[str, dict[str, Any]]]) -> None:
    work, reference = resume_reference
    proc = start_sweep(work, "interrupted")
    try:
        wait_for_a_committed_part(proc, work / "interrupted")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("vcpulab: error: interrupted"), err
    assert "run the same command again" in lines[0] and "interrupted" in lines[0]
    assert_clean(work / "interrupted")
    check_resumed(work, "interrupted", reference, all_committed=True)


# --- what is stored already -------------------------------------------------------------------


def test_running_again_runs_nothing_and_more_vcpus_add_only_new_cells(
    full: tuple[Path, Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    work, store, first_json = full
    shutil.copy(work / "spec.toml", tmp_path / "spec.toml")
    shutil.copytree(store, tmp_path / "store")
    manifest = (tmp_path / "store" / "manifest.jsonl").read_bytes()
    files = sorted(p.relative_to(tmp_path) for p in (tmp_path / "store").rglob("*"))
    _, rows_before = read_table(tmp_path / "store", "runs")

    started = time.monotonic()
    again = ok(vcpulab("run", "spec.toml", "--results", "store", "--json", cwd=tmp_path))
    assert time.monotonic() - started < 60  # (very loose: nothing is simulated)
    # The stored results are printed, exactly as first printed (wall_s included).
    assert again.json_lines() == first_json
    table = ok(vcpulab("run", "spec.toml", "--results", "store", cwd=tmp_path))
    assert run_summary_line(table) == (0, N_CELLS)
    assert (tmp_path / "store" / "manifest.jsonl").read_bytes() == manifest
    assert sorted(p.relative_to(tmp_path) for p in (tmp_path / "store").rglob("*")) == files

    (tmp_path / "more.toml").write_text(SPEC.replace("vcpus = [2, 4]", "vcpus = [2, 3, 4]"))
    more = ok(vcpulab("run", "more.toml", "--results", "store", cwd=tmp_path))
    assert run_summary_line(more) == (N_CELLS // 2, N_CELLS)
    _, rows_after = read_table(tmp_path / "store", "runs")
    assert len(rows_after) == len({r["key"] for r in rows_after}) == N_CELLS + N_CELLS // 2
    assert sorted({r["vcpus"] for r in rows_after}) == [2, 3, 4]
    new = [r for r in rows_after if r["vcpus"] == 3]
    assert len(new) == N_CELLS // 2
    # The old cells were not run again: their rows are untouched (wall_s included).
    old = {r["key"]: json.loads(r["result_json"]) for r in rows_after if r["vcpus"] != 3}
    assert old == {r["key"]: json.loads(r["result_json"]) for r in rows_before}
    assert len(list((tmp_path / "store" / "specs").iterdir())) == 2
    assert_clean(tmp_path / "store")


def test_only_runs_the_matching_cells_with_the_same_results(
    full: tuple[Path, Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    work, store, full_json = full
    shutil.copy(work / "spec.toml", tmp_path / "spec.toml")
    r = ok(vcpulab("run", "spec.toml", "--results", "only", "--only", "workload=lock,vcpus=4", "--json", cwd=tmp_path))
    printed = r.json_lines()
    assert [(x["workload"], x["vcpus"]) for x in printed] == [("lock", 4)] * 8
    order = [(s, seed) for seed in (1, 2) for s in ("native", "UC", "OC", "OC2")]
    assert [(x["scenario"], x["seed"]) for x in printed] == order

    only = runs(tmp_path / "only")
    everything = runs(store)
    assert len(only) == 8 and set(only) < set(everything)
    assert {(row["workload"], row["vcpus"]) for row in only.values()} == {("lock", 4)}
    a, b = comparable(only, {k: everything[k] for k in only})
    assert a == b  # bit-identical, wall time aside: a cell's seeds do not depend on the sweep
    # The same holds for one cell run alone, without a store.
    only_one = "workload=heapchurn,scenario=oc2,vcpus=2,seed=2"
    one = ok(vcpulab("run", "spec.toml", "--no-store", "--only", only_one, "--json", cwd=tmp_path))
    [cell] = one.json_lines()
    cell_of = lambda x: (x["workload"], x["scenario"], x["vcpus"], x["seed"])  # noqa: E731
    [same] = [x for x in full_json if cell_of(x) == ("heapchurn", "OC2", 2, 2)]
    assert without_wall(cell) == without_wall(same)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["only", "spec.toml"]


def test_a_store_being_written_is_refused(tmp_path: Path) -> None:
    from vcpulab.store import ResultsStore

    (tmp_path / "spec.toml").write_text(SPEC)
    with ResultsStore(tmp_path / "busy").writer():
        line = one_line_error(vcpulab("run", "spec.toml", "--results", "busy", cwd=tmp_path))
    assert "another vcpulab process" in line
    assert committed(tmp_path / "busy") == {"runs": [], "baselines": []}


# --- query, summary, categorize ---------------------------------------------------------------


def test_query_formats(full: tuple[Path, Path, list[dict[str, Any]]]) -> None:
    work, store, _ = full
    sql = "SELECT workload, scenario, count(*) AS n FROM runs GROUP BY ALL ORDER BY ALL"
    expected = sorted((w, s, 4) for w in ("heapchurn", "lock") for s in ("native", "UC", "OC", "OC2"))

    as_csv = ok(vcpulab("query", store, sql, "--format", "csv", cwd=work))
    parsed = list(csv.reader(io.StringIO(as_csv.out)))
    assert parsed[0] == ["workload", "scenario", "n"]
    assert [(w, s, int(n)) for w, s, n in parsed[1:]] == expected

    as_json = ok(vcpulab("query", store, sql, "--format", "json", cwd=work))
    assert [(x["workload"], x["scenario"], x["n"]) for x in as_json.json_lines()] == expected

    as_table = ok(vcpulab("query", store, sql, cwd=work))
    for w, s, _ in expected:
        lines = as_table.out.splitlines()
        assert any(w in line and re.search(rf"\b{s}\b", line) and re.search(r"\b4\b", line) for line in lines), (w, s)
    assert "workload" in as_table.out and "scenario" in as_table.out

    # Values come out as stored.
    sql = "SELECT key, delta_eta_t, result_json FROM runs ORDER BY key"
    rows = ok(vcpulab("query", store, sql, "--format", "json", cwd=work)).json_lines()
    _, direct = read_table(store, "runs")
    pick = lambda x: (x["key"], x["delta_eta_t"], x["result_json"])  # noqa: E731
    assert [pick(x) for x in rows] == [pick(d) for d in direct]
    sql = "SELECT count(*) AS n FROM baselines"
    assert ok(vcpulab("query", store, sql, "--format", "json", cwd=work)).json_lines()[0]["n"] > 0


@pytest.mark.parametrize("sql", ["SELEC * FROM runs", "SELECT no_such_column FROM runs", "SELECT * FROM no_such_table"])
def test_a_bad_query_is_one_line(full: tuple[Path, Path, list[dict[str, Any]]], sql: str) -> None:
    work, store, _ = full
    line = one_line_error(vcpulab("query", store, sql, cwd=work))
    assert line.startswith("vcpulab: error: query failed: ")


def test_summary_means_and_confidence_intervals(tmp_path: Path) -> None:
    from scipy.stats import t

    (tmp_path / "s.toml").write_text(SUMMARY_SPEC)
    ok(vcpulab("run", "s.toml", "--results", "store", cwd=tmp_path))
    r = ok(vcpulab("summary", "store", "--json", cwd=tmp_path))
    summary = r.json_lines()
    configs = [(x["workload"], x["scenario"], x["vcpus"]) for x in summary]
    assert configs == [("lock", s, 2) for s in ("native", "UC", "OC2")]

    _, rows = read_table(tmp_path / "store", "runs")
    factor = t.ppf(0.975, 2) / math.sqrt(3)
    for rec in summary:
        assert rec["repetitions"] == 3
        mine = [row for row in rows if row["scenario"] == rec["scenario"]]
        assert sorted(row["seed"] for row in mine) == [1, 2, 3]
        for metric in ("delta_eta_t", "delta_eta_r", "omega", "weighted_speedup", "t_virt_s"):
            values = [row[metric] for row in mine]
            if any(v is None for v in values):
                assert rec["scenario"] == "native", metric  # no virtualized run, nothing to compare
                assert rec[metric] is None and rec[f"{metric}_ci"] is None
                continue
            assert rec[metric] == pytest.approx(statistics.fmean(values), rel=1e-12, abs=1e-15), metric
            assert rec[f"{metric}_ci"] == pytest.approx(factor * statistics.stdev(values), rel=1e-9, abs=1e-15), metric
    uc = next(x for x in summary if x["scenario"] == "UC")
    assert uc["delta_eta_t_ci"] > 0  # the seeds differ

    one = ok(vcpulab("summary", "store", "--metric", "t_virt_s", "--json", cwd=tmp_path)).json_lines()
    assert [x["t_virt_s"] for x in one] == [x["t_virt_s"] for x in summary]
    assert all("omega" not in x for x in one)
    table = ok(vcpulab("summary", "store", cwd=tmp_path))
    assert "lock" in table.out and "UC" in table.out
    line = one_line_error(vcpulab("summary", "store", "--metric", "no_such_metric", cwd=tmp_path))
    assert "no_such_metric" in line


def test_categorize(full: tuple[Path, Path, list[dict[str, Any]]]) -> None:
    work, store, _ = full
    rows = ok(vcpulab("categorize", store, "--json", cwd=work)).json_lines()
    configs = sorted((x["workload"], x["vcpus"]) for x in rows)
    assert configs == sorted((w, v) for w in ("lock", "heapchurn") for v in (2, 4))
    known = {"negligible", "high guest", "high host", "high overcommit"}
    _, stored = read_table(store, "runs")
    for x in rows:
        assert isinstance(x["categories"], list) and set(x["categories"]) <= known, x
        assert ("negligible" in x["categories"]) <= (len(x["categories"]) == 1)
        # UC's δη_r and its guest and host parts, from the stored UC cells (means over the seeds).
        # (They add up to δη_r only up to the host time charged to nobody, which C_v includes
        # and host_ns does not: c_virt_ns − guest_ns − host_ns, a few ns here.)
        uc = [r for r in stored if (r["workload"], r["vcpus"], r["scenario"]) == (x["workload"], x["vcpus"], "UC")]
        assert len(uc) == 2
        approx = lambda v: pytest.approx(v, rel=1e-9, abs=1e-15)  # noqa: E731
        assert x["dr_uc"] == approx(statistics.fmean(r["delta_eta_r"] for r in uc))
        assert x["dt_uc"] == approx(statistics.fmean(r["delta_eta_t"] for r in uc))
        guest = statistics.fmean((r["guest_ns"] - r["c_native_ns"]) / r["c_native_ns"] for r in uc)
        assert x["guest_part"] == approx(guest)
        assert x["host_part"] == approx(statistics.fmean(r["host_ns"] / r["c_native_ns"] for r in uc))
        assert x["guest_part"] + x["host_part"] == pytest.approx(x["dr_uc"], rel=1e-2)
        # The scalability type, from the native cells' metrics (means over the seeds).
        native = [
            json.loads(r["result_json"])["metrics"]
            for r in stored
            if (r["workload"], r["vcpus"], r["scenario"]) == (x["workload"], x["vcpus"], "native")
        ]
        assert len(native) == 2
        par = statistics.fmean(m["parallelism"] for m in native)
        sync = statistics.fmean(m["sync_per_thread_s"] for m in native)
        expected = {(True, False): 1, (False, True): 2, (True, True): 3, (False, False): 4}[
            (par >= 0.75 * x["vcpus"], sync >= 1000 / 24)
        ]
        assert x["scalability_type"] == expected, x
    ok(vcpulab("categorize", store, cwd=work))
    # lock and heapchurn declare no TPDS category: nothing to compare, said in one line.
    r = vcpulab("categorize", store, "--declared", cwd=work)
    assert r.code != 0 and "declares TPDS categories" in r.err and len(r.err.strip().splitlines()) == 1, r.err


def test_categorize_reads_one_model_build_of_a_store_that_holds_several(
    full: tuple[Path, Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    """A store that collected the results of two model builds (`vcpulab reproduce` after a model
    change) is categorized for the running build by default, with a note; --build picks one or
    all. The second build is made by storing the same cells again under another build id, with
    UC's δη_t raised so that its categories differ."""
    from vcpulab._vcpulab import build_id
    from vcpulab.store import ResultsStore

    work, original, _ = full
    store = tmp_path / "store"
    shutil.copytree(original, store)
    _, rows = read_table(store, "runs")
    other = "0.0.0+000000000000"
    assert build_id() != other and {r["vcpulab_version"] for r in rows} == {build_id()}
    copies = []
    for r in rows:
        c = {k: v for k, v in r.items() if v is not None}
        c["key"] = "old-" + r["key"]
        c["config_key"] = "old-" + r["config_key"]
        c["vcpulab_version"] = other
        if r["scenario"] == "UC":
            c["delta_eta_t"] = r["delta_eta_t"] + 1.0
        copies.append(c)
    with ResultsStore(store).writer() as w:
        w.append("runs", copies)

    def categorize(*extra: str) -> tuple[list[dict[str, Any]], str]:
        r = ok(vcpulab("categorize", store, "--json", *extra, cwd=work))
        return r.json_lines(), r.err

    alone = ok(vcpulab("categorize", original, "--json", cwd=work)).json_lines()
    mine, note = categorize()
    assert [(x["workload"], x["vcpus"], x["categories"]) for x in mine] == [
        (x["workload"], x["vcpus"], x["categories"]) for x in alone
    ]
    assert "2 model builds" in note and build_id() in note and "--build all" in note, note
    assert categorize("--build", build_id())[0] == mine

    theirs, note = categorize("--build", other)
    assert note == ""
    assert len(theirs) == len(alone)
    for x, y in zip(theirs, alone, strict=True):
        assert (x["workload"], x["vcpus"]) == (y["workload"], y["vcpus"])
        assert x["dt_uc"] == pytest.approx(y["dt_uc"] + 1.0)
        assert "negligible" not in x["categories"]

    both, _ = categorize("--build", "all")
    assert len(both) == 2 * len(alone)
    assert {x["config"].split("@")[1] for x in both} == {build_id(), other}

    line = one_line_error(vcpulab("categorize", store, "--build", "9.9.9+nope", cwd=work))
    assert "--build 9.9.9+nope" in line and other in line and build_id() in line, line


@pytest.mark.parametrize("command", [("query", "SELECT 1"), ("summary",), ("categorize",)], ids=lambda c: c[0])
def test_commands_on_a_missing_or_foreign_results_directory(command: tuple[str, ...], tmp_path: Path) -> None:
    name, *rest = command
    line = one_line_error(vcpulab(name, "nothere", *rest, cwd=tmp_path))
    assert "nothere" in line and "not a directory" in line
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "data.csv").write_text("a,b\n")
    line = one_line_error(vcpulab(name, "foreign", *rest, cwd=tmp_path))
    assert "foreign" in line and "not a vcpulab results directory" in line
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == [Path("foreign"), Path("foreign/data.csv")]


# --- bad specs and filters: nothing is created ------------------------------------------------

SMALL = '[experiment]\nworkloads = ["lock"]\nscenarios = ["UC"]\nvcpus = [2]\n'
VARY_VCPUS = 'vcpus = [2]\nvary = { "experiment.vcpus" = [[2], [4]] }'


@pytest.mark.parametrize(
    "spec, extra, needle",
    [
        (SMALL.replace("vcpus = [2]", "vcpus = [2]\nno_such_field = 1"), (), "no_such_field"),
        (SMALL.replace("vcpus = [2]", "vcpus = [0]"), (), "vcpus"),
        (SMALL.replace("vcpus = [2]", 'vcpus = ["two"]'), (), "vcpus"),
        (SMALL, ("--only", "vcpus=4"), "no cell"),
        (SMALL, ("--only", "workload=lock", "--only", "seed=2"), "no cell"),
        (SMALL, ("--only", "cores=4"), "cores"),
        (SMALL, ("--only", "vcpus"), "FIELD=VALUE"),
        (SMALL.replace("vcpus = [2]", VARY_VCPUS), (), "experiment.vcpus"),
        (SMALL, ("-j", "0"), "--jobs"),
        (SMALL, ("-j", "2", "--cluster", "tcp://127.0.0.1:9"), "exclude each other"),
        (SMALL, ("--cluster", "tcp://127.0.0.1:9"), "cannot reach the Dask scheduler"),
    ],
    ids=[
        "unknown-field",
        "zero-vcpus",
        "string-vcpus",
        "only-matches-nothing",
        "only-and-across-filters",
        "only-unknown-field",
        "only-without-value",
        "vary-vcpus",
        "zero-jobs",
        "jobs-and-cluster",
        "unreachable-cluster",
    ],
)
@pytest.mark.parametrize("where", [(), ("--results", "out")], ids=["default-results", "results-dir"])
def test_bad_run_is_one_line_and_creates_nothing(
    spec: str, extra: tuple[str, ...], needle: str, where: tuple[str, ...], tmp_path: Path
) -> None:
    (tmp_path / "bad.toml").write_text(spec)
    line = one_line_error(vcpulab("run", "bad.toml", *where, *extra, cwd=tmp_path))
    assert needle in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.toml"]


def test_a_foreign_results_directory_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / "spec.toml").write_text(SMALL)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep\n")
    line = one_line_error(vcpulab("run", "spec.toml", "--results", "mine", cwd=tmp_path))
    assert "mine" in line and "not a vcpulab results directory" in line
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["notes.txt"]


def test_bad_flags_of_the_reading_commands_and_of_the_store(tmp_path: Path) -> None:
    (tmp_path / "spec.toml").write_text(SMALL)
    ok(vcpulab("run", "spec.toml", "--results", "store", cwd=tmp_path))
    for args, needle in [
        (("summary", "store", "--confidence", "2"), "--confidence"),
        (("summary", "store", "--metric", "no_such_metric"), "no_such_metric"),
        (("categorize", "store", "--slice", "0"), "--slice"),
        (("run", "spec.toml", "--results", "store", "--no-store"), "exclude each other"),
        (("run", "spec.toml", "--results", "spec.toml"), "it is a file"),
    ]:
        line = one_line_error(vcpulab(*args, cwd=tmp_path))
        assert needle in line, (args, line)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.toml", "store"]
