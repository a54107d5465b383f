"""Scalability over vCPU counts, performance spread over a varied setting, and asymmetric vCPUs
(DIS ch. 4 and 5).

Pure functions over result objects (the dicts of ``vcpulab.simulate`` or ``vcpulab run
--json``); nothing here reads or writes files:

- :func:`speedup_curves`: per (workload, scenario, variant), the measured speedup over the vCPU
  counts, ``t(n₀) / t(n)`` with ``n₀`` the smallest count, next to the efficiency-based speedup
  ``N × useful / available`` (``metrics.eff_speedup``); :func:`efficiency` its decomposition
  (``[report] scalability = true``); :func:`speedup_png` and :func:`speedup_csv_rows` the plot
  and the data of ``vcpulab run --scaling-out``;
- :func:`spread`: the mean, standard deviation and coefficient of variation of the run time
  over the values of one ``experiment.vary`` key, e.g. the co-runner (``[report] spread``);
- :func:`asymmetric`: what the dynamic asymmetric-vCPU policy (``[host.asymmetric]``) did;
- variant labels (:func:`parse_label`, :func:`baseline_label`): a result's ``variant`` is the
  named variant's name and/or ``KEY=VALUE`` parts of ``experiment.vary``, joined with ``;``.

Every number is a field of a result or a plain mean (or standard deviation) of such fields.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean, pstdev
from typing import Any

from .spec import SCENARIOS

EFFICIENCY_FIELDS: tuple[str, ...] = ("eff_useful", "eff_busy_wait", "eff_overhead", "eff_unused", "eff_borrowed")
"""The decomposition of the available time (fractions): useful + busy_wait + overhead + unused −
borrowed = 1."""

ASYMMETRIC_COMPONENTS: tuple[str, ...] = ("allocation", "latency", "resolver")
"""The components of ``[host.asymmetric]``, in the order they are shown."""

ASYMMETRIC_COUNTS: tuple[str, ...] = (
    "periods",
    "grown",
    "latency_lowered",
    "latency_raised",
    "source_lowered",
    "balance_swaps",
    "urgency_swaps",
)
"""The counters of ``run.asymmetric`` that :func:`asymmetric` averages."""

SPEEDUP_CSV_COLUMNS: tuple[str, ...] = (
    "workload",
    "scenario",
    "variant",
    "vcpus",
    "runs",
    "t_mean_s",
    "speedup",
    "eff_speedup",
)


# --- the [report] settings ----------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """The ``[report]`` keys of this module, from ``Plan.info()``."""

    scalability: bool = False
    """``[report] scalability``: print the speedup curves and the efficiency decomposition."""
    spread: str | None = None
    """``[report] spread``: the ``experiment.vary`` key to show the performance spread over."""


def parse_settings(info_text: str) -> Settings:
    """The settings of the JSON text of ``Plan.info()``."""
    report = json.loads(info_text).get("report") or {}
    spread = report.get("spread")
    return Settings(scalability=bool(report.get("scalability", False)), spread=None if spread is None else str(spread))


# --- variant labels ------------------------------------------------------------------------------


@dataclass(frozen=True)
class VariantLabel:
    """A result's ``variant`` taken apart: ``"asym;experiment.corunner=matmul"`` is the named
    variant ``asym`` with the ``experiment.vary`` part ``experiment.corunner=matmul``."""

    name: str | None
    """The named variant (``[[experiment.variants]]``), ``None`` without one."""
    parts: tuple[tuple[str, str], ...]
    """(key, value as shown) of each ``experiment.vary`` key, in the label's order."""

    def value(self, key: str) -> str | None:
        """The value of ``key``, ``None`` when the label does not vary it."""
        return next((v for k, v in self.parts if k == key), None)

    def without(self, key: str) -> VariantLabel:
        """The label without ``key``'s part."""
        return VariantLabel(self.name, tuple((k, v) for k, v in self.parts if k != key))

    def __str__(self) -> str:
        named = [self.name] if self.name is not None else []
        return ";".join(named + [f"{k}={v}" for k, v in self.parts])


