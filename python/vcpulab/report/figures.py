"""The report's figures: matplotlib ``Figure`` objects (no pyplot, no global state) drawn from
plain data, and :func:`to_svg`, which turns one into SVG text to inline in the page.

Each function takes exactly the numbers it draws (the sections compute them and write them as
CSV), so the functions can be tested on synthetic data. matplotlib is imported inside the
functions: importing this module costs nothing.
"""

from __future__ import annotations

import html
import io
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from ..text import printable

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

RC: dict[str, Any] = {
    # Deterministic ids, glyphs drawn as paths: the SVG needs no font on the reader's machine.
    "svg.hashsalt": "vcpulab",
    "svg.fonttype": "path",
    "font.size": 9,
    "axes.titlesize": 9.5,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "axes.spines.top": False,
    "axes.spines.right": False,
    # Labels are data (workload names): a '$' in one is a dollar sign, not TeX.
    "text.parse_math": False,
}

SCENARIO_COLORS = {"native": "#4d4d4d", "UC": "#1f77b4", "OC": "#ff7f0e", "OC2": "#d62728"}
PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#aec7e8",
    "#ffbb78",
    "#98df8a",
    "#ff9896",
    "#c5b0d5",
    "#c49c94",
    "#f7b6d2",
    "#c7c7c7",
    "#dbdb8d",
    "#9edae5",
)
GUEST_COLOR = "#4c78a8"
HOST_COLOR = "#f58518"

MAX_POINTS = 600
"""Most points drawn per line (CDFs, PLE windows); the CSV keeps what the figure shows."""


@contextmanager
def style() -> Iterator[None]:
    """The report's matplotlib settings, for drawing and saving."""
    import matplotlib

    with matplotlib.rc_context(cast(Any, RC)):
        yield


def new_figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def grid(
    n: int, ncols: int, width: float, height: float, legend_rows: int = 0, left: float = 0.62, top: float = 0.28
) -> tuple[Figure, list[Axes]]:
    """A figure of ``n`` panels, ``ncols`` per row, each ``width`` × ``height`` inches
    (margins included), and room below for ``legend_rows`` rows of a shared legend.

    The panels are placed by hand: matplotlib's constrained layout doubles the drawing time
    of figures with dozens of panels, and these all have the same shape."""
    from matplotlib.figure import Figure

    ncols = max(1, min(ncols, n))
    nrows = max(1, math.ceil(n / ncols))
    legend = 0.1 + 0.22 * legend_rows if legend_rows else 0.0
    fig_w, fig_h = width * ncols, height * nrows + legend
    fig = Figure(figsize=(fig_w, fig_h))
    right, bottom = 0.12, 0.45  # inches around each panel's axes (``left`` and ``top`` too)
    axes = []
    for i in range(n):
        row, col = divmod(i, ncols)
        x0 = col * width + left
        y0 = fig_h - (row + 1) * height + bottom
        rect = (x0 / fig_w, y0 / fig_h, (width - left - right) / fig_w, (height - bottom - top) / fig_h)
        axes.append(fig.add_axes(rect))
    return fig, axes


def colors_for(labels: Sequence[str], scenarios: Sequence[str] | None = None) -> dict[str, str]:
    """A colour per series: the scenario's own colour when each series is one scenario,
    else a palette in order."""
    if scenarios is not None and len(set(scenarios)) == len(labels) and all(s in SCENARIO_COLORS for s in scenarios):
        return {label: SCENARIO_COLORS[s] for label, s in zip(labels, scenarios, strict=True)}
    return {label: PALETTE[i % len(PALETTE)] for i, label in enumerate(labels)}


def thin(xs: Sequence[float], ys: Sequence[float], limit: int = MAX_POINTS) -> tuple[list[float], list[float]]:
    """At most ``limit`` points, evenly spaced by index, first and last kept."""
    n = len(xs)
    if n <= limit:
        return list(xs), list(ys)
    idx = sorted({round(i * (n - 1) / (limit - 1)) for i in range(limit)})
    return [xs[i] for i in idx], [ys[i] for i in idx]


