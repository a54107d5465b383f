"""Human-readable output: number formats and rich tables. Nothing here computes a metric;
every figure shown is a field of a result object from the simulator (or a summary of such
fields made in :mod:`vcpulab.report`)."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from . import text
from .ple import SPINLOCK_INTENSIVE_INEFFICIENCY, Classification, Matrix
from .report import CDF_QUANTILES, CdfSummary, Comparison, metric_value, where_text
from .report.common import gamma_notes
from .report.memory import MemoryPoint, MemoryRow
from .scaling import (
    ASYMMETRIC_COUNTS,
    AsymmetricSummary,
    Efficiency,
    SpeedupCurve,
    Spread,
    named_and_varied,
    parse_label,
    variant_keys,
    vcpu_counts,
)

DASH = "—"

LEGEND = """\
t_native, t_virt  simulated run time natively and in the VM
δη_t              time efficiency lost: (t_v·γ_v − t_p·γ_p) / (t_p·γ_p)
δη_r              extra CPU cycles spent: (C_v − C_p) / C_p
ω                 (1 + δη_t) / (1 + δη_r); above 1 the overhead sits on the critical path
weighted speedup  Σ baseline time / instance time over co-running instances (1 = baseline)
exits/s           VM exits per simulated second
top host cost     the exit reason or host activity (SCHED = host scheduling of vCPU threads)
                  that took the most host time in the measured VMs, and its share of their host time"""
LEGEND_INDENT = 18
LEGEND_WIDTH = 104


def stdout_console() -> Console:
    """A console for stdout (no markup, nothing unprintable: :class:`vcpulab.text.SafeConsole`);
    when stdout is not a terminal, wide enough not to squeeze tables."""
    return text.console()


def stderr_console() -> Console:
    """The same for stderr (the reports of commands whose stdout belongs to another program)."""
    return text.console(stderr=True, highlight=False)


def fmt_seconds(value: float | None) -> str:
    """``0.0123`` → ``12.3 ms``; ``None`` → a dash."""
    if value is None:
        return DASH
    magnitude = abs(value)
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if magnitude >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value / 1e-9:.3g} ns" if magnitude else "0 s"


def fmt_pct(value: float | None) -> str:
    """A relative overhead ``0.123`` → ``+12.3%``."""
    return DASH if value is None else f"{value * 100:+.1f}%"


def fmt_ratio(value: float | None) -> str:
    return DASH if value is None else f"{value:.3f}"


def fmt_rate(value: float | None) -> str:
    """``12345.6`` → ``12.3 k``."""
    if value is None:
        return DASH
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.3g}"


def fmt_number(value: float | None) -> str:
    """A compact number: ``3.4567`` → ``3.46``, ``12345.6`` → ``12.3 k``; ``None`` → a dash."""
    return fmt_rate(value)


def fmt_metric(name: str, value: float | None) -> str:
    """A ``metrics`` value: a ``*_rate`` as a percentage (``0.853`` → ``85.3%``), else compact."""
    if value is None:
        return DASH
    if name.endswith("_rate"):
        return f"{value * 100:.1f}%"
    return fmt_number(value)


def fmt_us(value: float | None) -> str:
    """A latency in µs: ``3.456`` → ``3.46``, ``12345.6`` → ``12,346``."""
    if value is None:
        return DASH
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"


def has_variants(rows: Sequence[Mapping[str, Any]]) -> bool:
    """Whether any cell or result belongs to a named policy variant (``experiment.vary``)."""
    return any(r.get("variant") for r in rows)


def add_variant_column(table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
    """The variant label is what tells rows apart: never squeezed (other columns give way)."""
    add_label_column(table, [str(r.get("variant") or "") for r in rows])


def add_label_column(table: Table, labels: Iterable[str], header: str = "variant") -> None:
    """A column of labels that is never squeezed: at least as wide as its longest label."""
    width = max((len(x) for x in labels), default=0)
    table.add_column(header, no_wrap=True, min_width=max(width, len(header)))


def add_cell_key_columns(
    table: Table, results: Sequence[Mapping[str, Any]]
) -> Callable[[Mapping[str, Any]], list[str | Text]]:
    """Adds the columns that name a cell (variant and seed only when they vary) and returns
    the function that gives a result's cells for them."""
    show_variant = has_variants(results)
    show_seed = len({r.get("seed") for r in results}) > 1
    if show_variant:
        add_variant_column(table, results)
    table.add_column("workload")
    table.add_column("scenario")
    table.add_column("vCPUs", justify="right")
    if show_seed:
        table.add_column("seed", justify="right")

    def key(r: Mapping[str, Any]) -> list[str | Text]:
        row: list[str | Text] = [Text(str(r.get("variant") or ""))] if show_variant else []
        row += [Text(str(r["workload"])), Text(str(r["scenario"])), str(r["vcpus"])]
        if show_seed:
            row.append(str(r["seed"]))
        return row

    return key


def exits_per_second(result: Mapping[str, Any]) -> float | None:
    """VM exits per simulated second (``None`` for native runs)."""
    if result.get("scenario") == "native" or result.get("t_virt_s") is None:
        return None
    total = sum(result.get("exits", {}).values())
    duration = result.get("duration_s") or result.get("t_virt_s") or 0.0
    return total / duration if duration > 0 else None


def measured_host_ns_by_reason(result: Mapping[str, Any]) -> dict[str, float]:
    """Host time (ns) by exit reason / host activity of the VMs that hold the measured instances
    (``run.vms[i].host_ns_by_reason``): a co-runner's VMs are left out. Without the run record
    (or without measured VMs in it), the result's ``host_ns_by_reason``, which covers every VM
    of the run."""
    run = result.get("run") or {}
    measured = {i.get("vm") for i in run.get("instances") or () if not i.get("background")} - {None}
    vms = [vm for vm in run.get("vms") or () if vm.get("vm") in measured]
    if not vms:
        return {r: float(ns) for r, ns in (result.get("host_ns_by_reason") or {}).items()}
    out: dict[str, float] = {}
    for vm in vms:
        for r, ns in (vm.get("host_ns_by_reason") or {}).items():
            out[r] = out.get(r, 0.0) + float(ns)
    return out


