"""What the HTML report reads from a results store.

One DuckDB query per kind of data over the ``runs`` view (``docs/results.md``), each selecting
only the columns it needs; ``run_json`` is reached into with DuckDB's JSON functions, and only
for the figures that need per-vCPU or per-sample data. Rows come back as plain dicts.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..store import ResultsStore

SCENARIOS = ("native", "UC", "OC", "OC2")
VM_SCENARIOS = ("UC", "OC", "OC2")

CELL_KEY = ("workload", "variant", "scenario", "vcpus", "threads", "oc_vms", "seed")
"""The fields that name a cell in every query here."""

CELL_COLUMNS = (
    *CELL_KEY,
    "t_native_s",
    "t_virt_s",
    "delta_eta_r",
    "delta_eta_t",
    "omega",
    "weighted_speedup",
    "c_native_ns",
    "guest_ns",
    "host_ns",
    "duration_s",
    "spec_hash",
    "vcpulab_version",
)


def scenario_rank(scenario: str) -> int:
    """Scenarios in their natural order (native, UC, OC, OC2, anything else)."""
    return SCENARIOS.index(scenario) if scenario in SCENARIOS else len(SCENARIOS)


def series_key(row: Mapping[str, Any]) -> tuple[int, str, str]:
    """Sort key of a (scenario, variant) series."""
    return (scenario_rank(row["scenario"]), row["scenario"], row.get("variant") or "")


def _key_sql() -> str:
    return ", ".join(CELL_KEY)


def _order_sql() -> str:
    scen = "CASE scenario WHEN 'native' THEN 0 WHEN 'UC' THEN 1 WHEN 'OC' THEN 2 WHEN 'OC2' THEN 3 ELSE 4 END"
    return f"workload, variant, vcpus, threads, oc_vms, {scen}, seed"


def _json(text: Any) -> Any:
    """DuckDB's JSON values arrive as text (or a list of texts for a ``[*]`` path)."""
    if text is None:
        return None
    if isinstance(text, list):
        return [_json(t) for t in text]
    return json.loads(text)


@dataclass
class StoreData:
    """The cells of a store (one dict per cell with :data:`CELL_COLUMNS`, the
    ``host_ns_<reason>`` columns and ``measured``, the number of measured instances) and a
    connection for the queries that need more."""

    store: ResultsStore
    con: Any
    columns: set[str]
    cells: list[dict[str, Any]]
    host_reasons: list[str]
    """The ``<reason>`` of every ``host_ns_<reason>`` column (lower case, as stored)."""
    specs: dict[str, str] = field(default_factory=dict)
    """spec hash → materialised spec text (``RESULTS/specs/<hash>.toml``)."""

    def has(self, column: str) -> bool:
        return column in self.columns

    def scenarios(self) -> list[str]:
        return sorted({c["scenario"] for c in self.cells}, key=scenario_rank)

    def vcpu_counts(self) -> list[int]:
        return sorted({c["vcpus"] for c in self.cells})

    def variants(self) -> list[str]:
        return sorted({c["variant"] or "" for c in self.cells})

    def workloads(self) -> list[str]:
        return sorted({c["workload"] for c in self.cells})


def load(store: ResultsStore) -> StoreData:
    """Every cell's scalar columns, in the natural order, and the specs that wrote them."""
    con = store.connect()
    columns = {r[0] for r in con.execute("DESCRIBE runs").fetchall()}
    reasons = sorted(c.removeprefix("host_ns_") for c in columns if c.startswith("host_ns_"))
    cells: list[dict[str, Any]] = []
    if "seed" in columns:
        wanted = [c for c in CELL_COLUMNS if c in columns] + [f"host_ns_{r}" for r in reasons]
        # How many instances the cell measures (k in OC/OC2 without a co-runner, else 1):
        # guest_ns and host_ns are their sums.
        wanted.append("coalesce(json_array_length(result_json, '$.instances'), 1) AS measured")
        cur = con.execute(f"SELECT {', '.join(wanted)} FROM runs ORDER BY {_order_sql()}")
        names = [d[0] for d in cur.description]
        cells = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
        for c in cells:
            c["variant"] = c.get("variant") or ""
    specs = {}
    spec_dir = store.root / "specs"
    for spec_hash in sorted({c["spec_hash"] for c in cells if c.get("spec_hash")}):
        path = spec_dir / f"{spec_hash}.toml"
        if path.is_file():
            specs[spec_hash] = path.read_text(encoding="utf-8")
    return StoreData(store=store, con=con, columns=columns, cells=cells, host_reasons=reasons, specs=specs)