_ID = re.compile(r'\bid="([^"]+)"')


def _printable_texts(fig: Figure) -> None:
    """Every text of ``fig`` (titles, legends, tick labels) with control characters escaped,
    as vcpulab prints them (:func:`vcpulab.text.printable`): drawn raw they have no glyph, and
    XML has no place for them."""
    from matplotlib.text import Text
    from matplotlib.ticker import FixedFormatter

    for text in fig.findobj(Text):
        shown = text.get_text()
        if printable(shown) != shown:
            text.set_text(printable(shown))
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            # Tick labels are made again from the formatter when drawn: give it the escaped ones.
            labels = [t.get_text() for t in axis.get_majorticklabels()]
            if any(printable(label) != label for label in labels):
                axis.set_major_formatter(FixedFormatter([printable(label) for label in labels]))


def to_svg(fig: Figure, prefix: str, label: str = "") -> str:
    """The figure as an ``<svg>`` element to inline in HTML: no XML prolog, DOCTYPE or metadata
    (so no URL but the namespace declarations), and every id prefixed with ``prefix`` so that
    several figures in one page never share an id."""
    _printable_texts(fig)
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Creator": None, "Date": None, "Format": None, "Type": None})
    text = buf.getvalue()
    text = text[text.index("<svg") :]
    text = re.sub(r"\s*<metadata>.*?</metadata>", "", text, flags=re.S)
    ids = set(_ID.findall(text))
    text = _ID.sub(lambda m: f'id="{prefix}-{m.group(1)}"', text)
    text = re.sub(
        r'href="#([^"]+)"', lambda m: f'href="#{prefix}-{m.group(1)}"' if m.group(1) in ids else m.group(0), text
    )
    text = re.sub(
        r"url\(#([^)]+)\)", lambda m: f"url(#{prefix}-{m.group(1)})" if m.group(1) in ids else m.group(0), text
    )
    aria = f' aria-label="{html.escape(label)}"' if label else ""
    return text.replace("<svg ", f'<svg class="plot" role="img"{aria} ', 1).strip()


def _handles(colors: Mapping[str, str], kind: str = "patch") -> list[Any]:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    if kind == "patch":
        return [Patch(facecolor=c, edgecolor="#333", linewidth=0.5, label=k) for k, c in colors.items()]
    return [Line2D([], [], color=c, label=k) for k, c in colors.items()]


LEGEND_COLUMNS = 5


def legend_rows(entries: int) -> int:
    return math.ceil(entries / LEGEND_COLUMNS) if entries else 0


def _legend_below(fig: Figure, handles: Sequence[Any], placed: bool = True) -> None:
    """A shared legend under the panels: in the room :func:`grid` left (``placed``) or
    outside a constrained layout."""
    if not handles:
        return
    ncols = min(len(handles), LEGEND_COLUMNS)
    if placed:
        fig.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 0.0), ncols=ncols, frameon=False)
    else:
        fig.legend(handles=handles, loc="outside lower center", ncols=ncols, frameon=False)


# --- (1) box plots of δη_r, δη_t and ω ---------------------------------------------------------


METRIC_LABELS = {"delta_eta_r": "δη_r (%)", "delta_eta_t": "δη_t (%)", "omega": "ω"}


