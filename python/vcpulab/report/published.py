"""What ``vcpulab run`` reports beyond the standard table: the plan's ``[report]`` and
``[[published]]`` settings (from ``Plan.info()``), published-value comparisons and
TLB-shootdown latency CDFs.

Every number here is either a field of a result object from the simulator or a plain
summary of such fields (a mean over seeds, an order statistic of recorded samples).
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..atomic import write_bytes_atomic, write_csv_atomic
from ..spec import toml_value

CDF_QUANTILES: tuple[tuple[str, float], ...] = (("p10", 0.10), ("p50", 0.50), ("p90", 0.90), ("p99", 0.99))
"""The quantiles of the CDF summary table (``max`` is shown too)."""

CDF_CSV_COLUMNS: tuple[str, ...] = ("variant", "scenario", "workload", "vcpus", "seed", "latency_us", "cdf")

CELL_FIELDS: tuple[str, ...] = ("workload", "scenario", "vcpus", "threads", "seed")
"""The keys of ``[[published]].where`` that name a cell field rather than a setting."""


# --- plan info --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Published:
    """One ``[[published]]`` entry: a value from the literature for the cells ``where`` selects."""

    metric: str
    value: float | None
    """``None`` for a withheld or figure-only result (shown, not compared)."""
    source: str
    where: Mapping[str, Any] = field(default_factory=dict)
    relative_to: Mapping[str, Any] | None = None
    """Baseline cells: the value is the metric relative to theirs, seed by seed."""
    compare: str = "ratio"
    aggregate: str = "mean"
    """How the cells one seed matches are combined (mean, max, min, sum)."""


@dataclass(frozen=True)
class PlanInfo:
    """``Plan.info()``: published values, ``[report]`` settings and variant labels."""

    published: tuple[Published, ...] = ()
    columns: tuple[str, ...] = ()
    cdf: str | None = None
    variants: tuple[str, ...] = ()
    baseline: str | None = None
    """``[report] baseline``: the variant the others' performance is shown relative to."""
    ple: bool = False
    """``[report] ple``: show PLE inefficiency and the spinlock-intensive classification."""


def parse_info(text: str) -> PlanInfo:
    """Parse the JSON text of ``Plan.info()``."""
    data = json.loads(text)
    report = data.get("report") or {}
    published = tuple(
        Published(
            metric=str(p["metric"]),
            value=None if p.get("value") is None else float(p["value"]),
            source=str(p.get("source", "")),
            where=dict(p.get("where") or {}),
            relative_to=None if p.get("relative_to") is None else dict(p["relative_to"]),
            compare=str(p.get("compare") or "ratio"),
            aggregate=str(p.get("aggregate") or "mean"),
        )
        for p in data.get("published") or ()
    )
    return PlanInfo(
        published=published,
        columns=tuple(str(c) for c in report.get("columns") or ()),
        cdf=report.get("cdf"),
        variants=tuple(str(v) for v in data.get("variants") or ()),
        baseline=None if report.get("baseline") is None else str(report["baseline"]),
        ple=bool(report.get("ple", False)),
    )


# --- metrics ----------------------------------------------------------------------------------


def metric_value(result: Mapping[str, Any], name: str) -> float | None:
    """``result["metrics"][name]``, else a numeric top-level field ``name`` (e.g. ``omega``),
    else a dotted path into the result (``exits.HLT``, ``host_ns_by_reason.SCHED``); ``None``
    when the run did not measure it."""
    metrics = result.get("metrics") or {}
    value = metrics.get(name, result.get(name))
    if value is None and "." in name:
        node: Any = result
        for part in name.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        value = node
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


# --- published comparisons --------------------------------------------------------------------


def shown(value: Any) -> str:
    """A value as it appears in a variant label: strings bare, anything else as TOML."""
    return value if isinstance(value, str) else toml_value(value)