def parse_label(label: str | None) -> VariantLabel:
    """Take a ``variant`` label apart. A first part without ``=`` is the named variant's name (a
    name has neither ``;`` nor ``=``); a later part without ``=`` continues the value before it
    (a string value with a ``;``), so ``str(parse_label(x)) == x``."""
    if not label:
        return VariantLabel(None, ())
    pieces = label.split(";")
    name: str | None = None
    if "=" not in pieces[0]:
        name, pieces = pieces[0], pieces[1:]
    parts: list[tuple[str, str]] = []
    for piece in pieces:
        key, eq, value = piece.partition("=")
        if eq:
            parts.append((key, value))
        elif parts:
            parts[-1] = (parts[-1][0], f"{parts[-1][1]};{piece}")
        else:  # before any KEY=VALUE, so after a name: keep it with the name (not a label vcpulab makes)
            name = f"{name};{piece}"
    return VariantLabel(name, tuple(parts))


def variant_keys(labels: Iterable[str | None]) -> list[str]:
    """The ``experiment.vary`` keys of the labels, in order of first appearance."""
    return list(dict.fromkeys(k for label in labels for k, _ in parse_label(label).parts))


def variant_names(labels: Iterable[str | None]) -> list[str]:
    """The named variants of the labels, in order of first appearance."""
    return list(dict.fromkeys(n for label in labels if (n := parse_label(label).name) is not None))


def named_and_varied(labels: Iterable[str | None]) -> bool:
    """Whether every label names a variant and some also vary ``experiment.vary`` keys
    (``asym;experiment.corunner=matmul``): tables then show the named variant and the varied
    values apart (5 variants × 5 co-runners as 5 columns, not 25)."""
    parsed = [parse_label(label) for label in labels]
    return bool(parsed) and all(p.name is not None for p in parsed) and any(p.parts for p in parsed)


def _is_name(baseline: str) -> bool:
    return ";" not in baseline and "=" not in baseline


def baseline_label(label: str | None, baseline: str) -> str:
    """The label of the run a run of ``label`` is compared with (``[report] baseline``).

    A baseline that is a named variant's name stands for that variant with the run's other
    parts: for the baseline ``symmetric``, ``asym;experiment.corunner=matmul`` is compared with
    ``symmetric;experiment.corunner=matmul``. Any other baseline (an ``experiment.vary`` label
    such as ``vm.tlb=pv``, or a whole label) is compared with as it is."""
    if not _is_name(baseline):
        return baseline
    return str(VariantLabel(baseline, parse_label(label).parts))


def is_baseline(label: str | None, baseline: str) -> bool:
    """Whether a run of ``label`` is a run of the baseline variant (:func:`baseline_label`)."""
    return (label or "") == baseline_label(label, baseline)


def names_variant(labels: Iterable[str | None], baseline: str) -> bool:
    """Whether ``baseline`` is one of the labels or the name of one of their named variants."""
    labels = [label or "" for label in labels]
    return baseline in labels or (_is_name(baseline) and baseline in variant_names(labels))


# --- reading a result ----------------------------------------------------------------------------


def finite_number(value: Any) -> float | None:
    """A finite number, else ``None``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def row_variant(row: Mapping[str, Any]) -> str:
    """A row's variant label ("" when nothing varies)."""
    return str(row.get("variant") or "")


def run_time(row: Mapping[str, Any]) -> float | None:
    """The run time: ``t_virt_s`` of the measured VM, ``t_native_s`` for a native cell; ``None``
    when missing or not positive."""
    t = finite_number(row.get("t_native_s" if row.get("scenario") == "native" else "t_virt_s"))
    return t if t is not None and t > 0 else None


def _metric(row: Mapping[str, Any], name: str) -> float | None:
    return finite_number((row.get("metrics") or {}).get(name))


def _measured_vm(row: Mapping[str, Any]) -> Mapping[str, Any] | None:
    vms = (row.get("run") or {}).get("vms") or []
    return next((vm for vm in vms if vm.get("vm") == 0), vms[0] if vms else None)