def box_plots(
    values: Mapping[str, Mapping[tuple[int, str], Sequence[float]]],
    vcpus: Sequence[int],
    series: Sequence[str],
    scenarios: Sequence[str] | None = None,
) -> Figure:
    """One panel per metric (``values[metric][(vcpus, series)]``: the points of one box); a
    group of boxes per vCPU count, one box per series. δη values are ratios, drawn in %."""
    fig = new_figure(9.0, 2.4 * len(values) + 0.5)
    axes = list(fig.subplots(len(values), 1, squeeze=False).ravel())
    colors = colors_for(series, scenarios)
    width = 0.8 / max(1, len(series))
    for ax, (metric, groups) in zip(axes, values.items(), strict=True):
        scale = 100.0 if metric.startswith("delta_eta") else 1.0
        for j, s in enumerate(series):
            pos, data = [], []
            for i, n in enumerate(vcpus):
                pts = [v * scale for v in groups.get((n, s), ()) if v is not None and math.isfinite(v)]
                if pts:
                    pos.append(i - 0.4 + width * (j + 0.5))
                    data.append(pts)
            if not data:
                continue
            bp = ax.boxplot(
                data,
                positions=pos,
                widths=width * 0.8,
                patch_artist=True,
                manage_ticks=False,
                showfliers=False,
                medianprops={"color": "#111", "linewidth": 1},
            )
            for patch in bp["boxes"]:
                patch.set_facecolor(colors[s])
                patch.set_alpha(0.6)
            # Every point too: with few workloads a box alone says little.
            for x, pts in zip(pos, data, strict=True):
                jitter = [x + width * 0.25 * (((k * 7919) % 11) / 10 - 0.5) for k in range(len(pts))]
                ax.scatter(jitter, pts, s=7, color=colors[s], edgecolors="#222", linewidths=0.3, zorder=3)
        ax.axhline(0.0 if scale == 100.0 else 1.0, color="#888", linewidth=0.8, linestyle=":")
        ax.set_xticks(range(len(vcpus)), [str(n) for n in vcpus])
        ax.set_xlim(-0.5, len(vcpus) - 0.5)
        ax.set_ylabel(METRIC_LABELS.get(metric, metric))
        ax.grid(True, axis="y", alpha=0.3)
    axes[-1].set_xlabel("vCPUs")
    _legend_below(fig, _handles(colors), placed=False)
    return fig


# --- (2) average and maximum overhead per workload, guest/host split ---------------------------


@dataclass(frozen=True)
class OverheadBar:
    """One workload's bars: δη_t and δη_r averaged over vCPU counts and at their maximum, with
    δη_r's guest and host parts (the parts at the vCPU count where δη_r is largest for ``max``)."""

    label: str
    dt_avg: float | None
    dt_max: float | None
    dr_avg: float | None
    dr_max: float | None
    guest_avg: float | None
    host_avg: float | None
    guest_max: float | None
    host_max: float | None


def overhead_bars(bars: Sequence[OverheadBar]) -> Figure:
    """Horizontal bars per workload: left δη_t (average, maximum), right δη_r as stacked guest
    and host parts (average, maximum) with δη_r itself as a black tick."""
    n = len(bars)
    fig = new_figure(10.0, 1.5 + 0.34 * n)
    ax_t, ax_r = fig.subplots(1, 2, sharey=True)
    ys = list(range(n))
    h = 0.38

    def pct(v: float | None) -> float:
        return 0.0 if v is None else v * 100.0

    for kind, dy, alpha in (("avg", -h / 2, 0.95), ("max", h / 2, 0.45)):
        dt = [pct(getattr(b, f"dt_{kind}")) for b in bars]
        ax_t.barh([y + dy for y in ys], dt, height=h, color="#555", alpha=alpha)
        guest = [pct(getattr(b, f"guest_{kind}")) for b in bars]
        host = [pct(getattr(b, f"host_{kind}")) for b in bars]
        base = [max(g, 0.0) for g in guest]
        ax_r.barh([y + dy for y in ys], guest, height=h, color=GUEST_COLOR, alpha=alpha)
        ax_r.barh([y + dy for y in ys], host, left=base, height=h, color=HOST_COLOR, alpha=alpha)
        total = [
            (y + dy, pct(getattr(b, f"dr_{kind}")))
            for y, b in zip(ys, bars, strict=True)
            if getattr(b, f"dr_{kind}") is not None
        ]
        if total:
            ty, tx = zip(*total, strict=True)
            ax_r.scatter(tx, ty, marker="|", s=60, color="#111", linewidths=1.2, zorder=3)
    ax_t.set_yticks(ys, [b.label for b in bars])
    ax_t.invert_yaxis()
    ax_t.set_xlabel("δη_t (%)")
    ax_r.set_xlabel("δη_r (%) = guest part + host part")
    for ax in (ax_t, ax_r):
        ax.axvline(0, color="#888", linewidth=0.8)
        ax.grid(True, axis="x", alpha=0.3)
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [
        Patch(facecolor="#555", label="δη_t average (upper bar)"),
        Patch(facecolor="#555", alpha=0.45, label="δη_t maximum (lower bar)"),
        Patch(facecolor=GUEST_COLOR, label="guest part"),
        Patch(facecolor=HOST_COLOR, label="host part"),
        Line2D([], [], color="#111", marker="|", linestyle="none", markersize=9, label="δη_r"),
    ]
    _legend_below(fig, handles, placed=False)
    return fig