def where_text(where: Mapping[str, Any]) -> str:
    """``{"scenario": "UC", "vm.tlb": "pv"}`` → ``scenario=UC, vm.tlb=pv``; a list of values
    (any of them) as ``vm.tlb=(pv | shoot4u)``."""

    def one(value: Any) -> str:
        return f"({' | '.join(shown(v) for v in value)})" if isinstance(value, list) else shown(value)

    return ", ".join(f"{key}={one(value)}" for key, value in where.items())


def _setting(settings: Mapping[str, Any] | None, dotted: str) -> Any:
    """The value at a dotted path of the materialised spec, or ``None``."""
    node: Any = settings
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def cell_matches(cell: Mapping[str, Any], where: Mapping[str, Any], settings: Mapping[str, Any] | None = None) -> bool:
    """Whether a cell (or a result, which carries the cell's fields) satisfies every condition.

    A key naming a cell field (``workload``, ``scenario``, ``vcpus``, ``threads``, ``seed``)
    compares with that field (``scenario`` case-insensitively). Any other key is a setting such
    as ``vm.tlb``: it matches when the cell's variant label has ``key=value``; when the label
    does not mention the key at all, the materialised spec (``settings``) decides if given.
    A list of values matches any of them (``variant = ["fixed 512", "fixed 1024"]``).
    """
    label = f";{cell.get('variant') or ''};"
    for key, wanted in where.items():
        if isinstance(wanted, list):
            if not any(cell_matches(cell, {key: one}, settings) for one in wanted):
                return False
            continue
        if key in CELL_FIELDS:
            if key not in cell:
                return False
            have, want = shown(cell[key]), shown(wanted)
            if key == "scenario":
                have, want = have.casefold(), want.casefold()
            if have != want:
                return False
        elif key == "variant":
            if str(cell.get("variant") or "") != shown(wanted):
                return False
        elif f";{key}=" in label:
            if f";{key}={shown(wanted)};" not in label:
                return False
        else:
            fixed = _setting(settings, key)
            if fixed is None or shown(fixed) != shown(wanted):
                return False
    return True


@dataclass(frozen=True)
class Comparison:
    """A published value next to the mean simulated value of the results it applies to."""

    published: Published
    matched: int
    """How many results the ``where`` conditions select (0: not run)."""
    measured: int
    """How many of those have the metric."""
    simulated: float | None

    @property
    def ratio(self) -> float | None:
        if self.simulated is None or not self.published.value:
            return None
        return self.simulated / self.published.value

    @property
    def status(self) -> str:
        """``ok``, ``not run`` (no result matches) or ``not measured`` (none has the metric)."""
        if self.matched == 0:
            return "not run"
        return "ok" if self.simulated is not None else "not measured"


def compare_published(
    published: Sequence[Published],
    results: Sequence[Mapping[str, Any]],
    settings: Mapping[str, Any] | None = None,
) -> list[Comparison]:
    """One comparison per published entry: the metric over the matching results, as the
    reproduction scoreboard computes it (one number per seed: the matching cells, relative to
    ``relative_to``'s and combined by ``aggregate``, then the mean over seeds; for ``max`` and
    ``min`` the extreme of the cells' means)."""
    from ..reproduce.verdict import simulated_estimate  # the scoreboard's statistic (it imports this module)

    out = []
    for p in published:
        matching = [r for r in results if cell_matches(r, p.where, settings)]
        est = simulated_estimate(
            results,
            p.metric,
            p.where,
            settings=settings,
            aggregate=p.aggregate,
            relative_to=p.relative_to,
            compare=p.compare,
        )
        values = [v for v in (metric_value(r, p.metric) for r in matching) if v is not None]
        out.append(Comparison(published=p, matched=len(matching), measured=len(values), simulated=est.mean))
    return out


# --- TLB latency CDFs -------------------------------------------------------------------------