def migrations(row: Mapping[str, Any]) -> int | None:
    """Total migrations of the measured VM's vCPUs; ``None`` when not recorded (native runs)."""
    counts = [v.get("migrations") for v in (_measured_vm(row) or {}).get("vcpus") or ()]
    numbers = [int(c) for c in counts if isinstance(c, int) and not isinstance(c, bool)]
    return sum(numbers) if numbers else None


def _mean(values: Sequence[float]) -> float | None:
    return fmean(values) if values else None


def eff_speedup(row: Mapping[str, Any]) -> float | None:
    """A run's efficiency-based speedup (DIS ch. 4: ``N × useful / available``), as the simulator
    computed it (Rust ``account::metrics::efficiency``): ``metrics.eff_speedup`` of a result, or
    the ``eff_speedup`` column of a stored run. Nothing in Python recomputes it."""
    value = _metric(row, "eff_speedup")
    return value if value is not None else finite_number(row.get("eff_speedup"))


def mean_eff_speedup(rows: Iterable[Mapping[str, Any]]) -> float | None:
    """The mean :func:`eff_speedup` over ``rows`` that have one."""
    return _mean([e for r in rows if (e := eff_speedup(r)) is not None])


CurveKey = tuple[str, str, str]
"""(workload, scenario, variant)."""


def _first_seen(values: Iterable[str]) -> dict[str, int]:
    """Each value's rank in order of first appearance."""
    return {v: i for i, v in enumerate(dict.fromkeys(values))}


def _scenario_rank(scenario: str) -> int:
    return SCENARIOS.index(scenario) if scenario in SCENARIOS else len(SCENARIOS)


def _order(rows: Sequence[Mapping[str, Any]]) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
    """The sort key of (workload, scenario, variant, ...) tuples: workloads and variants in
    order of first appearance in ``rows``, scenarios in :data:`~vcpulab.spec.SCENARIOS` order."""
    workloads = _first_seen(str(r["workload"]) for r in rows)
    variants = _first_seen(row_variant(r) for r in rows)

    def key(k: tuple[Any, ...]) -> tuple[Any, ...]:
        workload, scenario, variant, *rest = k
        return (workloads[workload], _scenario_rank(scenario), variants[variant], *rest)

    return key


# --- speedup curves and efficiency ---------------------------------------------------------------


@dataclass(frozen=True)
class SpeedupPoint:
    """One vCPU count of a :class:`SpeedupCurve`."""

    vcpus: int
    runs: int
    """How many runs (seeds) the means are over."""
    t_s: float | None
    """Mean run time (:func:`run_time`) over the runs."""
    speedup: float | None
    """Measured: mean time at the curve's smallest vCPU count / ``t_s``."""
    eff_speedup: float | None
    """Mean ``metrics.eff_speedup``: N × useful / available (DIS ch. 4)."""


@dataclass(frozen=True)
class SpeedupCurve:
    """The speedup of one (workload, scenario, variant) over its vCPU counts."""

    workload: str
    scenario: str
    variant: str
    base_vcpus: int
    """n₀: the smallest vCPU count with a run time, what the measured speedup is relative to."""
    points: tuple[SpeedupPoint, ...]
    """One per vCPU count, ascending."""

    def point(self, vcpus: int) -> SpeedupPoint | None:
        return next((p for p in self.points if p.vcpus == vcpus), None)


def relative_speedup(t_base: float | None, t: float | None) -> float | None:
    """The measured (relative) speedup ``t(n₀) / t(n)``: the run time at the smallest vCPU count
    of the series over the run time at ``n`` (1 at n₀). The one definition used by ``vcpulab
    run`` and the report."""
    return t_base / t if t_base is not None and t else None