def top_host_reason(result: Mapping[str, Any]) -> str:
    """The exit reason with the most host time in the measured VMs, with its share of their
    host time: numerator and denominator over the same VMs
    (:func:`measured_host_ns_by_reason`), so the share is at most 100 %."""
    by_reason = measured_host_ns_by_reason(result)
    busy = {reason: ns for reason, ns in by_reason.items() if ns > 0}
    if not busy:
        return DASH
    reason = max(sorted(busy), key=lambda r: busy[r])
    return f"{reason} {100 * busy[reason] / sum(busy.values()):.0f}%"


def results_table(results: Sequence[Mapping[str, Any]], columns: Sequence[str] = ()) -> Table:
    """The results, one row per cell; ``columns`` are extra ``metrics`` names (``[report] columns``)."""
    table = Table(title="vcpulab results", title_justify="left")
    key = add_cell_key_columns(table, results)
    for name in ("t_native", "t_virt", "δη_t", "δη_r", "ω", "weighted speedup", "exits/s"):
        table.add_column(name, justify="right")
    table.add_column("top host cost")
    for name in columns:
        table.add_column(Text(name), justify="right", overflow="fold")  # a long name folds, not cut
    for r in results:
        row = key(r)
        virt = r["scenario"] != "native"
        row += [
            fmt_seconds(r.get("t_native_s")),
            fmt_seconds(r.get("t_virt_s")),
            fmt_pct(r.get("delta_eta_t") if virt else None),
            fmt_pct(r.get("delta_eta_r") if virt else None),
            fmt_ratio(r.get("omega")),
            fmt_ratio(r.get("weighted_speedup")),
            fmt_rate(exits_per_second(r)),
            Text(top_host_reason(r)),
        ]
        row += [fmt_metric(name, metric_value(r, name)) for name in columns]
        table.add_row(*row)
    # OC and OC2 cells share one simulation (the k VMs); count each simulation once.
    layout = {"native": "native", "UC": "1 VM", "OC": "k VMs", "OC2": "k VMs"}
    sims = {
        (r.get("variant"), r["workload"], r["vcpus"], r.get("threads"), r["seed"], layout.get(str(r["scenario"]))): r
        for r in results
    }
    events = sum(int(r.get("events", 0)) for r in sims.values())
    wall = sum(float(r.get("wall_s", 0.0)) for r in sims.values())
    table.caption = f"{len(results)} cells · {len(sims)} scenario simulations · {events:,} events · {wall:.2f} s wall"
    table.caption_justify = "left"
    return table


def published_table(comparisons: Sequence[Comparison]) -> Table:
    """Published values next to the simulated ones (``[[published]]``)."""
    table = Table(title="Published comparison", title_justify="left")
    table.add_column("metric")
    table.add_column("where")
    for name in ("simulated", "published", "sim/pub", "runs"):
        table.add_column(name, justify="right")
    table.add_column("source")
    for c in comparisons:
        p = c.published
        ratio = c.ratio
        simulated: str | Text = fmt_metric(p.metric, c.simulated)
        if c.status != "ok":
            simulated = Text(c.status, style="dim")
        table.add_row(
            Text(p.metric),
            Text(where_text(p.where) or "all cells"),
            simulated,
            fmt_metric(p.metric, p.value),
            DASH if ratio is None else f"{ratio:.2f}×",
            f"{c.measured}/{c.matched}" if c.matched else DASH,
            Text(p.source),
        )
    table.caption = "simulated: mean over the matching runs that measured the metric (runs: measured/matching)"
    table.caption_justify = "left"
    return table


def cdf_table(results: Sequence[Mapping[str, Any]], summaries: Sequence[CdfSummary]) -> Table:
    """Quantiles of each result's TLB-shootdown latency (measured instance), in µs."""
    table = Table(title="TLB shootdown latency CDF (µs)", title_justify="left")
    key = add_cell_key_columns(table, results)
    table.add_column("samples", justify="right")
    for name in [q for q, _ in CDF_QUANTILES] + ["max"]:
        table.add_column(name, justify="right")
    for r, s in zip(results, summaries, strict=True):
        row = key(r)
        row.append(f"{s.count:,}")
        row += [fmt_us(s.quantiles_us[q]) for q, _ in CDF_QUANTILES]
        row.append(fmt_us(s.quantiles_us["max"]))
        table.add_row(*row)
    return table


def _matrix_table(
    title: str,
    matrix: Matrix,
    fmt: Callable[[float | None], str],
    best: Callable[[Sequence[float]], float] | None,
) -> Table:
    """A :class:`~vcpulab.ple.Matrix`: one row per (workload, scenario, vCPUs[, setting]), one
    column per variant, the ``mean`` rows after a rule; with ``best`` (``max`` or ``min``) the
    best value of each row in bold (unless every value of the row is the same). Rows of another
    setting (co-runner, ...) start a new section."""
    table = Table(title=Text(title), title_justify="left", min_width=len(title))  # the title on one line
    table.add_column("workload", no_wrap=True)
    table.add_column("scenario")
    table.add_column("vCPUs", justify="right")
    keys = matrix.setting_keys
    if keys:
        table.add_column(Text("\n".join(str(key_header(k)) for k in keys)), no_wrap=True)
    for variant in matrix.variants:  # a long name may wrap over lines; the values do not
        name = variant or "(default)"
        longest_word = max((len(word) for word in name.split()), default=0)
        table.add_column(Text(name), justify="right", min_width=max(7, min(longest_word, 16)))
    rows = matrix.rows
    for i, row in enumerate(rows):
        present = [v for v in row.values if v is not None]
        top = best(present) if best is not None and len(set(present)) > 1 else None  # no bold for a tie of all
        values = [Text(fmt(v), style="bold" if v is not None and v == top else "") for v in row.values]
        label = Text(row.workload, style="bold") if row.is_mean else Text(row.workload)
        vcpus = "all" if row.vcpus is None else str(row.vcpus)
        setting = [Text(_setting_text(row.setting, keys))] if keys else []
        following = rows[i + 1] if i + 1 < len(rows) else None
        new_section = following is not None and (
            following.is_mean != row.is_mean or (not row.is_mean and following.setting != row.setting)
        )
        table.add_row(label, Text(row.scenario), vcpus, *setting, *values, end_section=new_section)
    return table


