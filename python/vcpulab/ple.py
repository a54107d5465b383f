"""Pause-loop exiting (PLE) policies compared, as in the APPLES study (DIS ch. 3).

Pure functions over result objects (the dicts of ``vcpulab.simulate`` or ``vcpulab run
--json``) of an experiment whose named variants select PLE policies:

- :func:`normalized` and :func:`performance_matrix`: each variant's performance relative to a
  baseline variant (``[report] baseline``), ``t_virt(baseline) / t_virt(variant)``;
- :func:`inefficiency_matrix`: the mean PLE inefficiency, (wasted spin + switch time) / CPU
  time of the measured VM (``metrics.ple_inefficiency``);
- :func:`classify`: whether a workload is *spinlock-intensive*: its mean inefficiency with a
  fixed 512-cycle PLE window exceeds 5 % (DIS);
- :func:`write_window_plot`: the PLE window of each policy over time (PNG and CSV), from
  ``[record] ple_window = true``.

Every number is a field of a result or a plain mean of such fields over seeds (and, in the
matrices' ``mean`` rows, over workloads).
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import fmean
from typing import Any

from .atomic import write_bytes_atomic, write_csv_atomic
from .scaling import CellKey, baseline_label, cell_key, finite_number, named_and_varied, parse_label, row_variant

SPINLOCK_INTENSIVE_INEFFICIENCY = 0.05
"""Above this mean inefficiency with a fixed 512-cycle window a workload is spinlock-intensive."""

CLASSIFY_WINDOW_CYCLES = 512
"""The fixed PLE window (cycles) the classification is defined with."""

MEAN_ROW = "mean"
"""The ``workload`` of a matrix's summary rows."""

WINDOW_CSV_COLUMNS: tuple[str, ...] = ("variant", "workload", "scenario", "vcpus", "seed", "t_ms", "window_cycles")


# --- reading a result ---------------------------------------------------------------------------


def _is_vm_row(row: Mapping[str, Any]) -> bool:
    return row.get("scenario") != "native"