def speedup_linear_to_n0(base_vcpus: int, t_base: float | None, t: float | None) -> float | None:
    """``n₀ · t(n₀) / t(n)``: the relative speedup scaled by n₀, i.e. normalised to one vCPU on
    the assumption that the series scaled linearly up to n₀ (equal to :func:`relative_speedup`
    when n₀ = 1). A different quantity from the measured speedup, named apart wherever shown:
    the report plots it against the ideal ``S = n`` and the efficiency-based speedup, which are
    per unit too."""
    s = relative_speedup(t_base, t)
    return None if s is None else base_vcpus * s


@dataclass(frozen=True)
class SeriesPoint:
    """One vCPU count of a series of run times: :func:`speedup_series`."""

    vcpus: int
    runs: int
    t_s: float | None
    speedup: float | None
    """:func:`relative_speedup` against the series' n₀."""


def speedup_series(times: Mapping[int, Sequence[float]]) -> tuple[int, list[SeriesPoint]]:
    """n₀ (the smallest vCPU count with a run time) and, per vCPU count ascending, the mean run
    time over the runs and the measured speedup :func:`relative_speedup`. ``times``: vCPU count
    → the run times (:func:`run_time`) of the series' runs at that count."""
    timed = [n for n in sorted(times) if times[n]]
    base = timed[0] if timed else min(times)
    t_base = _mean(times[base])
    points = []
    for n in sorted(times):
        t = _mean(times[n])
        points.append(SeriesPoint(n, len(times[n]), t, relative_speedup(t_base, t)))
    return base, points


def speedup_curves(rows: Sequence[Mapping[str, Any]]) -> list[SpeedupCurve]:
    """One curve per (workload, scenario, variant), workloads and variants in order of first
    appearance and scenarios in the usual order: at each vCPU count the mean run time over the
    seeds, the measured speedup ``t̄(n₀) / t̄(n)`` (n₀: the smallest count with a time;
    :func:`speedup_series`) and the mean efficiency-based speedup."""
    groups: dict[CurveKey, dict[int, list[Mapping[str, Any]]]] = {}
    for r in rows:
        key = (str(r["workload"]), str(r["scenario"]), row_variant(r))
        groups.setdefault(key, {}).setdefault(int(r["vcpus"]), []).append(r)
    curves = []
    for key in sorted(groups, key=_order(rows)):
        by_vcpus = groups[key]
        times = {n: [t for r in group if (t := run_time(r)) is not None] for n, group in by_vcpus.items()}
        base, series = speedup_series(times)
        points = tuple(
            SpeedupPoint(p.vcpus, p.runs, p.t_s, p.speedup, mean_eff_speedup(by_vcpus[p.vcpus])) for p in series
        )
        curves.append(SpeedupCurve(*key, base, points))
    return curves


def vcpu_counts(curves: Sequence[SpeedupCurve]) -> list[int]:
    """Every vCPU count of the curves, ascending."""
    return sorted({p.vcpus for c in curves for p in c.points})


def has_curve(curves: Sequence[SpeedupCurve]) -> bool:
    """Whether any curve has a measured speedup at two vCPU counts or more."""
    return any(sum(p.speedup is not None for p in c.points) > 1 for c in curves)


@dataclass(frozen=True)
class Efficiency:
    """The efficiency-based speedup of one (workload, scenario, variant, vCPUs) and its
    decomposition, each a mean over the runs (seeds); fractions of the available time."""

    workload: str
    scenario: str
    variant: str
    vcpus: int
    runs: int
    speedup: float | None
    useful: float | None
    busy_wait: float | None
    overhead: float | None
    unused: float | None
    borrowed: float | None


def efficiency(rows: Sequence[Mapping[str, Any]]) -> list[Efficiency]:
    """The mean ``eff_*`` metrics per (workload, scenario, variant, vCPUs), ordered like
    :func:`speedup_curves` and then by vCPUs."""
    names = ("eff_speedup", *EFFICIENCY_FIELDS)
    groups: dict[tuple[str, str, str, int], list[Mapping[str, Any]]] = {}
    for r in rows:
        groups.setdefault((str(r["workload"]), str(r["scenario"]), row_variant(r), int(r["vcpus"])), []).append(r)
    out = []
    for key in sorted(groups, key=_order(rows)):
        group = groups[key]
        means = [_mean([v for r in group if (v := _metric(r, name)) is not None]) for name in names]
        out.append(Efficiency(*key, len(group), *means))
    return out