def _setting_text(setting: Sequence[tuple[str, str]], keys: Sequence[str]) -> str:
    """A matrix row's ``experiment.vary`` values in the order of ``keys`` ("all" for a mean row
    over every setting)."""
    if not setting:
        return "all"
    values = dict(setting)
    return ", ".join(values.get(k, DASH) for k in keys)


def _has_means(matrix: Matrix) -> bool:
    return any(row.is_mean for row in matrix.rows)


def _means_note(matrix: Matrix) -> str:
    if matrix.setting_keys:
        return f"mean: of the rows of its scenario and {', '.join(matrix.setting_keys)} (all: over every value)"
    return "mean: of the rows of its scenario"


def _has_gaps(matrix: Matrix) -> bool:
    return any(v is None for row in matrix.rows for v in row.values)


def performance_table(matrix: Matrix, baseline: str) -> Table:
    """Each variant's performance relative to ``baseline`` (:func:`vcpulab.ple.performance_matrix`)."""
    title = f"Performance relative to {baseline} (t_{baseline} / t; > 1 is faster)"
    shown = matrix.without(baseline) if len(matrix.variants) > 1 else matrix  # its column is all 1
    table = _matrix_table(title, shown, fmt_ratio, max)
    notes = [f"t: t_virt of the measured VM; t_{baseline} / t, mean over seeds"]
    if _has_means(matrix):
        notes.append(_means_note(matrix))
    if _has_gaps(matrix):
        notes.append(f"{DASH}: no {baseline} run of the cell")
    table.caption = Text("; ".join(notes))
    table.caption_justify = "left"
    return table


def _fraction(value: float | None) -> str:
    """``0.0523`` → ``5.2%``."""
    return DASH if value is None else f"{value * 100:.1f}%"


def inefficiency_table(matrix: Matrix) -> Table:
    """Mean PLE inefficiency per variant (:func:`vcpulab.ple.inefficiency_matrix`)."""
    table = _matrix_table("Average PLE inefficiency (wasted spin + switch time) / CPU time", matrix, _fraction, min)
    means = f"; {_means_note(matrix)}" if _has_means(matrix) else ""
    table.caption = f"measured VM, mean over seeds{means}"
    table.caption_justify = "left"
    return table


def classification_table(classes: Sequence[Classification]) -> Table:
    """Spinlock-intensive workloads (:func:`vcpulab.ple.classify`)."""
    threshold = f"{SPINLOCK_INTENSIVE_INEFFICIENCY * 100:g} %"
    title = f"Spinlock-intensive? (fixed 512-cycle window, inefficiency > {threshold})"
    table = Table(title=title, title_justify="left", min_width=len(title))
    table.add_column("workload")
    table.add_column("scenario")
    table.add_column("vCPUs", justify="right")
    table.add_column("measured with", no_wrap=True)
    table.add_column("runs", justify="right")
    table.add_column("inefficiency", justify="right")
    table.add_column("spinlock-intensive")
    for c in classes:
        verdict = Text("yes", style="bold") if c.spinlock_intensive else Text("no")
        table.add_row(
            Text(c.workload),
            Text(c.scenario),
            str(c.vcpus),
            Text(c.variant or "(default)"),
            str(c.seeds),
            _fraction(c.inefficiency),
            verdict,
        )
    return table


# --- scalability, performance spread, asymmetric vCPUs (vcpulab.scaling) -------------------------


def _speedup(value: float | None) -> str:
    return DASH if value is None else f"{value:.2f}"


def _caption(table: Table, *notes: str) -> Table:
    table.caption = Text("; ".join(notes))
    table.caption_justify = "left"
    return table


def key_header(key: str) -> Text:
    """The header of an ``experiment.vary`` key's column, broken after its dots
    (``experiment.\ncorunner``) so that a long key does not widen the column."""
    return Text(key.replace(".", ".\n"))


def add_variant_label_columns(table: Table, labels: Sequence[str]) -> Callable[[str], list[str | Text]]:
    """Columns for variant labels: one ``variant`` column, or, when every label names a variant
    and some also vary keys (``asym;experiment.corunner=matmul``), the named variant and one
    column per varied key. Returns the function that gives a label's cells."""
    if not named_and_varied(labels):
        add_label_column(table, labels)
        return lambda label: [Text(label or "(default)")]
    parsed = [parse_label(label) for label in labels]
    add_label_column(table, [str(p.name) for p in parsed])
    keys = variant_keys(labels)
    for key in keys:
        values = [p.value(key) or DASH for p in parsed]
        table.add_column(key_header(key), no_wrap=True, min_width=max(len(v) for v in values))

    def cells(label: str) -> list[str | Text]:
        p = parse_label(label)
        return [Text(str(p.name)), *(Text(p.value(k) or DASH) for k in keys)]

    return cells