# --- (3) host time by exit reason ---------------------------------------------------------------


@dataclass(frozen=True)
class StackPanel:
    """Stacked bars: ``stacks[reason][i]`` is the height at ``xs[i]``."""

    title: str
    xs: Sequence[int]
    stacks: Mapping[str, Sequence[float]]


def stacked_bars(panels: Sequence[StackPanel], ylabel: str, xlabel: str = "vCPUs") -> Figure:
    """One panel per scenario (and variant), one bar per vCPU count, stacked by reason; the
    legend is shared (a reason has one colour everywhere)."""
    reasons = list(dict.fromkeys(r for p in panels for r in p.stacks))
    colors = {r: PALETTE[i % len(PALETTE)] for i, r in enumerate(reasons)}
    fig, axes = grid(len(panels), 3, 3.7, 2.8, legend_rows(len(reasons)))
    for ax, p in zip(axes, panels, strict=True):
        bottom = [0.0] * len(p.xs)
        xs = list(range(len(p.xs)))
        for r in reasons:
            heights = list(p.stacks.get(r, [0.0] * len(p.xs)))
            if not any(heights):
                continue
            ax.bar(xs, heights, bottom=bottom, color=colors[r], width=0.7, edgecolor="white", linewidth=0.3)
            bottom = [b + v for b, v in zip(bottom, heights, strict=True)]
        ax.set_xticks(xs, [str(x) for x in p.xs])
        ax.set_title(p.title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, axis="y", alpha=0.3)
    _legend_below(fig, _handles(colors))
    return fig


# --- (4) cycles per vCPU normalised to native ----------------------------------------------------


@dataclass(frozen=True)
class RankPanel:
    """Per series, busy time per vCPU sorted from busiest, normalised; ``native`` the native
    run's cores the same way (the reference)."""

    title: str
    series: Mapping[str, Sequence[float]]
    native: Sequence[float] = ()
    scenarios: Sequence[str] = ()


def rank_bars(panels: Sequence[RankPanel], ylabel: str) -> Figure:
    """Grouped bars per vCPU rank (busiest first), one bar per series, the native cores as a
    black step line."""
    labels = list(dict.fromkeys(s for p in panels for s in p.series))
    scen = [
        next((sc for p in panels for lab, sc in zip(p.series, p.scenarios, strict=False) if lab == s), s)
        for s in labels
    ]
    colors = colors_for(labels, scen)
    fig, axes = grid(len(panels), 3, 3.9, 2.5, legend_rows(len(colors) + 1))
    for ax, p in zip(axes, panels, strict=True):
        width = 0.8 / max(1, len(p.series))
        for j, (label, values) in enumerate(p.series.items()):
            xs = [i - 0.4 + width * (j + 0.5) for i in range(len(values))]
            ax.bar(xs, values, width=width, color=colors[label], alpha=0.85)
        if p.native:
            xs = list(range(len(p.native)))
            ax.step(
                [x - 0.5 for x in xs] + [xs[-1] + 0.5],
                [*p.native, p.native[-1]],
                where="post",
                color="#111",
                linewidth=1.1,
            )
        ax.axhline(1.0, color="#888", linewidth=0.8, linestyle=":")
        n = max([len(v) for v in p.series.values()] + [len(p.native)])
        step = max(1, math.ceil(n / 8))
        ax.set_xticks(range(0, n, step), [str(i + 1) for i in range(0, n, step)])
        ax.set_title(p.title)
        ax.set_xlabel("vCPU rank (busiest first)")
        ax.set_ylabel(ylabel)
        ax.grid(True, axis="y", alpha=0.3)
    from matplotlib.lines import Line2D

    _legend_below(fig, [*_handles(colors), Line2D([], [], color="#111", label="native cores")])
    return fig