def _query(data: StoreData, select: str, where: str = "TRUE") -> list[dict[str, Any]]:
    cur = data.con.execute(f"SELECT {_key_sql()}, {select} FROM runs WHERE {where} ORDER BY {_order_sql()}")
    names = [d[0] for d in cur.description]
    out = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    for r in out:
        r["variant"] = r.get("variant") or ""
    return out


def load_busy(data: StoreData) -> list[dict[str, Any]]:
    """Per cell, the busy time of each core (native cells: ``core_busy_ns``) or of each vCPU of
    the measured VM (VM 0: ``vms[0].vcpus[*].busy_ns``), in ns, as ``busy``."""
    if not data.cells:
        return []
    rows = _query(
        data,
        "CASE WHEN scenario = 'native' THEN json_extract(run_json, '$.core_busy_ns') "
        "ELSE json_extract(run_json, '$.vms[0].vcpus') END AS busy_json",
    )
    for r in rows:
        value = _json(r.pop("busy_json"))
        if r["scenario"] == "native":
            r["busy"] = [int(v) for v in value or []]
        else:
            r["busy"] = [int(v.get("busy_ns", 0)) for v in value or []]
    return [r for r in rows if r["busy"]]


def load_tlb(data: StoreData) -> list[dict[str, Any]]:
    """Per cell whose measured instance sent TLB shootdowns: ``samples_ns`` (sorted; empty when
    ``[record] tlb_samples`` was off), ``latency`` (the log2 summary: count, mean_ns,
    p50_ns, p99_ns, max_ns) and ``by_state`` (the targets by their state when the shootdown
    reached them: targets, wait_ns, critical, critical_ns; empty in results made before it)."""
    if not data.cells or not data.has("tlb_shootdowns"):
        return []
    rows = _query(
        data,
        "json_extract(run_json, '$.instances[0].tlb.samples_ns') AS samples, "
        "json_extract(run_json, '$.instances[0].tlb.latency') AS latency, "
        "json_extract(run_json, '$.instances[0].tlb.by_target_state') AS by_state",
        "tlb_shootdowns > 0",
    )
    for r in rows:
        r["samples_ns"] = sorted(int(s) for s in _json(r.pop("samples")) or [])
        r["latency"] = _json(r["latency"]) or {}
        r["by_state"] = _json(r["by_state"]) or {}
    return rows


def load_ple_series(data: StoreData) -> list[dict[str, Any]]:
    """Per cell that recorded it (``[record] ple_window = true``): ``series``, one list per VM
    of ``[t_ns, window_cycles]`` points (``run.vms[i].ple_window_series``)."""
    if not data.cells:
        return []
    rows = _query(
        data,
        "json_extract(run_json, '$.vms[*].ple_window_series') AS series_json",
        "scenario <> 'native' AND contains(run_json, '\"ple_window_series\"')",
    )
    out = []
    for r in rows:
        series = [s for s in (_json(r.pop("series_json")) or [])]
        r["series"] = [[(int(t), float(w)) for t, w in (s or [])] for s in series]
        if any(r["series"]):
            out.append(r)
    return out


MEMORY_COLUMNS = (
    "cpi",
    "mem_remote_fraction",
    "mem_local_accesses",
    "mem_remote_accesses",
    "mem_bw_util_max",
    "numad_moves",
    "numad_migrated_mib",
    "numad_host_ms",
    "ns_user_memory_stall",
    "ns_host_numa_migrate",
)
"""The memory model's metrics and causes (``docs/results.md``); a column no part has is NULL."""


def load_memory(data: StoreData) -> list[dict[str, Any]]:
    """Per cell with ``cpi`` (the memory model on): :data:`MEMORY_COLUMNS` (the metrics of the
    measured instance, the causes of the run's breakdown) and ``busy_ns``, the sum of every
    ``ns_<layer>_<cause>`` column (the breakdown's busy time)."""
    if not data.cells or not data.has("cpi"):
        return []
    picked = [f"CAST({c} AS DOUBLE) AS {c}" if data.has(c) else f"NULL AS {c}" for c in MEMORY_COLUMNS]
    causes = sorted(c for c in data.columns if c.startswith("ns_"))
    busy = " + ".join(f"coalesce(CAST({c} AS DOUBLE), 0)" for c in causes) or "NULL"
    return _query(data, f"{', '.join(picked)}, {busy} AS busy_ns", "cpi IS NOT NULL")


# --- the specs ------------------------------------------------------------------------------


def spec_settings(text: str) -> dict[str, Any]:
    """A materialised spec parsed (an unreadable one as empty: the report still shows its text)."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return {}