def _summary_table(title: str, variants: Iterable[str]) -> tuple[Table, Callable[[str, str, str], list[str | Text]]]:
    """A summary table titled on one line, with the columns that name a row (workload,
    scenario, and the variant when some row has one); returns it and the function that gives a
    row's cells for those columns."""
    table = Table(title=Text(title), title_justify="left", min_width=len(title))
    table.add_column("workload")
    table.add_column("scenario")
    labels = list(variants)
    show_variant = any(labels)
    if show_variant:
        add_label_column(table, labels)

    def key(workload: str, scenario: str, variant: str) -> list[str | Text]:
        return [Text(workload), Text(scenario), *([Text(variant)] if show_variant else [])]

    return table, key


def _add_vcpu_columns(table: Table, counts: Iterable[int]) -> None:
    for n in counts:
        table.add_column(f"{n} vCPU{'s' if n != 1 else ''}", justify="right", no_wrap=True)


def speedup_table(curves: Sequence[SpeedupCurve]) -> Table:
    """The speedup curves (:func:`vcpulab.scaling.speedup_curves`): one row per (workload,
    scenario, variant), one column per vCPU count, each cell ``measured / efficiency-based``."""
    table, key = _summary_table("Speedup over vCPU counts: measured / efficiency-based", (c.variant for c in curves))
    counts = vcpu_counts(curves)
    _add_vcpu_columns(table, counts)
    for c in curves:
        row = key(c.workload, c.scenario, c.variant)
        for n in counts:
            p = c.point(n)
            row.append(DASH if p is None else f"{_speedup(p.speedup)} / {_speedup(p.eff_speedup)}")
        table.add_row(*row)
    bases = sorted({c.base_vcpus for c in curves})
    n0 = f"n₀ = {bases[0]}" if len(bases) == 1 else "n₀ = the row's smallest vCPU count"
    return _caption(
        table,
        f"measured: t(n₀) / t(n), t = t_virt (t_native natively) mean over seeds, {n0}",
        "efficiency-based: N × useful / available (eff_speedup, DIS ch.4), mean over seeds",
    )


def efficiency_table(items: Sequence[Efficiency]) -> Table:
    """The efficiency-based speedup and its decomposition (:func:`vcpulab.scaling.efficiency`)."""
    title = "Efficiency decomposition (% of available time; useful + busy-wait + overhead + unused − borrowed = 100%)"
    table, key = _summary_table(title, (e.variant for e in items))
    runs = {e.runs for e in items}
    show_runs = len(runs) > 1  # else said once in the caption
    for name in ("vCPUs", "runs", "eff speedup", "useful", "busy-wait", "overhead", "unused", "borrowed"):
        if name != "runs" or show_runs:
            table.add_column(name, justify="right")
    for e in items:
        row = key(e.workload, e.scenario, e.variant)
        row += [str(e.vcpus), *([str(e.runs)] if show_runs else []), _speedup(e.speedup)]
        row += [_fraction(v) for v in (e.useful, e.busy_wait, e.overhead, e.unused, e.borrowed)]
        table.add_row(*row)
    seeds = "mean over seeds"
    if not show_runs and runs:
        n = next(iter(runs))
        seeds += f" ({n} run{'s' if n != 1 else ''} each)"
    return _caption(
        table,
        "available: the cores natively, the time slices allocated to the VM in a VM",
        "unused: idle natively, allocated but not used in a VM; borrowed: run beyond the allocation",
        seeds,
    )


def spread_table(items: Sequence[Spread], key: str, baseline: str | None = None) -> Table:
    """The run time's spread over the values of ``key`` (:func:`vcpulab.scaling.spread`)."""
    title = f"Performance spread over {key} (σ: population standard deviation over its values and seeds)"
    table = Table(title=Text(title), title_justify="left", min_width=len(title))
    show_variant = any(s.variant for s in items)
    same_values = len({s.values for s in items}) == 1  # then named once, in the caption
    table.add_column("workload", no_wrap=True)
    table.add_column("scenario")
    table.add_column("vCPUs", justify="right")
    if show_variant:
        add_label_column(table, (s.variant for s in items))
    if not same_values:
        table.add_column(Text(key), overflow="fold")
    for name in ("runs", "mean t", "σ", "CV"):
        table.add_column(name, justify="right")
    if baseline is not None:
        table.add_column(Text(f"vs {baseline}"), justify="right", no_wrap=True)
    for s in items:
        row: list[str | Text] = [Text(s.workload), Text(s.scenario), str(s.vcpus)]
        if show_variant:
            row.append(Text(s.variant))
        if not same_values:
            row.append(Text(", ".join(s.values)))
        row += [str(s.runs), fmt_seconds(s.mean_s), fmt_seconds(s.std_s), _fraction(s.cv)]
        if baseline is not None:
            row.append(fmt_ratio(s.performance))
        table.add_row(*row)
    notes = ["t: t_virt of the measured VM (t_native natively)", "CV = σ / mean t"]
    if same_values and items:
        notes.insert(0, f"{key}: {', '.join(items[0].values)}")
    if baseline is not None:
        notes.append(f"vs {baseline}: mean of t_{baseline} / t over the runs (> 1 is faster)")
    return _caption(table, *notes)


