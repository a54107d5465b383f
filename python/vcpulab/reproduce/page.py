"""The HTML scoreboard: one self-contained page in the style of ``vcpulab report`` (inline CSS
and SVG, nothing fetched). The totals come first, then per experiment a section with its
title, platform, source and setup notes, the table of published against simulated values
with verdicts, and a figure with the published and simulated values side by side (the
tolerance band and the 95 % CI as error bars); then the experiments that cannot be expressed,
with their reasons."""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..report import figures
from ..report.page import Section, Table, figure, paragraph, render_page
from .scoreboard import QUICK_NOTE, Row, Scoreboard, simulated_text, trace_cells
from .suite import Experiment
from .verdict import NO_PUBLISHED, NOT_REPRODUCED, NOT_RUN, PARTLY, REPRODUCED, published_text, quantity_text

if TYPE_CHECKING:
    from matplotlib.axes import Axes

VERDICT_COLORS = {
    REPRODUCED: "#2ca02c",
    PARTLY: "#e6a700",
    NOT_REPRODUCED: "#d62728",
    NOT_RUN: "#9467bd",
    NO_PUBLISHED: "#1f77b4",
}
PUBLISHED_COLOR = "#4d4d4d"

_COLUMNS = ("measured", "quantity", "published", "simulated", "n", "verdict", "source")
_TRACE_COLUMNS = ("trace", "trace n", "trace verdict")
TRACE_COLOR = "#8c564b"


def _anchor(text: str) -> str:
    return "x-" + (re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x")


def _rows_table(name: str, rows: Sequence[Row], with_id: bool, traces: bool = False) -> Table:
    columns = (("id",) if with_id else ()) + _COLUMNS
    if traces:  # after the profile's verdict, before the source
        columns = columns[:-1] + _TRACE_COLUMNS + columns[-1:]
    records = []
    for r in rows:
        j = r.judged
        value, n, verdict = trace_cells(r, note=" ({})")
        records.append(
            {
                "trace": value,
                "trace n": n,
                "trace verdict": verdict,
                "id": r.experiment.id,
                "measured": r.what,
                "quantity": quantity_text(r.entry),
                "published": published_text(r.entry),
                "simulated": simulated_text(j) + (f" ({j.note})" if j.note else ""),
                "n": j.simulated.n,
                "verdict": j.verdict,
                "source": " ".join(str(r.entry.get("source") or "").split()),
            }
        )
    return Table.of(name, records, columns, shown=True, formats={"n": "int"})


def _panel(ax: Axes, row: Row) -> None:
    """Published (left, grey: the value with its tolerance band, or the threshold) and
    simulated (right, coloured by verdict: mean with its 95 % CI) side by side; a shape rule
    shows the simulated points with their CIs."""
    j = row.judged
    color = VERDICT_COLORS.get(j.verdict, "#7f7f7f")
    rule = str(row.entry.get("rule") or "none")

    def err(est: Any) -> list[list[float]] | None:
        if est.low is None or est.high is None:
            return None
        return [[est.mean - est.low], [est.high - est.mean]]

    if j.points:
        xs = list(range(len(j.points)))
        for x, p in zip(xs, j.points, strict=True):
            if p.estimate.mean is not None:
                ax.errorbar([x], [p.estimate.mean], yerr=err(p.estimate), fmt="o", color=color, capsize=3)
        ax.set_xticks(xs, [p.label for p in j.points], rotation=30, ha="right", fontsize=7)
        ax.set_xlim(-0.5, len(xs) - 0.5)
    else:
        value = row.entry.get("value")
        if rule == "value" and j.band is not None:
            lo, hi = j.band
            v = float(value or 0.0)
            ax.errorbar([0], [v], yerr=[[v - lo], [hi - v]], fmt="s", color=PUBLISHED_COLOR, capsize=4)
        elif rule == "sign":
            threshold = float(value or 0.0)
            ax.axhline(threshold, color=PUBLISHED_COLOR, linestyle="--", linewidth=1)
            ax.annotate(published_text(row.entry), (0, threshold), textcoords="offset points", xytext=(0, 4),
                        ha="center", fontsize=7, color=PUBLISHED_COLOR)  # fmt: skip
        elif value is not None:
            ax.plot([0], [float(value)], "s", color=PUBLISHED_COLOR)
        est = j.simulated
        if est.mean is not None:
            ax.errorbar([1], [est.mean], yerr=err(est), fmt="o", color=color, capsize=4)
        t = row.trace.simulated if row.trace is not None else None
        if row.trace is not None and t is not None and t.mean is not None:
            ax.errorbar([2], [t.mean], yerr=err(t), fmt="D", color=VERDICT_COLORS.get(row.trace.verdict, TRACE_COLOR),
                        capsize=4)  # fmt: skip
        if row.trace is not None:
            ax.set_xticks([0, 1, 2], ["published", "profile", "trace"])
            ax.set_xlim(-0.6, 2.6)
        else:
            ax.set_xticks([0, 1], ["published", "simulated"])
            ax.set_xlim(-0.6, 1.6)
    ax.set_ylabel(quantity_text(row.entry)[:40], fontsize=7)
    ax.grid(True, axis="y", alpha=0.3)
    what = row.what if len(row.what) <= 48 else row.what[:47] + "…"
    shape = f"\npublished: {published_text(row.entry)}" if j.points else ""
    ax.set_title(f"{what} — {j.verdict}{shape}", fontsize=7.5, loc="left", color=color)


OTHER_PANELS = 6
"""Rows without a published value (withheld, figure-only) drawn per experiment; the rest are in
its table. Every judged row gets its panel. (Each panel costs matplotlib ~60 ms: drawing the
suite's 1,000-odd withheld rows would take over a minute.)"""


def experiment_figure(e: Experiment, rows: Sequence[Row]) -> str:
    """The judged rows of one experiment as panels, and up to :data:`OTHER_PANELS` rows without a
    published value, inline SVG (empty when there is nothing to draw)."""
    drawable = [r for r in rows if r.judged.simulated.mean is not None or r.judged.points]
    judged = [r for r in drawable if r.judged.verdict != NO_PUBLISHED]
    others = [r for r in drawable if r.judged.verdict == NO_PUBLISHED]
    left_out = max(0, len(others) - OTHER_PANELS)
    drawable = judged + others[:OTHER_PANELS]
    if not drawable:
        return ""
    with figures.style():
        # Panels placed by hand (figures.grid): constrained layout triples the drawing time.
        fig, axes = figures.grid(len(drawable), 3, 3.6, 3.1, left=0.8, top=0.45)
        for ax, r in zip(axes, drawable, strict=True):
            _panel(ax, r)
        svg = figures.to_svg(fig, _anchor(e.id), f"{e.id}: published and simulated values")
    caption = (
        "Grey: the published value with its tolerance band (or the threshold); coloured by verdict: the simulated "
        "mean with its 95 % confidence interval over seeds (Student t); a diamond, where the experiment ran with "
        "traces: the trace run's."
    )
    if left_out:
        caption += f" {left_out} more rows without a published value are in the table above."
    return figure(svg, caption)


def _experiment_section(
    e: Experiment, rows: Sequence[Row], index: int, quick: bool = False, trace: str | None = None
) -> Section:
    rep = e.reproduce
    facts = [("status", e.status), ("platform", e.platform or "—"), ("spec", str(e.path))]
    if trace is not None:
        facts.append(("trace run", trace))
    if rep.get("source"):
        facts.append(("source", str(rep["source"])))
    if rep.get("notes"):
        facts.append(("setup notes", " ".join(str(rep["notes"]).split())))
    kv = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in facts)
    table = _rows_table(f"exp_{index:03d}", rows, with_id=False, traces=trace is not None)
    body = f'<dl class="kv">{kv}</dl>'
    body += table.html() if rows else paragraph("No [[published]] entry.", "note")
    # A quick run checks structure: its page has the tables, not the figures (they take most of
    # a quick run's time).
    body += "" if quick else experiment_figure(e, rows)
    return Section(title=f"{e.id} — {' '.join(e.title.split())}", anchor=_anchor(e.id), html=body, tables=(table,))