def tlb_samples_ns(result: Mapping[str, Any]) -> list[int]:
    """The recorded TLB-shootdown latencies (ns) of the measured instance (instance 0), sorted."""
    instances = (result.get("run") or {}).get("instances") or []
    if not instances:
        return []
    samples = (instances[0].get("tlb") or {}).get("samples_ns") or []
    return sorted(int(s) for s in samples)


def quantile(sorted_values: Sequence[float], q: float) -> float | None:
    """The empirical quantile (nearest rank: the smallest value whose CDF is ≥ ``q``)."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q * len(sorted_values) - 1e-9))
    return sorted_values[min(rank, len(sorted_values)) - 1]


@dataclass(frozen=True)
class CdfSummary:
    count: int
    quantiles_us: dict[str, float | None]
    """``p10`` … ``p99`` and ``max``, in µs (``None`` without samples)."""


def cdf_summary(result: Mapping[str, Any]) -> CdfSummary:
    samples = tlb_samples_ns(result)
    qs: dict[str, float | None] = {}
    for name, q in CDF_QUANTILES:
        v = quantile(samples, q)
        qs[name] = None if v is None else v / 1000.0
    qs["max"] = samples[-1] / 1000.0 if samples else None
    return CdfSummary(count=len(samples), quantiles_us=qs)


def cdf_rows(results: Sequence[Mapping[str, Any]]) -> list[list[Any]]:
    """The CSV rows: one per sample, sorted by latency within each result, with its CDF value."""
    rows: list[list[Any]] = []
    for r in results:
        samples = tlb_samples_ns(r)
        n = len(samples)
        for i, ns in enumerate(samples, 1):
            rows.append([r.get("variant", ""), r["scenario"], r["workload"], r["vcpus"], r["seed"], ns / 1000.0, i / n])
    return rows


def write_cdf_csv(path: str | Path, results: Sequence[Mapping[str, Any]]) -> None:
    """Write every sample with its CDF value; the file appears whole or not at all."""
    write_csv_atomic(path, CDF_CSV_COLUMNS, cdf_rows(results))


def series_label(result: Mapping[str, Any]) -> str:
    parts = [str(result.get("variant") or ""), str(result["workload"]), str(result["scenario"])]
    parts.append(f"{result['vcpus']} vCPUs")
    parts.append(f"seed {result['seed']}")
    return " ".join(p for p in parts if p)


def cdf_png_path(csv_path: str | Path) -> Path:
    return Path(csv_path).with_suffix(".png")


def write_cdf_png(path: str | Path, results: Sequence[Mapping[str, Any]]) -> bool:
    """Plot one step CDF per result (log-scale µs); ``False`` if matplotlib is not installed."""
    try:
        from matplotlib.figure import Figure  # type: ignore[import-not-found,unused-ignore]
        from matplotlib.ticker import LogFormatter  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return False
    fig = Figure(figsize=(7, 4.5), layout="constrained")
    ax = fig.subplots()
    plotted = 0
    for r in results:
        # Log scale: a zero latency (none expected) cannot be drawn; its rank still counts.
        samples = tlb_samples_ns(r)
        n = len(samples)
        points = [(ns / 1000.0, i / n) for i, ns in enumerate(samples, 1) if ns > 0]
        if not points:
            continue
        xs, ys = zip(*points, strict=True)
        ax.step([xs[0], *xs], [0.0, *ys], where="post", label=series_label(r))
        plotted += 1
    if plotted:
        ax.set_xscale("log")
        # Plain numbers (4, 10, 20) rather than 4×10⁰; minor ticks labelled on narrow ranges.
        ax.xaxis.set_major_formatter(LogFormatter(labelOnlyBase=False))
        ax.xaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(1.5, 0.5)))
        ax.legend(fontsize="small")
    else:
        ax.text(0.5, 0.5, "no TLB shootdowns recorded", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("TLB shootdown latency (µs)")
    ax.set_ylabel("CDF")
    ax.set_ylim(0, 1.02)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title("TLB shootdown latency (measured instance)")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    write_bytes_atomic(path, buf.getvalue())
    return True