def asymmetric_table(items: Sequence[AsymmetricSummary]) -> Table:
    """What the asymmetric-vCPU policy did (:func:`vcpulab.scaling.asymmetric`)."""
    title = "Asymmetric vCPUs ([host.asymmetric]; mean per cell)"
    table = Table(title=Text(title), title_justify="left", min_width=len(title))
    label_cells = add_variant_label_columns(table, [a.variant for a in items])
    counts = {a.cells for a in items}
    show_cells = len(counts) > 1  # else named once, in the caption
    if show_cells:
        table.add_column("cells", justify="right")
    table.add_column("on", no_wrap=True)
    for name in ASYMMETRIC_COUNTS:  # two-line headers keep the table narrow; numbers never wrap
        table.add_column(name.replace("_", "\n"), justify="right", no_wrap=True, min_width=5)
    table.add_column("migrations", justify="right", no_wrap=True, min_width=5)
    for a in items:
        row: list[str | Text] = [*label_cells(a.variant), *([str(a.cells)] if show_cells else [])]
        row.append(Text("+".join(c[0].upper() for c in a.components) or DASH))
        row += [fmt_number(v) for v in a.counts]
        row.append(fmt_number(a.migrations))
        table.add_row(*row)
    return _caption(
        table,
        *([] if show_cells or not items else [f"{items[0].cells} cells per row"]),
        "on: the components on (A allocation, L latency, R resolver)",
        "periods: allocation periods decided; grown: vCPU demands grown; latency lowered/raised: wake-up "
        "granularities changed; source lowered: wake-up IPI senders' granularities lowered for an urgent vCPU",
        "swaps: the resolver's; migrations: total over the measured VM's vCPUs",
    )


# --- memory and NUMA (vcpulab.report.memory) --------------------------------------------------


def _memory_cell(p: MemoryPoint | None, numad: bool) -> str:
    if p is None:
        return DASH
    parts = [fmt_ratio(p.cpi), DASH if p.remote_fraction is None else f"{100 * p.remote_fraction:.0f}%"]
    parts.append(DASH if p.bw_util_max is None else f"{p.bw_util_max:.2f}")
    if numad:
        parts.append(DASH if p.numad_host_ms is None else f"{p.numad_host_ms:.3g} ms")
    return " / ".join(parts)


def memory_table(rows: Sequence[MemoryRow]) -> Table:
    """The memory model's summary (:func:`vcpulab.report.memory.console_rows`): one row per
    (workload, scenario, variant), one column per vCPU count."""
    numad = any(p.numad_host_ms is not None for r in rows for p in r.points.values())
    what = "CPI / remote / bandwidth" + (" / numad host time" if numad else "")
    table, key = _summary_table(f"Memory and NUMA: {what} (mean over seeds)", (r.variant for r in rows))
    counts = sorted({n for r in rows for n in r.points})
    _add_vcpu_columns(table, counts)
    for r in rows:
        row = key(r.workload, r.scenario, r.variant)
        on = any(p.numad_host_ms is not None for p in r.points.values())  # numad was on in this row's runs
        row += [_memory_cell(r.points.get(n), on) for n in counts]
        table.add_row(*row)
    notes = [
        "CPI: cycles per instruction of the computation (1 = all memory local and unloaded)",
        "remote: share of memory accesses served by another node or a cross-socket cache transfer",
        "bandwidth: the busiest node's mean demand / its bandwidth (above 1: saturated)",
    ]
    if numad:
        notes.append("numad host time (rows with numad on): its page migration, charged to the host")
    if any(r.scenario == "native" and "/" in r.variant for r in rows):
        notes.append("native rows name the variants whose native runs are identical")
    return _caption(table, *notes)


def legend(results: Sequence[Mapping[str, Any]] = ()) -> Text:
    """The legend of :func:`results_table`; with OC or OC2 rows among ``results``, what their
    δη_t compares with (γ_v/γ_p) and what a negative value means (:func:`gamma_notes`)."""
    lines = [LEGEND]
    for scenario, note in gamma_notes(results):
        wrapped = textwrap.wrap(note, width=LEGEND_WIDTH - LEGEND_INDENT)
        lines.append(f"{scenario:<{LEGEND_INDENT}}{wrapped[0]}")
        lines += [" " * LEGEND_INDENT + w for w in wrapped[1:]]
    return Text("\n".join(lines), style="dim")


def workloads_table(items: Sequence[Mapping[str, Any]]) -> Table:
    table = Table(
        title="built-in workloads (vcpulab workloads show NAME: the full profile with its sources)",
        title_justify="left",
    )
    for name in ("name", "suite", "model", "sync", "type", "description"):
        table.add_column(name, justify="right" if name == "type" else "left")
    for w in items:
        stype = int(w.get("scalability_type") or 0)
        table.add_row(
            Text(str(w["name"])),
            Text(str(w.get("suite") or "micro")),
            Text(str(w.get("model", ""))),
            Text(", ".join(w.get("sync") or [])),
            str(stype) if stype else "",
            Text(str(w.get("description", ""))),
        )
    return table


def traced_table(items: Sequence[Mapping[str, Any]]) -> Table:
    """``vcpulab workloads``' second table: the traced real programs (items as
    :func:`vcpulab.cli.traced_item` makes them)."""
    table = Table(
        title=Text("traced programs (vcpulab workloads show NAME: the manifest; a spec names one like a built-in)"),
        title_justify="left",
    )
    for name in ("name", "threads traced", "input", "source commit"):
        table.add_column(name)
    for w in items:
        table.add_row(
            Text(str(w["name"])),
            Text(", ".join(str(t) for t in w.get("threads") or ()) or "none"),
            Text(text.one_line(w.get("input") or "")),
            Text(str(w.get("commit") or "")[:12]),
        )
    return table


