"""Summaries and categorizations over a results store (DuckDB SQL over its Parquet parts).

Every figure here is an aggregate of stored result fields; the formulas and thresholds are
documented in ``docs/results.md``.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._vcpulab import scalability_type as _scalability_type
from .store import ResultsStore

# A cell of the matrix but the seed (its repetitions are the seeds). Its rows are one
# configuration only if they share `config_key` (the same simulations but the seed): the same
# spec stored twice with different settings gives two configurations of one cell.
CONFIG = ("workload", "variant", "scenario", "vcpus", "threads", "oc_vms")

# Spec fields that choose cells rather than configure them: ignored when telling what differs
# between two configurations.
_AXES = ("experiment.workloads", "experiment.vcpus", "experiment.seeds", "experiment.scenarios")

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
    return set(_column_types(con))


def _column_types(con: Any) -> dict[str, str]:
    """The columns of the ``runs`` view and their DuckDB types."""
    return {r[0]: r[1] for r in con.execute("DESCRIBE runs").fetchall()}


_NUMERIC = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT",
            "UHUGEINT", "FLOAT", "DOUBLE", "REAL", "DECIMAL", "NULL")  # fmt: skip


def _is_numeric(kind: str) -> bool:
    return kind.strip('"').split("(")[0] in _NUMERIC  # DuckDB quotes the NULL type: "NULL"


def _label(spec_hash: str | None, version: str | None, versions: int) -> str:
    """A configuration's short label: its spec hash prefix (and the build, when the store has
    results of several builds)."""
    text = (spec_hash or "?")[:8]
    return f"{text}@{version}" if versions > 1 else text


def _spec_groups(con: Any) -> dict[str, tuple[str, str]]:
    """Per ``config_key``: the (spec hash, build) that labels it, the smallest of the specs that
    stored its rows."""
    rows = con.execute(
        "SELECT config_key, min(spec_hash), min(vcpulab_version) FROM runs GROUP BY config_key"
    ).fetchall()
    return {k: (h, v) for k, h, v in rows}


def _order_by() -> str:
    # Scenarios in their natural order, not alphabetically.
    scen = "CASE scenario WHEN 'native' THEN 0 WHEN 'UC' THEN 1 WHEN 'OC' THEN 2 WHEN 'OC2' THEN 3 ELSE 4 END"
    return f"workload, variant, vcpus, threads, oc_vms, {scen}"


def summary(
    store: ResultsStore, metrics: Sequence[str] = SUMMARY_METRICS, confidence: float = 0.95
) -> list[dict[str, Any]]:
    """One row per configuration: its repetitions and, per metric, mean and CI half-width."""
    con = store.connect()
    types = _column_types(con)
    missing = [m for m in metrics if m not in types]
    if missing:
        raise KeyError(
            f"no column {', '.join(map(repr, missing))} in the results (see `vcpulab query RESULTS 'DESCRIBE runs'`)"
        )
    if "seed" not in types:
        return []
    text = [m for m in metrics if not _is_numeric(types[m])]
    if text:
        raise KeyError(
            f"--metric {text[0]}: the column is {types[text[0]]}, not numeric (a mean needs numbers, e.g. "
            f"{', '.join(SUMMARY_METRICS[:2])}; see `vcpulab query RESULTS 'DESCRIBE runs'`)"
        )
    aggs = ", ".join(f"avg({m}), stddev_samp({m}), count({m})" for m in metrics)
    sql = (
        f"SELECT {', '.join(CONFIG)}, config_key, count(DISTINCT seed), {aggs} FROM runs "
        f"GROUP BY {', '.join(CONFIG)}, config_key ORDER BY {_order_by()}, min(spec_hash), config_key"
    )
    labels = _spec_groups(con)
    versions = len({v for _, v in labels.values()})
    out = []
    for row in con.execute(sql).fetchall():
        rec: dict[str, Any] = dict(zip(CONFIG, row[: len(CONFIG)], strict=True))
        rec["config_key"] = row[len(CONFIG)]
        spec_hash, version = labels[rec["config_key"]]
        rec["spec_hash"] = spec_hash
        rec["config"] = _label(spec_hash, version, versions)
        rec["repetitions"] = row[len(CONFIG) + 1]
        values = row[len(CONFIG) + 2 :]
        for j, m in enumerate(metrics):
            mean, sd, n = values[3 * j : 3 * j + 3]
            e = estimate(n, mean, sd, confidence)
            rec[m] = e.mean
            rec[f"{m}_ci"] = e.half_width
        out.append(rec)
    _drop_single_labels(out, CONFIG)
    return out


def _drop_single_labels(rows: list[dict[str, Any]], cell: Sequence[str]) -> None:
    """``config`` stays set only when some cell has rows of more than one configuration (then a
    table shows the column); otherwise it is None. ``spec_hash`` always stays."""
    seen: dict[tuple[Any, ...], set[str]] = {}
    for r in rows:
        seen.setdefault(tuple(r[c] for c in cell), set()).add(r["config"])
    if all(len(labels) == 1 for labels in seen.values()):
        for r in rows:
            r["config"] = None


def config_legend(store: ResultsStore, rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """What each configuration label of ``rows`` stands for: its stored spec and the settings
    in which the specs of the labels differ (cell-choosing fields such as the seeds aside)."""
    specs: dict[str, str] = {}
    for r in rows:
        if r.get("config") and r.get("spec_hash"):
            specs.setdefault(r["config"], r["spec_hash"])
    if not specs:
        return []
    flat = {label: _flatten(_read_spec(store, h)) for label, h in specs.items()}
    keys = sorted({k for f in flat.values() for k in f if k not in _AXES})
    differ = [k for k in keys if len({repr(f.get(k)) for f in flat.values()}) > 1]
    lines = []
    for label, h in sorted(specs.items()):
        settings = ", ".join(f"{k} = {_toml_value(flat[label].get(k))}" for k in differ) or "no setting differs"
        lines.append(f"config {label}: spec {store.root / 'specs' / (h + '.toml')} ({settings})")
    lines.append(
        "(configurations are told apart by config_key; list them with "
        f'`vcpulab query {store.root} "SELECT DISTINCT config_key, spec_hash, vcpulab_version FROM runs"`)'
    )
    return lines


def _read_spec(store: ResultsStore, spec_hash: str) -> dict[str, Any]:
    path = store.root / "specs" / f"{spec_hash}.toml"
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in table.items():
        if isinstance(v, Mapping):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _toml_value(value: Any) -> str:
    if value is None:
        return "(default)"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(value, ensure_ascii=False, default=str)


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


def stored_builds(store: ResultsStore) -> dict[str, int]:
    """The model builds (``vcpulab_version``) whose results ``store`` holds, with their number
    of stored cells."""
    con = store.connect()
    if "vcpulab_version" not in _columns(con):
        return {}
    rows = con.execute("SELECT vcpulab_version, count(*) FROM runs GROUP BY 1 ORDER BY 1").fetchall()
    return {v: n for v, n in rows if v is not None}


def categorize(store: ResultsStore, th: Thresholds = Thresholds(), build: str | None = None) -> list[dict[str, Any]]:
    """Per (workload, variant, vCPUs, threads): the TPDS overhead categories and the DIS
    ch.4 scalability type, from the means over repetitions of the stored cells (of model build
    ``build`` only when given, else of every build, each build a configuration of its own).

    - UC's δη_t splits into a guest part, (guest busy time in the VM − C_p) / C_p, and a host
      part, host time of the VM / C_p.
    - **negligible**: δη_t below ``negligible`` in UC and (when stored) in OC and OC2, and no
      other category (signed: OC's strongly negative δη_t counts as small, as in TPDS);
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
    par = "parallelism" if "parallelism" in have else "NULL::DOUBLE"
    sync = "sync_per_thread_s" if "sync_per_thread_s" in have else "NULL::DOUBLE"
    values = {
        "dt": "delta_eta_t",
        "dr": "delta_eta_r",
        "guest_part": "(guest_ns - c_native_ns) / c_native_ns",
        "host_part": "host_ns / c_native_ns",
        "parallelism": par,
        "sync_per_thread_s": sync,
    }
    sums = ", ".join(f"sum({v}), count({v})" for v in values.values())
    # Sums and counts per configuration and per spec that stored some of its rows (each row
    # is stored once, so a configuration's figures are the sums over its specs).
    only = "AND vcpulab_version = ?" if build is not None else ""
    sql = f"""
        SELECT {key}, scenario, config_key, spec_hash, vcpulab_version, {sums}
        FROM runs WHERE scenario IN ('native', 'UC', 'OC', 'OC2') {only}
        GROUP BY {key}, scenario, config_key, spec_hash, vcpulab_version
    """
    cells: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
    for row in con.execute(sql, [build] if build is not None else []).fetchall():
        cells.setdefault(tuple(row[:4]), []).append(row[4:])
    versions = len({row[3] for rows in cells.values() for row in rows})
    names = (
        "workload", "variant", "vcpus", "threads", "dt_uc", "dr_uc", "guest_part", "host_part",
        "dt_oc", "dt_oc2", "parallelism", "sync_per_thread_s",
    )  # fmt: skip
    rows_out = []
    for cell, parts in sorted(cells.items(), key=lambda c: tuple("" if v is None else v for v in c[0])):
        for (spec_hash, version), means in _settings(parts, list(values)):
            row = (
                *cell, means["UC"]["dt"], means["UC"]["dr"], means["UC"]["guest_part"], means["UC"]["host_part"],
                means["OC"]["dt"], means["OC2"]["dt"], means["native"]["parallelism"],
                means["native"]["sync_per_thread_s"],
            )  # fmt: skip
            rows_out.append((row, spec_hash, _label(spec_hash, version, versions)))
    out = []
    for row, spec_hash, label in rows_out:
        r: dict[str, Any] = dict(zip(names, row, strict=True))
        r["spec_hash"] = spec_hash
        r["config"] = label
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
    _drop_single_labels(out, ("workload", "variant", "vcpus", "threads"))
    return out


_SCENARIOS = ("native", "UC", "OC", "OC2")


def _settings(
    parts: Sequence[tuple[Any, ...]], fields: Sequence[str]
) -> list[tuple[tuple[str, str], dict[str, dict[str, float | None]]]]:
    """The configurations of one (workload, variant, vCPUs, threads) for :func:`categorize`.

    ``parts`` are (scenario, config_key, spec_hash, build, sum, count, sum, count, ...) of
    ``fields``. Each spec (and build) that stored rows here has a profile: per scenario, the
    configurations it stored. A scenario a spec did not store takes the configurations every
    spec storing it agrees on (e.g. the native cell, which VM settings do not change and which
    is stored once, by whichever spec ran it first); when they disagree it stays undecided.
    Specs with the same profile are one configuration (the same settings stored with more
    seeds, say); it is labelled by its smallest spec hash. Returns per configuration the label's
    (spec hash, build) and per scenario the mean of each field over the profile's rows."""
    totals: dict[tuple[str, str], list[float]] = {}
    stored: dict[tuple[str, str], dict[str, set[str]]] = {}
    for scenario, config, spec_hash, version, *figures in parts:
        acc = totals.setdefault((scenario, config), [0.0] * len(figures))
        for j, v in enumerate(figures):
            acc[j] += v or 0
        stored.setdefault((spec_hash or "", version or ""), {}).setdefault(scenario, set()).add(config)
    agreed: dict[str, frozenset[str] | None] = {}
    for scenario in _SCENARIOS:
        seen = {frozenset(p[scenario]) for p in stored.values() if scenario in p}
        agreed[scenario] = next(iter(seen)) if len(seen) == 1 else None
    profiles: dict[tuple[frozenset[str] | None, ...], tuple[str, str]] = {}
    for spec, mine in sorted(stored.items()):
        profile = tuple(frozenset(mine[s]) if s in mine else agreed[s] for s in _SCENARIOS)
        profiles.setdefault(profile, spec)  # the smallest spec labels it
    out = []
    for profile, spec in sorted(profiles.items(), key=lambda p: p[1]):
        means: dict[str, dict[str, float | None]] = {}
        for scenario, configs in zip(_SCENARIOS, profile, strict=True):
            sums = [0.0] * (2 * len(fields))
            for config in configs or ():
                sums = [a + b for a, b in zip(sums, totals[(scenario, config)], strict=True)]
            means[scenario] = {
                f: sums[2 * j] / sums[2 * j + 1] if sums[2 * j + 1] else None for j, f in enumerate(fields)
            }
        out.append((spec, means))
    return out


UC_CATEGORIES = ("negligible", "high guest", "high host")


def declared_categories(kvm_overhead: Sequence[str]) -> set[str]:
    """The undercommitted TPDS categories a profile declares in ``kvm_overhead`` (entries
    start with the category's name, e.g. "high host overhead (blocking sync, ...)")."""
    return {c for entry in kvm_overhead for c in UC_CATEGORIES if entry.startswith(c)}


def agreement(rows: Sequence[Mapping[str, Any]], declared: Mapping[str, Sequence[str]]) -> list[dict[str, Any]]:
    """Per (workload, variant, config) of ``categorize`` rows, over its vCPU counts: the
    undercommitted categories the simulation gives (the union of high guest and high host over
    the vCPU counts; negligible when every count is negligible) against those the workload's
    profile declares (``declared``: workload → its ``kvm_overhead`` entries; workloads that
    declare nothing at all are left out). TPDS §6 categorizes a program over all its sizes
    (Fig. 4's average and maximum bars), hence the union. The high overcommit category is not
    compared (it also depends on host scheduling, issues #24 and #25)."""
    groups: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    for r in rows:
        if r.get("dt_uc") is None or not declared.get(r["workload"]):
            continue
        groups.setdefault((r["workload"], r["variant"] or "", r.get("config") or ""), []).append(r)
    out = []
    for (workload, variant, config), rs in sorted(groups.items()):
        rs = sorted(rs, key=lambda r: r["vcpus"])
        sim = {c for r in rs for c in r["categories"] if c in ("high guest", "high host")}
        if not sim and all("negligible" in r["categories"] for r in rs):
            sim = {"negligible"}
        want = declared_categories(declared[workload])
        out.append(
            {
                "workload": workload, "variant": variant, "config": config,
                "vcpus": [r["vcpus"] for r in rs],
                "simulated": sorted(sim), "declared": sorted(want), "agree": sim == want,
            }
        )  # fmt: skip
    return out


def scalability_type(parallelism: float | None, sync: float | None, cpus: int, th: Thresholds) -> int | None:
    """DIS ch.4: 1 high parallelism/low sync, 2 low/high, 3 high/high, 4 low/low; ``None``
    without both inputs. The rule is the simulator's (``characterize::classify``, also used by
    ``vcpulab characterize-sim``), with ``th``'s cut-offs."""
    if parallelism is None or sync is None:
        return None
    return _scalability_type(parallelism, sync, cpus, th.high_parallelism, th.slice_ms)