def measured_vm(row: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The record of VM 0 (the measured VM) in ``run.vms``, or ``None`` (native runs)."""
    vms = (row.get("run") or {}).get("vms") or []
    for vm in vms:
        if vm.get("vm") == 0:
            return dict(vm)
    return dict(vms[0]) if vms else None


def inefficiency(row: Mapping[str, Any]) -> float | None:
    """The measured VM's PLE inefficiency: ``metrics.ple_inefficiency``, else VM 0's
    ``spin.inefficiency``; ``None`` when the run has neither (native runs)."""
    value = finite_number((row.get("metrics") or {}).get("ple_inefficiency"))
    if value is None:
        vm = measured_vm(row)
        value = finite_number(((vm or {}).get("spin") or {}).get("inefficiency"))
    return value


def is_fixed_window(row: Mapping[str, Any], cycles: int = CLASSIFY_WINDOW_CYCLES) -> bool:
    """Whether VM 0 ran the ``fixed`` window policy with every vCPU's window at ``cycles``."""
    vm = measured_vm(row)
    if vm is None or vm.get("window_policy") != "fixed":
        return False
    windows = [v.get("ple_window") for v in vm.get("vcpus") or []]
    return bool(windows) and all(w == cycles for w in windows)


# --- normalised performance -------------------------------------------------------------------


@dataclass(frozen=True)
class NormRow:
    """One VM cell's performance relative to the baseline variant's run of the same cell."""

    variant: str
    workload: str
    scenario: str
    vcpus: int
    threads: Any
    oc_vms: Any
    seed: int
    t_virt_s: float | None
    performance: float | None
    """``t_virt(baseline) / t_virt(row)``: 1 for the baseline, above 1 faster; ``None`` when the
    baseline's run of the cell is missing or either time is."""


def normalized(rows: Sequence[Mapping[str, Any]], baseline: str) -> list[NormRow]:
    """Every VM row (native rows are skipped), in order, with its performance relative to the
    row of variant ``baseline`` that has the same workload, scenario, vCPUs, threads, k and seed.
    A ``baseline`` that is a named variant's name stands for that variant with the row's
    ``experiment.vary`` values (:func:`vcpulab.scaling.baseline_label`): for the baseline
    ``symmetric``, the row ``asym;experiment.corunner=matmul`` is compared with
    ``symmetric;experiment.corunner=matmul``."""
    times: dict[tuple[CellKey, str], float | None] = {}
    for r in rows:
        if _is_vm_row(r):
            times.setdefault((cell_key(r), row_variant(r)), finite_number(r.get("t_virt_s")))
    out = []
    for r in rows:
        if not _is_vm_row(r):
            continue
        key = cell_key(r)
        t = finite_number(r.get("t_virt_s"))
        t_base = times.get((key, baseline_label(row_variant(r), baseline)))
        perf = t_base / t if t_base is not None and t is not None and t > 0 else None
        workload, scenario, vcpus, threads, oc_vms, seed = key
        out.append(NormRow(row_variant(r), workload, scenario, vcpus, threads, oc_vms, seed, t, perf))
    return out


# --- matrices ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class MatrixRow:
    """One line of a :class:`Matrix`: a (workload, scenario, vCPUs), or a ``mean`` row."""

    workload: str
    """The workload, or :data:`MEAN_ROW` for a mean row."""
    scenario: str
    vcpus: int | None
    """``None`` in a mean row."""
    setting: tuple[tuple[str, str], ...]
    """The ``experiment.vary`` values the row is for, as (key, value) pairs, when the columns are
    named variants that also vary keys (``[report] baseline = "symmetric"`` with
    ``experiment.corunner`` varied: one row per co-runner); ``()`` otherwise, and in a mean row
    over every setting."""
    values: tuple[float | None, ...]
    """One per variant (the matrix's columns); ``None`` where no run gave a value."""
    runs: int
    """How many values were averaged: seeds (× threads, k when those vary) in a cell row,
    cell rows in a mean row (the largest count over the columns)."""

    @property
    def is_mean(self) -> bool:
        return self.workload == MEAN_ROW and self.vcpus is None


Setting = tuple[tuple[str, str], ...]
"""``experiment.vary`` values as (key, value) pairs (:attr:`MatrixRow.setting`)."""


@dataclass(frozen=True)
class Matrix:
    """Values per (workload, scenario, vCPUs[, setting]) × variant, averaged over seeds, then
    ``mean`` rows."""

    variants: tuple[str, ...]
    rows: tuple[MatrixRow, ...]

    @property
    def setting_keys(self) -> tuple[str, ...]:
        """The ``experiment.vary`` keys of the rows' settings (empty when the columns are whole
        variant labels)."""
        return tuple(dict.fromkeys(k for row in self.rows for k, _ in row.setting))

    def without(self, variant: str) -> Matrix:
        """The matrix without ``variant``'s column (itself when it has no such column)."""
        if variant not in self.variants:
            return self
        i = self.variants.index(variant)
        rows = tuple(replace(row, values=row.values[:i] + row.values[i + 1 :]) for row in self.rows)
        return Matrix(self.variants[:i] + self.variants[i + 1 :], rows)

    def value(
        self, workload: str, scenario: str, vcpus: int | None, variant: str, setting: Setting = ()
    ) -> float | None:
        """The value of one cell (``workload = "mean"``, ``vcpus = None`` for a mean row)."""
        column = self.variants.index(variant)
        for row in self.rows:
            if (row.workload, row.scenario, row.vcpus, row.setting) == (workload, scenario, vcpus, setting):
                return row.values[column]
        raise KeyError((workload, scenario, vcpus, setting))


def _column_and_setting(label: str, split: bool) -> tuple[str, Setting]:
    if not split:
        return label, ()
    parsed = parse_label(label)
    return str(parsed.name), parsed.parts


def _columns(labels: Sequence[str], variants: Sequence[str], split: bool) -> tuple[str, ...]:
    """The columns: the labels (or, when ``split``, their named variants) in the order of
    ``variants`` (the plan's), then any other in order of appearance. A variant no row has (one
    ``--only`` left out) is not a column."""
    present = dict.fromkeys(_column_and_setting(label, split)[0] for label in labels)
    plan = (_column_and_setting(str(v), split)[0] for v in variants)
    planned = [v for v in dict.fromkeys(plan) if v in present]
    return (*planned, *(v for v in present if v not in planned))


def _mean(values: Sequence[float]) -> float | None:
    return fmean(values) if values else None


def _mean_row(group: Sequence[MatrixRow], scenario: str, setting: Setting, width: int) -> MatrixRow:
    per_column = [[v for line in group if (v := line.values[i]) is not None] for i in range(width)]
    values = tuple(_mean(vs) for vs in per_column)
    return MatrixRow(MEAN_ROW, scenario, None, setting, values, max((len(vs) for vs in per_column), default=0))


def _matrix(
    items: Sequence[tuple[tuple[str, str, int], str, float | None]],
    labels: Sequence[str],
    variants: Sequence[str],
) -> Matrix:
    """``items`` are ((workload, scenario, vcpus), variant label, value): the mean per row and
    column, where a column is a variant label, or its named variant when the labels also vary
    keys (:func:`vcpulab.scaling.named_and_varied`; the varied values then go to the row). Rows are grouped by
    setting in order of first appearance; then the mean rows, each only when it averages more
    than one row: per scenario and setting, then per scenario over every setting."""
    split = named_and_varied(labels)
    columns = _columns(labels, variants, split)
    cells: dict[tuple[Setting, str, str, int], dict[str, list[float]]] = {}
    for (workload, scenario, vcpus), label, value in items:
        column, setting = _column_and_setting(label, split)
        by_column = cells.setdefault((setting, workload, scenario, vcpus), {})
        if value is not None:
            by_column.setdefault(column, []).append(value)
    settings = list(dict.fromkeys(key[0] for key in cells))
    lines: list[MatrixRow] = []
    for (setting, workload, scenario, vcpus), by_column in sorted(cells.items(), key=lambda c: settings.index(c[0][0])):
        values = tuple(_mean(by_column.get(v, [])) for v in columns)
        runs = max((len(by_column.get(v, [])) for v in columns), default=0)
        lines.append(MatrixRow(workload, scenario, vcpus, setting, values, runs))
    means: list[MatrixRow] = []
    for scenario in dict.fromkeys(line.scenario for line in lines):
        in_scenario = [line for line in lines if line.scenario == scenario]
        if len(settings) > 1:
            for setting in settings:
                group = [line for line in in_scenario if line.setting == setting]
                if len(group) > 1:
                    means.append(_mean_row(group, scenario, setting, len(columns)))
        if len(in_scenario) > 1:
            means.append(_mean_row(in_scenario, scenario, (), len(columns)))
    return Matrix(columns, tuple(lines + means))


def _row_key(row: Mapping[str, Any]) -> tuple[str, str, int]:
    return str(row["workload"]), str(row["scenario"]), int(row["vcpus"])


def performance_matrix(rows: Sequence[Mapping[str, Any]], baseline: str, variants: Sequence[str] = ()) -> Matrix:
    """Mean normalised performance (:func:`normalized`) per (workload, scenario, vCPUs) ×
    variant. Columns are the rows' variants in the order of ``variants`` (the plan's, e.g.
    ``PlanInfo.variants``), then any other; the ``mean`` rows average the cell rows of a scenario
    (over workloads and vCPU counts), per column."""
    items = [((n.workload, n.scenario, n.vcpus), n.variant, n.performance) for n in normalized(rows, baseline)]
    return _matrix(items, _vm_labels(rows), variants)


def inefficiency_matrix(rows: Sequence[Mapping[str, Any]], variants: Sequence[str] = ()) -> Matrix:
    """Mean PLE inefficiency (:func:`inefficiency`, a fraction) per (workload, scenario, vCPUs)
    × variant, laid out like :func:`performance_matrix`."""
    items = [(_row_key(r), row_variant(r), inefficiency(r)) for r in rows if _is_vm_row(r)]
    return _matrix(items, _vm_labels(rows), variants)


def _vm_labels(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    return list(dict.fromkeys(row_variant(r) for r in rows if _is_vm_row(r)))


# --- spinlock-intensive classification ----------------------------------------------------------


@dataclass(frozen=True)
class Classification:
    """Whether a workload is spinlock-intensive in one (scenario, vCPUs), measured with the
    cells of ``variant`` (a fixed 512-cycle PLE window)."""

    workload: str
    scenario: str
    vcpus: int
    variant: str
    seeds: int
    """How many runs the inefficiency is the mean of."""
    inefficiency: float
    """Mean (wasted spin + switch time) / CPU time of the measured VM."""
    spinlock_intensive: bool
    """``inefficiency`` > :data:`SPINLOCK_INTENSIVE_INEFFICIENCY`."""


def classify(
    rows: Sequence[Mapping[str, Any]], threshold: float = SPINLOCK_INTENSIVE_INEFFICIENCY
) -> list[Classification]:
    """One classification per (workload, scenario, vCPUs) and variant whose measured VM ran a
    fixed 512-cycle window (:func:`is_fixed_window`), in order of first appearance: the mean
    inefficiency over its seeds, and whether it exceeds ``threshold``. Empty when no cell ran
    such a window (declare a variant with ``vm.ple.window_policy = "fixed"`` and
    ``vm.ple.window_cycles = 512``)."""
    groups: dict[tuple[str, str, int, str], list[float]] = {}
    for r in rows:
        if not _is_vm_row(r) or not is_fixed_window(r):
            continue
        value = inefficiency(r)
        group = groups.setdefault((*_row_key(r), row_variant(r)), [])
        if value is not None:
            group.append(value)
    out = []
    for (workload, scenario, vcpus, variant), values in groups.items():
        if not values:
            continue
        mean = fmean(values)
        out.append(Classification(workload, scenario, vcpus, variant, len(values), mean, mean > threshold))
    return out


# --- PLE window over time ---------------------------------------------------------------------


def window_series(row: Mapping[str, Any]) -> list[tuple[float, float]]:
    """VM 0's ``ple_window_series`` as (t_ns, mean window cycles) points; empty without one."""
    vm = measured_vm(row) or {}
    return [(float(t), float(w)) for t, w in vm.get("ple_window_series") or ()]


def has_window_series(rows: Sequence[Mapping[str, Any]]) -> bool:
    """Whether any row recorded a PLE window series (``[record] ple_window = true``)."""
    return any(window_series(r) for r in rows)


def window_csv_path(png_path: str | Path) -> Path:
    """The CSV written beside the window plot: the same stem, suffix ``.csv``."""
    return Path(png_path).with_suffix(".csv")


def window_csv_rows(rows: Sequence[Mapping[str, Any]]) -> list[list[Any]]:
    """The CSV rows (:data:`WINDOW_CSV_COLUMNS`): every point of every row's series, every
    variant and seed (the plot draws fewer)."""
    out: list[list[Any]] = []
    for r in rows:
        for t_ns, window in window_series(r):
            out.append([row_variant(r), r["workload"], r["scenario"], r["vcpus"], r["seed"], t_ns / 1e6, window])
    return out


def write_window_csv(path: str | Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """Write :func:`window_csv_rows`; the file appears whole or not at all."""
    write_csv_atomic(path, WINDOW_CSV_COLUMNS, window_csv_rows(rows))


@dataclass(frozen=True)
class _Panel:
    key: tuple[str, str, int]
    lines: list[tuple[str, list[float], list[float]]]
    """(variant, t in ms, window cycles) per drawn variant."""
    thresholds: list[tuple[str, list[float], list[float]]]
    """(variant, t in ms, APLE threshold cycles) per variant with ``ple_epochs``."""


def _epoch_steps(vm: Mapping[str, Any]) -> tuple[list[float], list[float]]:
    """APLE's epoch thresholds as a step line: (t in ms, cycles), one point per epoch start and
    the last epoch's end."""
    xs: list[float] = []
    ys: list[float] = []
    for epoch in vm.get("ple_epochs") or ():
        xs.append(float(epoch["start_ns"]) / 1e6)
        ys.append(float(epoch["threshold"]))
    epochs = vm.get("ple_epochs") or ()
    if epochs:
        xs.append(float(epochs[-1]["end_ns"]) / 1e6)
        ys.append(ys[-1])
    return xs, ys


def _panels(rows: Sequence[Mapping[str, Any]]) -> list[_Panel]:
    """One panel per (workload, scenario, vCPUs), with the first seed of every variant whose
    VM 0 has a series and an adaptive (not ``fixed``) window policy."""
    first_seed: dict[tuple[str, str, int, str], Any] = {}
    for r in rows:
        if window_series(r):
            key = (*_row_key(r), row_variant(r))
            first_seed[key] = min(first_seed.get(key, r["seed"]), r["seed"])
    panels: dict[tuple[str, str, int], _Panel] = {}
    for r in rows:
        vm = measured_vm(r) or {}
        series = window_series(r)
        variant = row_variant(r)
        if not series or vm.get("window_policy") == "fixed" or r["seed"] != first_seed[(*_row_key(r), variant)]:
            continue
        panel = panels.setdefault(_row_key(r), _Panel(_row_key(r), [], []))
        panel.lines.append((variant, [t / 1e6 for t, _ in series], [w for _, w in series]))
        xs, ys = _epoch_steps(vm)
        if xs:
            panel.thresholds.append((variant, xs, ys))
    return list(panels.values())


def _draw(panels: Sequence[_Panel]) -> bytes | None:
    """The PNG of the panels; ``None`` if matplotlib is not installed."""
    try:
        from matplotlib.figure import Figure  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    shown = list(panels) or [_Panel(("", "", 0), [], [])]
    ncols = 1 if len(shown) == 1 else 2
    nrows = math.ceil(len(shown) / ncols)
    fig = Figure(figsize=(6.4 * ncols, 3.6 * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, panel in zip(axes, shown, strict=False):
        if not panel.lines:
            message = "only fixed windows recorded (flat lines are not drawn)"
            ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes)
            continue
        for variant, xs, ys in panel.lines:
            ax.step(xs, ys, where="post", linewidth=1.3, label=variant or "window")
        for variant, xs, ys in panel.thresholds:
            label = f"{variant} epoch threshold" if variant else "epoch threshold"
            ax.step(xs, ys, where="post", linewidth=1.0, linestyle="--", label=label)
        values = [y for _, _, ys in panel.lines + panel.thresholds for y in ys if y > 0]
        if values and max(values) / min(values) > 16:
            ax.set_yscale("log", base=2)
        workload, scenario, vcpus = panel.key
        ax.set_title(f"{workload} {scenario}, {vcpus} vCPUs", fontsize="medium")
        ax.set_xlabel("time (ms)")
        ax.set_ylabel("PLE window (cycles)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
    for ax in axes[len(shown) :]:
        ax.set_visible(False)
    fig.suptitle("PLE window over time (mean over the measured VM's vCPUs, first seed)")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    return buf.getvalue()


def write_window_plot(path: str | Path, rows: Sequence[Mapping[str, Any]]) -> bool:
    """Plot the PLE window over time to ``path`` (PNG) and write its data beside it
    (:func:`window_csv_path`, :func:`write_window_csv`). One panel per (workload, scenario,
    vCPUs), drawing the first seed: a line per variant whose VM 0 recorded a series and whose
    window policy is not ``fixed`` (a fixed window is a flat line), and for APLE its epoch
    thresholds as a dashed step line. The CSV has every series (fixed ones and every seed too).

    Returns ``False``, and writes nothing, when no row has a series or matplotlib is not
    installed. Each file appears whole or not at all."""
    if not has_window_series(rows):
        return False
    png = _draw(_panels(rows))
    if png is None:
        return False
    write_window_csv(window_csv_path(path), rows)
    write_bytes_atomic(path, png)
    return True