def _seconds(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "—"


def _size(entry: Mapping[str, Any], path: Any) -> str:
    n = entry.get("bytes")
    if not isinstance(n, int):
        try:
            n = path.stat().st_size
        except OSError:
            return "missing"
    return f"{n / 1e3:,.0f} kB" if n >= 1000 else f"{n} B"


def traced_program_view(program: Any) -> list[Any]:
    """``vcpulab workloads show traced.X``: the manifest's program fields, then a table of its
    traces (``program`` a :class:`vcpulab.traced.manifest.Program`)."""
    head = Table(
        title=Text(f"{program.workload} ({program.directory / 'manifest.toml'})"),
        title_justify="left",
        show_header=False,
        box=None,
    )
    head.add_column(style="bold")
    head.add_column()
    for key, value in program.info.items():
        if isinstance(value, list):
            shown = " ".join(str(v) for v in value)
        elif isinstance(value, Mapping):
            shown = ", ".join(f"{k}={v}" for k, v in value.items())
        else:
            shown = str(value)
        head.add_row(Text(str(key)), Text(text.one_line(shown)))
    traces = Table(
        title=f"{len(program.traces)} traces",
        title_justify="left",
        caption="wall s, CPU s: the program run untraced (the median run); traced wall s: under the tracer",
        caption_justify="left",
    )
    columns = ("threads", "file", "size", "sha256", "CPUs", "wall s", "CPU s", "traced wall s", "kernel", "glibc")
    for name in columns:
        traces.add_column(name, justify="right" if name in ("threads", "size", "CPUs") or " s" in name else "left")
    for t in program.traces:
        e = t.entry
        untraced = e.get("untraced") if isinstance(e.get("untraced"), Mapping) else {}
        traced = e.get("traced") if isinstance(e.get("traced"), Mapping) else {}
        user, sys_ = untraced.get("user_s"), untraced.get("sys_s")
        cpu = user + sys_ if isinstance(user, (int, float)) and isinstance(sys_, (int, float)) else None
        traces.add_row(
            str(t.threads),
            Text(t.file),
            _size(e, t.path(program.directory)),
            Text(t.sha256[:12]),
            Text(str(e.get("cpus", "—"))),
            _seconds(untraced.get("wall_s")),
            _seconds(cpu),
            _seconds(traced.get("wall_s")),
            Text(str(e.get("kernel", "—"))),
            Text(str(e.get("glibc", "—"))),
        )
    return [head, traces]


def platforms_table(items: Sequence[Mapping[str, Any]]) -> Table:
    table = Table(
        title=Text('platform presets ([platform] preset = "NAME"; vcpulab platforms show NAME: values and sources)'),
        title_justify="left",
    )
    for name in ("name", "testbed", "used by"):
        table.add_column(name)
    for p in items:
        name = f"{p['name']} (default)" if p.get("default") else str(p["name"])
        table.add_row(Text(name), Text(str(p.get("title", ""))), Text(", ".join(p.get("used_by") or [])))
    return table


def characterization_table(c: Mapping[str, Any]) -> Table:
    def level(high: bool) -> str:
        return "high" if high else "low"

    expected = int(c["expected_type"])
    match = (
        ""
        if expected == 0
        else (" (as in DIS Table 4.1)" if expected == c["scalability_type"] else f" (DIS Table 4.1: type {expected})")
    )
    table = Table(
        title=f"{c['workload']}: native, {c['cpus']} CPUs, {c['threads']} threads, {c['run_s'] * 1e3:.1f} ms simulated",
        title_justify="left",
        show_header=False,
    )
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_column("class")
    par = c["parallelism"]
    table.add_row(
        "workload parallelism (running threads)",
        f"{par:.2f} of {c['cpus']}",
        f"{level(c['high_parallelism'])} (>= 75 %)",
    )
    table.add_row(
        "synchronization (blocks / thread / s)",
        f"{c['sync_per_thread_s']:.1f}",
        f"{level(c['high_sync'])} (>= {c['sync_threshold_per_s']:.1f}/s: once per time slice)",
    )
    table.add_row("scalability type", str(c["scalability_type"]), Text(match.strip(" ()")))
    table.add_row("busy-waiting share of busy time", f"{c['spin_frac'] * 100:.1f} %", "")
    table.add_row("blocks / s", f"{c['blocks_per_s']:,.0f}", "")
    table.add_row("TLB shootdowns / s", f"{c['shootdowns_per_s']:,.0f}", "")
    table.add_row("call-function IPIs / s", f"{c['call_ipis_per_s']:,.0f}", "")
    if c.get("requests_per_s") is not None:
        table.add_row("requests / s", f"{c['requests_per_s']:,.0f}", "")
    table.caption = f"profile version {c['version']}, hash {c['hash']}"
    return table


def policies_table(items: Sequence[Mapping[str, Any]]) -> Table:
    table = Table(title="policies (select with the field, e.g. --set vm.tlb=shoot4u)", title_justify="left")
    for name in ("kind", "name", "field", "description"):
        table.add_column(name)
    for p in items:
        table.add_row(*(Text(str(p[k])) for k in ("kind", "name", "field", "description")))
    return table


def cells_table(cells: Sequence[Mapping[str, Any]]) -> Table:
    show_variant = has_variants(cells)
    table = Table(title="cells", title_justify="left")
    table.add_column("#", justify="right")
    if show_variant:
        add_variant_column(table, cells)
    table.add_column("workload")
    table.add_column("scenario")
    for name in ("vCPUs", "threads", "seed"):
        table.add_column(name, justify="right")
    for i, c in enumerate(cells):
        row: list[str | Text] = [str(i)]
        if show_variant:
            row.append(Text(str(c.get("variant") or "")))
        row += [Text(str(c["workload"])), Text(str(c["scenario"])), str(c["vcpus"]), str(c["threads"]), str(c["seed"])]
        table.add_row(*row)
    return table


def bench_text(b: Mapping[str, Any]) -> str:
    return (
        f"workload {b['workload']}: {int(b['events']):,} events in {b['wall_s']:.2f} s wall"
        f" = {fmt_rate(b['events_per_s'])} events/s\n"
        f"simulated {fmt_seconds(b['sim_s'])} = {b['sim_per_wall']:.3g}× wall time"
    )


def cell_label(cell: Mapping[str, Any]) -> str:
    label = f"{cell['workload']} {cell['scenario']} {cell['vcpus']} vCPUs seed {cell['seed']}"
    return f"{label} [{cell['variant']}]" if cell.get("variant") else label


def _stderr_bar(*extra: ProgressColumn) -> Progress:
    """A transient progress bar on stderr: what is running, bar, done/total, elapsed, ``extra``."""
    return Progress(
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        *extra,
        console=text.console(stderr=True),
        transient=True,
        redirect_stdout=sys.stdout.isatty(),
        redirect_stderr=False,
    )


@contextmanager
def sweep_progress(total: int, enabled: bool, workers: int) -> Iterator[Callable[[str], None]]:
    """A progress bar with an ETA over ``total`` simulations run by ``workers`` workers;
    yields ``done(label)``, called as each one finishes."""
    if not enabled or total == 0:
        yield lambda _label: None
        return
    bar = _stderr_bar(TextColumn("ETA"), TimeRemainingColumn())
    with bar:
        task = bar.add_task(f"{workers} worker{'s' if workers != 1 else ''}", total=total)

        def done(label: str) -> None:
            bar.update(task, advance=1, description=label)

        yield done


class Steps:
    """A progress bar whose total is learned on the way: ``total(n)``, then ``done(label)``."""

    def __init__(self, bar: Progress | None) -> None:
        self._bar = bar
        self._task = bar.add_task("", total=None) if bar is not None else None

    def total(self, n: int) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, total=n)

    def done(self, label: str) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, advance=1, description=label)


