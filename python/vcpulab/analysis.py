"""Summaries and categorizations over a results store (DuckDB SQL over its Parquet parts).

Every figure here is an aggregate of stored result fields; the formulas and thresholds are
documented in ``docs/results.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ._vcpulab import scalability_type as _scalability_type
from .store import ResultsStore

# A configuration: everything but the seed (its repetitions are the seeds).
CONFIG = ("workload", "variant", "scenario", "vcpus", "threads", "oc_vms")

SUMMARY_METRICS = ("delta_eta_t", "delta_eta_r", "omega", "weighted_speedup", "t_virt_s")


def t_quantile(n: int, confidence: float = 0.95) -> float:
    """Two-sided Student t quantile for ``n`` samples (``n − 1`` degrees of freedom)."""
    return student_t(n - 1, confidence)


def student_t(dof: float, confidence: float = 0.95) -> float:
    """Two-sided Student t quantile with ``dof`` degrees of freedom (Welch's are fractional)."""
    from scipy.stats import t

    return float(t.ppf(0.5 + confidence / 2, dof))


@dataclass
class Estimate:
    """Mean of a metric over repetitions and the half-width of its confidence interval
    (None with fewer than 2 repetitions or without values)."""

    n: int
    mean: float | None
    half_width: float | None


def estimate(n: int, mean: float | None, sd: float | None, confidence: float = 0.95) -> Estimate:
    if n >= 2 and mean is not None and sd is not None and not math.isnan(sd):
        return Estimate(n, mean, t_quantile(n, confidence) * sd / math.sqrt(n))
    return Estimate(n, mean, None)


def _columns(con: Any) -> set[str]:
    """The columns of the ``runs`` view."""
    return {r[0] for r in con.execute("DESCRIBE runs").fetchall()}


def _order_by() -> str:
    # Scenarios in their natural order, not alphabetically.
    scen = "CASE scenario WHEN 'native' THEN 0 WHEN 'UC' THEN 1 WHEN 'OC' THEN 2 WHEN 'OC2' THEN 3 ELSE 4 END"
    return f"workload, variant, vcpus, threads, oc_vms, {scen}"


def summary(
    store: ResultsStore, metrics: Sequence[str] = SUMMARY_METRICS, confidence: float = 0.95
) -> list[dict[str, Any]]:
    """One row per configuration: its repetitions and, per metric, mean and CI half-width."""
    con = store.connect()
    have = _columns(con)
    missing = [m for m in metrics if m not in have]
    if missing:
        raise KeyError(
            f"no column {', '.join(map(repr, missing))} in the results (see `vcpulab query RESULTS 'DESCRIBE runs'`)"
        )
    if "seed" not in have:
        return []
    aggs = ", ".join(f"avg({m}), stddev_samp({m}), count({m})" for m in metrics)
    sql = (
        f"SELECT {', '.join(CONFIG)}, count(DISTINCT seed), {aggs} FROM runs "
        f"GROUP BY {', '.join(CONFIG)} ORDER BY {_order_by()}"
    )
    out = []
    for row in con.execute(sql).fetchall():
        rec: dict[str, Any] = dict(zip(CONFIG, row[: len(CONFIG)], strict=True))
        rec["repetitions"] = row[len(CONFIG)]
        values = row[len(CONFIG) + 1 :]
        for j, m in enumerate(metrics):
            mean, sd, n = values[3 * j : 3 * j + 3]
            e = estimate(n, mean, sd, confidence)
            rec[m] = e.mean
            rec[f"{m}_ci"] = e.half_width
        out.append(rec)
    return out


@dataclass(frozen=True)
class Thresholds:
    """Cut-offs of the TPDS overhead categories (TPDS §6 gives none: the project chooses and
    documents them). All are fractions of the native figure."""

    negligible: float = 0.05
    guest: float = 0.10
    host: float = 0.10
    overcommit: float = 0.10
    high_parallelism: float = 0.75
    slice_ms: float = 24.0


def categorize(store: ResultsStore, th: Thresholds = Thresholds()) -> list[dict[str, Any]]:
    """Per (workload, variant, vCPUs, threads): the TPDS overhead categories and the DIS
    ch.4 scalability type, from the means over repetitions of the stored cells.

    - UC's δη_t splits into a guest part, (guest busy time in the VM − C_p) / C_p, and a host
      part, host time of the VM / C_p.
    - **negligible**: |δη_t| below ``negligible`` in UC and (when stored) in OC and OC2, and
      no other category;
    - **high guest**: the guest part above ``guest``;
    - **high host**: the host part above ``host``;
    - **high overcommit**: δη_t in OC or in OC2 exceeds UC's by more than ``overcommit`` (OC
      shows what sharing the cores with another VM costs against running alone; OC2 what is
      left of it once the same sharing among native instances is charged too).
    - The scalability type uses the native cell: parallelism ≥ ``high_parallelism`` × vCPUs,
      and at least one voluntary switch per thread per ``slice_ms``.
    """
    con = store.connect()
    have = _columns(con)
    if "seed" not in have:
        return []
    key = "workload, variant, vcpus, threads"
    par = "avg(parallelism)" if "parallelism" in have else "NULL"
    sync = "avg(sync_per_thread_s)" if "sync_per_thread_s" in have else "NULL"
    sql = f"""
        WITH uc AS (
            SELECT {key}, avg(delta_eta_t) AS dt_uc, avg(delta_eta_r) AS dr_uc,
                   avg((guest_ns - c_native_ns) / c_native_ns) AS guest_part,
                   avg(host_ns / c_native_ns) AS host_part, count(*) AS n_uc
            FROM runs WHERE scenario = 'UC' GROUP BY {key}),
        oc2 AS (
            SELECT {key}, avg(delta_eta_t) AS dt_oc2, count(*) AS n_oc2
            FROM runs WHERE scenario = 'OC2' GROUP BY {key}),
        oc AS (
            SELECT {key}, avg(delta_eta_t) AS dt_oc FROM runs WHERE scenario = 'OC' GROUP BY {key}),
        nat AS (
            SELECT {key}, {par} AS parallelism, {sync} AS sync_per_thread_s
            FROM runs WHERE scenario = 'native' GROUP BY {key}),
        cells AS (
            SELECT {key} FROM uc UNION SELECT {key} FROM oc2 UNION SELECT {key} FROM nat UNION SELECT {key} FROM oc)
        SELECT c.workload, c.variant, c.vcpus, c.threads, dt_uc, dr_uc, guest_part, host_part, dt_oc, dt_oc2,
               parallelism, sync_per_thread_s
        FROM cells c
        LEFT JOIN uc USING ({key}) LEFT JOIN oc2 USING ({key}) LEFT JOIN oc USING ({key}) LEFT JOIN nat USING ({key})
        ORDER BY c.workload, c.variant, c.vcpus, c.threads
    """
    names = (
        "workload", "variant", "vcpus", "threads", "dt_uc", "dr_uc", "guest_part", "host_part",
        "dt_oc", "dt_oc2", "parallelism", "sync_per_thread_s",
    )  # fmt: skip
    out = []
    for row in con.execute(sql).fetchall():
        r: dict[str, Any] = dict(zip(names, row, strict=True))
        cats = []
        if r["dt_uc"] is not None:
            others = [x for x in (r["dt_oc"], r["dt_oc2"]) if x is not None]
            small = all(x < th.negligible for x in [r["dt_uc"], *others])
            if r["guest_part"] is not None and r["guest_part"] > th.guest:
                cats.append("high guest")
            if r["host_part"] is not None and r["host_part"] > th.host:
                cats.append("high host")
            if any(x - r["dt_uc"] > th.overcommit for x in others):
                cats.append("high overcommit")
            if small and not cats:
                cats.append("negligible")
        r["categories"] = cats
        r["scalability_type"] = scalability_type(r["parallelism"], r["sync_per_thread_s"], r["vcpus"], th)
        out.append(r)
    return out


def scalability_type(parallelism: float | None, sync: float | None, cpus: int, th: Thresholds) -> int | None:
    """DIS ch.4: 1 high parallelism/low sync, 2 low/high, 3 high/high, 4 low/low; ``None``
    without both inputs. The rule is the simulator's (``characterize::classify``, also used by
    ``vcpulab characterize-sim``), with ``th``'s cut-offs."""
    if parallelism is None or sync is None:
        return None
    return _scalability_type(parallelism, sync, cpus, th.high_parallelism, th.slice_ms)