def speedup_csv_rows(curves: Sequence[SpeedupCurve]) -> list[list[Any]]:
    """The rows of ``--scaling-out``'s CSV (:data:`SPEEDUP_CSV_COLUMNS`), a point per line."""
    return [
        [c.workload, c.scenario, c.variant, p.vcpus, p.runs, p.t_s, p.speedup, p.eff_speedup]
        for c in curves
        for p in c.points
    ]


def speedup_csv_path(png_path: str | Path) -> Path:
    """The CSV written beside the speedup plot: the same stem, suffix ``.csv``."""
    return Path(png_path).with_suffix(".csv")


def speedup_png(curves: Sequence[SpeedupCurve]) -> bytes | None:
    """The speedup plot as PNG bytes, ``None`` if matplotlib is not installed: one panel per
    workload, x = vCPUs, y = measured speedup, a line per (scenario, variant) and the ideal
    speedup n / n₀ dashed (y = x when the smallest count is 1)."""
    try:
        from matplotlib.figure import Figure  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    panels: dict[str, list[SpeedupCurve]] = {}
    for c in curves:
        panels.setdefault(c.workload, []).append(c)
    shown = list(panels.items()) or [("", [])]
    ncols = 1 if len(shown) == 1 else 2
    nrows = math.ceil(len(shown) / ncols)
    fig = Figure(figsize=(6.4 * ncols, 4.0 * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, (workload, group) in zip(axes, shown, strict=False):
        xs = vcpu_counts(group)
        if xs:
            base = min(c.base_vcpus for c in group)
            ideal = "ideal (y = x)" if base == 1 else f"ideal (n / {base})"
            ax.plot(xs, [x / base for x in xs], linestyle="--", color="black", linewidth=1.0, label=ideal)
        for c in group:
            points = [(p.vcpus, p.speedup) for p in c.points if p.speedup is not None]
            label = f"{c.scenario} {c.variant}".strip()
            ax.plot([x for x, _ in points], [y for _, y in points], marker="o", linewidth=1.3, label=label)
        ax.set_title(workload, fontsize="medium")
        ax.set_xlabel("vCPUs")
        ax.set_ylabel("speedup t(n₀) / t(n)")
        if xs:
            ax.set_xticks(xs)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    for ax in axes[len(shown) :]:
        ax.set_visible(False)
    fig.suptitle("Measured speedup (n₀: the smallest vCPU count; mean time over seeds)", fontsize="medium")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    return buf.getvalue()


# --- performance spread ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Spread:
    """The run times of one (workload, scenario, vCPUs, rest of the variant) over the values of
    the spread key and the seeds."""

    workload: str
    scenario: str
    vcpus: int
    variant: str
    """The variant label without the spread key's part (``""`` when nothing else varies)."""
    values: tuple[str, ...]
    """The spread key's values in the group, in order of first appearance."""
    runs: int
    """How many run times the statistics are over (values × seeds)."""
    mean_s: float | None
    std_s: float | None
    """Population standard deviation of the run times."""
    cv: float | None
    """Coefficient of variation, ``std_s / mean_s``."""
    performance: float | None
    """Mean of ``t(baseline) / t`` over the group's runs that have a baseline run (same cell
    and :func:`baseline_label`); ``None`` without a baseline or a match."""


CellKey = tuple[str, str, int, Any, Any, int]
"""(workload, scenario, vcpus, threads, oc_vms, seed): what a run is compared with its baseline on."""


def cell_key(row: Mapping[str, Any]) -> CellKey:
    """What a row is compared with its baseline on: every cell field but the variant."""
    return (
        str(row["workload"]),
        str(row["scenario"]),
        int(row["vcpus"]),
        row.get("threads"),
        row.get("oc_vms"),
        int(row["seed"]),
    )


def spread(rows: Sequence[Mapping[str, Any]], key: str, baseline: str | None = None) -> list[Spread]:
    """Group the runs whose variant varies ``key`` by (workload, scenario, vCPUs, every other
    part of the variant) and give each group's mean run time (:func:`run_time`), its population
    standard deviation and coefficient of variation over ``key``'s values and the seeds, and,
    with a ``baseline``, the mean performance relative to it (:class:`Spread`). Groups are in
    order of workload, scenario, vCPUs, then first appearance."""
    base: dict[tuple[CellKey, str], float | None] = {}
    for r in rows:
        base.setdefault((cell_key(r), row_variant(r)), run_time(r))
    groups: dict[tuple[str, str, str, int], list[Mapping[str, Any]]] = {}
    for r in rows:
        label = parse_label(row_variant(r))
        if label.value(key) is None:
            continue
        rest = str(label.without(key))
        groups.setdefault((str(r["workload"]), str(r["scenario"]), rest, int(r["vcpus"])), []).append(r)
    workloads = _first_seen(str(r["workload"]) for r in rows)
    rests = _first_seen(k[2] for k in groups)
    out = []
    for workload, scenario, rest, vcpus in sorted(
        groups, key=lambda k: (workloads[k[0]], _scenario_rank(k[1]), k[3], rests[k[2]])
    ):
        group = groups[(workload, scenario, rest, vcpus)]
        values = tuple(dict.fromkeys(str(parse_label(row_variant(r)).value(key)) for r in group))
        times = [t for r in group if (t := run_time(r)) is not None]
        mean = _mean(times)
        std = pstdev(times) if times else None
        cv = std / mean if std is not None and mean else None
        perf = None
        if baseline is not None:
            ratios = []
            for r in group:
                t_base = base.get((cell_key(r), baseline_label(row_variant(r), baseline)))
                if t_base is not None and (t := run_time(r)) is not None:
                    ratios.append(t_base / t)
            perf = _mean(ratios)
        out.append(Spread(workload, scenario, vcpus, rest, values, len(times), mean, std, cv, perf))
    return out


# --- asymmetric vCPUs ----------------------------------------------------------------------------


@dataclass(frozen=True)
class AsymmetricSummary:
    """What ``[host.asymmetric]`` did in the cells of one variant, each a mean per cell."""

    variant: str
    cells: int
    components: tuple[str, ...]
    """The components on (of :data:`ASYMMETRIC_COMPONENTS`) in any of the cells."""
    counts: tuple[float | None, ...]
    """Mean of each of :data:`ASYMMETRIC_COUNTS`."""
    migrations: float | None
    """Mean total migrations of the measured VM's vCPUs."""

    def count(self, name: str) -> float | None:
        return self.counts[ASYMMETRIC_COUNTS.index(name)]


def has_asymmetric(rows: Sequence[Mapping[str, Any]]) -> bool:
    """Whether any run recorded ``run.asymmetric`` (a component of ``[host.asymmetric]`` on)."""
    return any((r.get("run") or {}).get("asymmetric") for r in rows)


def asymmetric(rows: Sequence[Mapping[str, Any]]) -> list[AsymmetricSummary]:
    """One summary per variant with ``run.asymmetric`` in any cell, in order of first appearance,
    over those cells."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        if (r.get("run") or {}).get("asymmetric"):
            groups.setdefault(row_variant(r), []).append(r)
    out = []
    for variant, group in groups.items():
        records = [r["run"]["asymmetric"] for r in group]
        on = tuple(c for c in ASYMMETRIC_COMPONENTS if any(a.get(c) for a in records))
        counts = tuple(
            _mean([v for a in records if (v := finite_number(a.get(name))) is not None]) for name in ASYMMETRIC_COUNTS
        )
        moves = _mean([float(m) for r in group if (m := migrations(r)) is not None])
        out.append(AsymmetricSummary(variant, len(group), on, counts, moves))
    return out