@contextmanager
def step_progress(enabled: bool) -> Iterator[Steps]:
    """Progress on stderr (when ``enabled``) for a command that runs simulations one by one."""
    if not enabled:
        yield Steps(None)
        return
    with _stderr_bar() as bar:
        yield Steps(bar)


def _cell(value: Any) -> str:
    if value is None:
        return DASH
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def query_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> Table:
    """The rows of a SQL query."""
    table = Table(show_edge=False, pad_edge=False)
    for c in columns:
        table.add_column(c, overflow="fold")
    for row in rows:
        table.add_row(*(_cell(v) for v in row))
    return table


def _estimate(metric: str, mean: float | None, ci: float | None) -> str:
    fmt = fmt_pct if metric.startswith("delta_eta") else fmt_number
    if mean is None:
        return DASH
    if ci is None:
        return fmt(mean)
    if metric.startswith("delta_eta"):
        return f"{fmt(mean)} ± {ci * 100:.1f}"
    return f"{fmt(mean)} ± {fmt_number(ci)}"


def summary_table(rows: Sequence[Mapping[str, Any]], metrics: Sequence[str], confidence: float) -> Table:
    """Means ± confidence-interval half-widths per configuration."""
    table = Table(
        title=f"mean ± {confidence:.0%} confidence half-width over repetitions", show_edge=False, pad_edge=False
    )
    configs = any(r.get("config") for r in rows)  # several configurations of one cell: label them
    for c in ("workload", "variant", *(("config",) if configs else ()), "scenario", "vCPUs", "threads", "k", "n"):
        table.add_column(c, justify="right" if c in ("vCPUs", "threads", "k", "n") else "left")
    for m in metrics:
        table.add_column(m, justify="right")
    for r in rows:
        table.add_row(
            r["workload"], r["variant"] or DASH, *((r.get("config") or DASH,) if configs else ()), r["scenario"],
            str(r["vcpus"]), str(r["threads"]), str(r["oc_vms"]),
            str(r["repetitions"]), *(_estimate(m, r[m], r[f"{m}_ci"]) for m in metrics),
        )  # fmt: skip
    return table


def categories_table(rows: Sequence[Mapping[str, Any]]) -> Table:
    """TPDS overhead categories and scalability types."""
    table = Table(show_edge=False, pad_edge=False)
    configs = any(r.get("config") for r in rows)  # several configurations of one cell: label them
    for c in ("workload", "variant", *(("config",) if configs else ()), "vCPUs", "δη_t UC", "guest part", "host part",
              "δη_t OC", "δη_t OC2", "categories", "parallelism", "sync/thread/s", "type"):  # fmt: skip
        table.add_column(c, justify="left" if c in ("workload", "variant", "config", "categories") else "right")
    for r in rows:
        table.add_row(
            r["workload"], r["variant"] or DASH, *((r.get("config") or DASH,) if configs else ()),
            str(r["vcpus"]), fmt_pct(r["dt_uc"]), fmt_pct(r["guest_part"]),
            fmt_pct(r["host_part"]), fmt_pct(r["dt_oc"]), fmt_pct(r["dt_oc2"]), ", ".join(r["categories"]) or DASH,
            fmt_number(r["parallelism"]), fmt_number(r["sync_per_thread_s"]),
            DASH if r["scalability_type"] is None else str(r["scalability_type"]),
        )  # fmt: skip
    return table


def agreement_table(rows: Sequence[Mapping[str, Any]]) -> Table:
    """Simulated vs declared undercommitted TPDS categories, one row per workload."""
    table = Table(show_edge=False, pad_edge=False)
    configs = any(r.get("config") for r in rows)
    for c in ("workload", "variant", *(("config",) if configs else ()), "vCPUs", "simulated", "declared", "agree"):
        table.add_column(c)
    for r in rows:
        table.add_row(
            r["workload"], r["variant"] or DASH, *((r.get("config") or DASH,) if configs else ()),
            ", ".join(str(v) for v in r["vcpus"]), ", ".join(r["simulated"]) or DASH,
            ", ".join(r["declared"]) or DASH, "yes" if r["agree"] else "NO",
        )  # fmt: skip
    return table


# Above this many cells `vcpulab run` prints the matrix overview instead of one row per cell.
MANY_CELLS = 60