# --- (5) latency CDFs, (6) PLE window over time, (7) speedup -------------------------------------


@dataclass(frozen=True)
class Line:
    label: str
    xs: Sequence[float]
    ys: Sequence[float]
    style: str = "-"
    marker: str | None = None
    step: bool = False
    color: str | None = None
    hollow: bool = False
    """Markers drawn as outlines (lines that may overlap stay visible under each other)."""


@dataclass(frozen=True)
class LinePanel:
    title: str
    lines: Sequence[Line]
    xlabel: str = ""
    ylabel: str = ""
    logx: bool = False
    ideal: bool = False
    """Draw y = x (ideal speedup)."""
    extra: Sequence[Line] = field(default_factory=tuple)
    logx_base: int = 10
    """The base of the log x axis (2 for vCPU counts)."""
    xticks: Sequence[float] = ()
    """Ticks on exactly these x values (e.g. the vCPU counts run), labelled plainly."""
    ylim: tuple[float, float] | None = None
    """The y range (default: matplotlib's)."""


def _log_axis(ax: Axes, base: int = 10) -> None:
    """Log x axis with plain numbers (4, 10, 200) on the decades (powers of ``base``) and no
    minor labels."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax.set_xscale("log", base=base)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def line_panels(
    panels: Sequence[LinePanel],
    ncols: int = 2,
    width: float = 5.2,
    height: float = 3.0,
    shared_legend: Sequence[tuple[str, str, str] | tuple[str, str, str, str]] = (),
) -> Figure:
    """Panels of lines (step lines for CDFs and time series). Each panel has its own legend,
    unless ``shared_legend`` is given: (label, colour, line style[, hollow marker]) entries under
    the panels."""
    rows = legend_rows(len(shared_legend))
    fig, axes = grid(len(panels), ncols, width, height, rows)
    for ax, p in zip(axes, panels, strict=True):
        for ln in p.lines:
            xs, ys = thin(ln.xs, ln.ys)
            if not xs:
                continue
            kw: dict[str, Any] = {"label": ln.label, "linestyle": ln.style, "linewidth": 1.3}
            if ln.color is not None:
                kw["color"] = ln.color
            if ln.marker:
                kw["marker"] = ln.marker
                kw["markersize"] = 3.5
                if ln.hollow:
                    kw["markersize"] = 5.0
                    kw["markerfacecolor"] = "none"
            if ln.step:
                ax.step(xs, ys, where="post", **kw)
            else:
                ax.plot(xs, ys, **kw)
        if p.ideal:
            hi = max((max(ln.xs) for ln in p.lines if ln.xs), default=1.0)
            ax.plot([0, hi], [0, hi], color="#999", linewidth=0.8, linestyle=":", label="ideal")
        if p.logx:
            _log_axis(ax, p.logx_base)
        if p.xticks:
            ax.set_xticks(list(p.xticks), [f"{x:g}" for x in p.xticks])
            ax.set_xticks([], minor=True)
        if p.ylim is not None:
            ax.set_ylim(*p.ylim)
        ax.set_title(p.title)
        ax.set_xlabel(p.xlabel)
        ax.set_ylabel(p.ylabel)
        ax.grid(True, which="both", alpha=0.3)
        if not shared_legend:
            ax.legend(frameon=False, fontsize="small")
    if shared_legend:
        from matplotlib.lines import Line2D

        handles = []
        for label, c, ls, *marker in shared_legend:
            mk: dict[str, Any] = {"marker": marker[0], "markersize": 5.0, "markerfacecolor": "none"} if marker else {}
            handles.append(Line2D([], [], color=c, linestyle=cast(Any, ls), label=label, **mk))
        _legend_below(fig, handles)
    return fig


# --- latency ranges (TLB latency from summaries) --------------------------------------------------


@dataclass(frozen=True)
class RangePanel:
    """Rows (workloads) × series (vCPU counts): ``series[label][i]`` is ``(low, mid, high)``
    for row ``i`` or None."""

    title: str
    rows: Sequence[str]
    series: Mapping[str, Sequence[tuple[float, float, float] | None]]
    xlabel: str = ""


def range_dots(panels: Sequence[RangePanel]) -> Figure:
    """Per row a line from low to high with a dot at mid, one colour per series, log x."""
    labels = list(dict.fromkeys(s for p in panels for s in p.series))
    colors = {label: PALETTE[i % len(PALETTE)] for i, label in enumerate(labels)}
    rows = max(len(p.rows) for p in panels)
    longest = max((len(r) for p in panels for r in p.rows), default=4)
    left = 0.25 + 0.062 * longest
    fig, axes = grid(len(panels), 2, 3.6 + left, 0.9 + 0.24 * rows, legend_rows(len(labels)), left=left)
    for ax, p in zip(axes, panels, strict=True):
        k = len(p.series)
        for j, (label, values) in enumerate(p.series.items()):
            dy = (j - (k - 1) / 2) * min(0.8 / max(k, 1), 0.22)
            for i, v in enumerate(values):
                if v is None or min(v) <= 0:
                    continue
                lo, mid, hi = v
                ax.plot([lo, hi], [i + dy, i + dy], color=colors[label], linewidth=1.2)
                ax.plot([mid], [i + dy], marker="o", markersize=3.5, color=colors[label])
        _log_axis(ax)
        ax.set_yticks(range(len(p.rows)), list(p.rows))
        ax.set_ylim(len(p.rows) - 0.5, -0.5)
        ax.set_title(p.title)
        ax.set_xlabel(p.xlabel)
        ax.grid(True, axis="x", which="both", alpha=0.3)
    _legend_below(fig, _handles(colors, "line"))
    return fig


@dataclass(frozen=True)
class TornadoBar:
    """One parameter of a tornado figure: the row's value at its lower and upper bound."""

    label: str
    at_low: float
    at_high: float