def _trace_fact(board: Scoreboard, e: Experiment) -> str | None:
    """The "trace run" line of an experiment's facts: run, or why not (None: not asked for)."""
    status = board.trace_status(e)
    if status is None:
        return None
    return "run (the trace columns)" if status["run"] else f"none: {status['reason']}"


def render(board: Scoreboard, command: str, date: str) -> str:
    """The whole page."""
    sections = []
    traces = board.no_trace is not None
    summary = _rows_table("scoreboard", board.rows, with_id=True, traces=traces)
    top = paragraph(board.total_line(), "what") + paragraph(board.trace_line(), "what")
    if board.quick:
        top += paragraph(QUICK_NOTE + "; no figures are drawn.", "note")
    top += paragraph(
        "A verdict needs the 95 % confidence interval over seeds on the right side of the tolerance, not only the "
        "mean: reproduced = the CI inside the band (or on the stated side); not reproduced = the CI outside it (or "
        "the mean on the wrong side); partly = in between; one seed is never reproduced. See docs/reproduce.md.",
        "how",
    )
    sections.append(Section("Totals", "totals", top + summary.html(), (summary,)))
    for i, e in enumerate(board.experiments):
        if e.runnable:
            rows = [r for r in board.rows if r.experiment.id == e.id]
            sections.append(_experiment_section(e, rows, i, board.quick, _trace_fact(board, e)))
    missing = board.not_expressible()
    if missing:
        items = "".join(
            f"<li><strong>{html.escape(e.id)}</strong> ({html.escape(' '.join(e.title.split()))}, {e.status}): "
            f"{html.escape(e.not_expressible or '')}</li>"
            for e in missing
        )
        sections.append(Section("Not expressible", "not-expressible", f"<ul>{items}</ul>"))
    subtitle = f"{command} — {date}"
    return render_page("vcpulab reproduction scoreboard", subtitle, sections, csv_dir=None)