def overview_table(results: Sequence[Mapping[str, Any]], metric: str = "delta_eta_t") -> Table:
    """A large sweep at a glance: one row per workload (and variant), one column per
    (scenario, vCPUs), each cell the mean of ``metric`` over the seeds."""
    from statistics import fmean

    cols: dict[tuple[str, int], None] = {}
    cells: dict[tuple[str, str], dict[tuple[str, int], list[float]]] = {}
    for r in results:
        if r["scenario"] == "native":
            continue
        col = (r["scenario"], r["vcpus"])
        cols.setdefault(col)
        row = cells.setdefault((r["workload"], r.get("variant") or ""), {})
        if r.get(metric) is not None:
            row.setdefault(col, []).append(r[metric])
    order = {"UC": 0, "OC": 1, "OC2": 2}
    columns = sorted(cols, key=lambda c: (order.get(c[0], 3), c[1]))
    name = {"delta_eta_t": "δη_t", "delta_eta_r": "δη_r"}.get(metric, metric)
    table = Table(title=f"{name}, mean over seeds, per scenario and vCPU count", title_justify="left")
    table.add_column("workload")
    if any(v for _, v in cells):
        table.add_column("variant")
    for scen, vcpus in columns:
        table.add_column(f"{scen} {vcpus}", justify="right")
    fmt = fmt_pct if metric.startswith("delta_eta") else fmt_number
    for (workload, variant), row in cells.items():
        key = [workload, variant or DASH] if any(v for _, v in cells) else [workload]
        table.add_row(*key, *(fmt(fmean(row[c])) if row.get(c) else DASH for c in columns))
    return table


# --- diagnosis --------------------------------------------------------------------------------


def _ms(ns: float | None) -> str:
    return DASH if ns is None else fmt_seconds(ns / 1e9)


def _signed_pct(value: float | None) -> str:
    return DASH if value is None else f"{value * 100:+.1f} pp"


def diagnosis_header(d: Mapping[str, Any]) -> Text:
    c, r = d["cell"], d["result"]
    variant = f" [{c['variant']}]" if c.get("variant") else ""
    return Text(
        f"{c['workload']} in {c['scenario']}, {c['vcpus']} vCPUs, {c['threads']} threads, seed {c['seed']}{variant}: "
        f"t_native {fmt_seconds(r['t_native_s'])}, t_virt {fmt_seconds(r['t_virt_s'])}, "
        f"δη_t {fmt_pct(r['delta_eta_t'])}, δη_r {fmt_pct(r['delta_eta_r'])}, ω {fmt_ratio(r['omega'])}"
    )


def causes_table(d: Mapping[str, Any], top: int) -> Table:
    t = Table(title="Causes, by the CPU time they add over the native run (per instance)", title_justify="left")
    t.add_column("#", justify="right")
    t.add_column("cause")
    t.add_column("added", justify="right")
    t.add_column("of native cycles", justify="right")
    t.add_column("waiting on descheduled", justify="right")
    t.add_column("evidence")
    for i, c in enumerate([c for c in d["causes"] if c["added_ns"] > 0][:top], 1):
        added, share, waiting = _ms(c["added_ns"]), fmt_pct(c["of_native_cycles"]), _ms(c["preempted_ns"])
        t.add_row(str(i), c["cause"], added, share, waiting, c["evidence"])
    return t


def wait_chains_table(d: Mapping[str, Any]) -> Table:
    w = d["wait_chains"]
    total = w["total_ns"] or 1
    states = ", ".join(f"{s} {v / total:.0%}" for s, v in w["by_state"].items())
    title = (
        f"Wait chains: who made busy-waiting vCPUs wait (all VMs; busy-waiting by culprit state: {states or 'none'})"
    )
    t = Table(title=title, title_justify="left")
    t.add_column("culprit")
    t.add_column("state")
    t.add_column("made others wait", justify="right")
    t.add_column("who waited, on what")
    for c in w["culprits"]:
        victims = "; ".join(f"{v['waiter']} {_ms(v['ns'])} on {v['on']}" for v in c["victims"][:3])
        more = f" (+{len(c['victims']) - 3} more)" if len(c["victims"]) > 3 else ""
        t.add_row(c["culprit"], c["state"], _ms(c["ns"]), victims + more)
    return t


def wake_path_table(d: Mapping[str, Any]) -> Table:
    w = d["wake_path"]
    vm, native = w["latency_ns"], w["latency_native_ns"]
    lat = f"{vm / 1e3:.1f} µs" if vm is not None else DASH
    nat = f"{native / 1e3:.1f} µs" if native is not None else DASH
    title = (
        f"Wake-up path: {w['wakeups']:,} wake-ups; a woken thread waits {lat} on average to run "
        f"({nat} natively, {w['wakeups_native']:,} wake-ups); the VM's steps, per instance"
    )
    t = Table(title=title, title_justify="left")
    t.add_column("step")
    t.add_column("critical path")
    t.add_column("time", justify="right")
    t.add_column("what")
    for s in w["steps"]:
        t.add_row(s["step"], s["side"], _ms(s["ns"]), s["what"])
    return t


def mitigations_table(d: Mapping[str, Any]) -> Table:
    t = Table(title="Mitigations (TPDS §7, DIS), re-run with each switched on, best first", title_justify="left")
    t.add_column("mitigation")
    t.add_column("for")
    t.add_column("δη_t", justify="right")
    t.add_column("change", justify="right")
    t.add_column("δη_r", justify="right")
    t.add_column("change", justify="right")
    t.add_column("VM speedup", justify="right")
    t.add_column("overrides")
    for m in d["mitigations"]:
        t.add_row(
            m["name"],
            m["cause"],
            fmt_pct(m["delta_eta_t"]),
            _signed_pct(m["change_delta_eta_t"]),
            fmt_pct(m["delta_eta_r"]),
            _signed_pct(m["change_delta_eta_r"]),
            f"{m['speedup']:.2f}×",
            " ".join(m["overrides"]),
        )
    return t