def tornado(title: str, bars: Sequence[TornadoBar], center: float | None, target: float | None, xlabel: str) -> Figure:
    """Horizontal bars, largest swing on top, from the row's value at each parameter's lower
    bound (blue) to its value at the upper bound (orange), with the preset's value (solid
    line) and the published target (dashed)."""
    longest = max((len(b.label) for b in bars), default=8)
    left = 0.3 + 0.062 * longest
    fig, (ax,) = grid(1, 1, 4.6 + left, 1.1 + 0.26 * max(len(bars), 1), legend_rows=1, left=left)
    for i, b in enumerate(bars):
        base = center if center is not None else b.at_low
        ax.barh(i, b.at_low - base, left=base, color=GUEST_COLOR, height=0.6)
        ax.barh(i, b.at_high - base, left=base, color=HOST_COLOR, height=0.6)
    if center is not None:
        ax.axvline(center, color="black", linewidth=1.0)
    if target is not None:
        ax.axvline(target, color="black", linewidth=1.0, linestyle="--")
    ax.set_yticks(range(len(bars)), [b.label for b in bars])
    ax.set_ylim(len(bars) - 0.5, -0.5)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.grid(True, axis="x", alpha=0.3)
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [
        Patch(color=GUEST_COLOR, label="at lower bound"),
        Patch(color=HOST_COLOR, label="at upper bound"),
        Line2D([], [], color="black", label="preset's values"),
        Line2D([], [], color="black", linestyle="--", label="published"),
    ]
    _legend_below(fig, handles)
    return fig
