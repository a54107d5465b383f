"""The scoreboard: one row per published value (id, what, published, simulated mean and 95 %
CI, n, verdict), the per-id lines of the experiments that cannot be expressed, and the total
line; as a rich table, a JSON document and Markdown."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.table import Table
from rich.text import Text

from ..report.published import where_text
from .run import ExperimentResults
from .suite import Experiment
from .verdict import (
    DASH,
    NO_PUBLISHED,
    NOT_EXPRESSIBLE,
    NOT_REPRODUCED,
    NOT_RUN,
    PARTLY,
    REPRODUCED,
    Estimate,
    Judged,
    estimate,
    judge,
    one_line,
    published_text,
    quantity_text,
)

VERDICT_STYLES = {
    REPRODUCED: "bold green",
    PARTLY: "yellow",
    NOT_REPRODUCED: "bold red",
    NOT_RUN: "magenta",
    NO_PUBLISHED: "dim",
    NOT_EXPRESSIBLE: "dim",
}

QUICK_NOTE = "quick run (reduced sizes, [reproduce] quick): the verdicts are not meaningful"


@dataclass(frozen=True)
class Row:
    """One published value of one experiment, judged."""

    experiment: Experiment
    index: int
    entry: Mapping[str, Any]
    judged: Judged

    @property
    def what(self) -> str:
        text = self.entry.get("what")
        if text:
            return one_line(text)
        where = where_text(self.entry.get("where") or {})
        return f"{self.entry['metric']}" + (f" ({where})" if where else "")

    def to_json(self) -> dict[str, Any]:
        e, j = self.entry, self.judged
        return {
            "id": self.experiment.id,
            "index": self.index,
            "what": self.what,
            "metric": e["metric"],
            "quantity": quantity_text(e),
            "where": dict(e.get("where") or {}),
            "rule": e.get("rule") or "none",
            "published": published_text(e),
            "value": e.get("value"),
            "band": list(j.band) if j.band is not None else None,
            **j.simulated.to_json(),
            "verdict": j.verdict,
            "note": j.note,
            "source": one_line(e.get("source")),
            "points": [p.to_json() for p in j.points],
            "differences": [s.to_json() for s in j.steps],
        }


@dataclass(frozen=True)
class Scoreboard:
    """Every row and the experiments behind them."""

    rows: tuple[Row, ...]
    experiments: tuple[Experiment, ...]
    quick: bool = False

    def totals(self) -> dict[str, int]:
        verdicts = [r.judged.verdict for r in self.rows]
        return {
            "published_values": sum(1 for v in verdicts if v != NO_PUBLISHED),
            "reproduced": verdicts.count(REPRODUCED),
            "partly": verdicts.count(PARTLY),
            "not_reproduced": verdicts.count(NOT_REPRODUCED),
            "not_run": verdicts.count(NOT_RUN),
            "no_published_value": verdicts.count(NO_PUBLISHED),
            "experiments": len(self.experiments),
            "runnable": sum(1 for e in self.experiments if e.runnable),
            "not_expressible": sum(1 for e in self.experiments if not e.runnable),
        }

    def total_line(self) -> str:
        t = self.totals()
        parts = [f"{t['partly']} partly", f"{t['not_reproduced']} not reproduced"]
        if t["not_run"]:
            parts.append(f"{t['not_run']} not run")
        line = f"{t['reproduced']} of {t['published_values']} published values reproduced ({', '.join(parts)})"
        extra = []
        if t["no_published_value"]:
            extra.append(f"{t['no_published_value']} shown without a published value")
        if t["not_expressible"]:
            extra.append(f"{t['not_expressible']} of {t['experiments']} experiments not expressible")
        if extra:
            line += "; " + "; ".join(extra)
        if self.quick:
            line += f" [{QUICK_NOTE}]"
        return line

    def not_expressible(self) -> list[Experiment]:
        return [e for e in self.experiments if not e.runnable]

    def to_json(self) -> dict[str, Any]:
        return {
            "quick": self.quick,
            "total": self.total_line(),
            "totals": self.totals(),
            "rows": [r.to_json() for r in self.rows],
            "ids": [id_json(e) for e in self.experiments],
        }


def id_json(e: Experiment) -> dict[str, Any]:
    """An experiment as ``--list --json`` and the scoreboard's ``ids`` show it."""
    return {
        "id": e.id,
        "title": one_line(e.title),
        "status": e.status,
        "kind": "runnable" if e.runnable else "not expressible",
        "not_expressible": e.not_expressible,
        "platform": e.platform or None,
        "published": len(e.published),
        "path": str(e.path),
    }


def build(results: Sequence[ExperimentResults], experiments: Sequence[Experiment], quick: bool) -> Scoreboard:
    """The scoreboard of a run: every published entry of every run experiment judged."""
    rows: list[Row] = []
    by_id = {r.prepared.experiment.id: r for r in results}
    for e in experiments:
        run = by_id.get(e.id)
        if run is None:
            continue
        for i, entry in enumerate(run.prepared.experiment.published):
            if run.failed is not None:
                judged = Judged(NOT_RUN, estimate([]), note=f"simulation failed: {run.failed}")
            else:
                judged = judge(entry, run.results, run.prepared.settings)
            rows.append(Row(e, i, entry, judged))
    return Scoreboard(tuple(rows), tuple(experiments), quick)


# --- text -----------------------------------------------------------------------------------


def num(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return DASH
    return f"{x:.4g}"


def simulated_text(j: Judged) -> str:
    """Mean and 95 % CI of the row's quantity; for a shape rule the points' means and the
    weakest difference."""
    est = j.simulated
    head = ""
    if j.points:
        head = "points " + ", ".join(num(p.estimate.mean) for p in j.points)
        if not j.steps:
            return head
        head += "; min Δ "
    return head + estimate_text(est)


def estimate_text(est: Estimate) -> str:
    if est.mean is None:
        return DASH
    if est.low is None or est.high is None:
        return f"{num(est.mean)} (1 seed, no CI)"
    return f"{num(est.mean)} [{num(est.low)}, {num(est.high)}]"


def rich_table(board: Scoreboard) -> Table:
    title = "reproduction scoreboard" + (f" — {QUICK_NOTE}" if board.quick else "")
    table = Table(title=Text(title), title_justify="left")
    for name, justify in (
        ("id", "left"),
        ("measured", "left"),
        ("published", "left"),
        ("simulated (mean [95% CI])", "left"),
        ("n", "right"),
        ("verdict", "left"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for r in board.rows:
        j = r.judged
        table.add_row(
            Text(r.experiment.id),
            Text(r.what + f"\n{quantity_text(r.entry)}"),
            Text(published_text(r.entry)),
            Text(simulated_text(j) + (f"\n{j.note}" if j.note else "")),
            str(j.simulated.n),
            Text(j.verdict, style=VERDICT_STYLES[j.verdict]),
        )
    return table


def not_expressible_lines(board: Scoreboard) -> list[str]:
    return [f"{e.id}: not expressible: {e.not_expressible}" for e in board.not_expressible()]


def list_table(experiments: Sequence[Experiment]) -> Table:
    """``vcpulab reproduce --list``."""
    table = Table(title=f"{len(experiments)} experiments", title_justify="left")
    for name in ("id", "title", "status", "kind", "platform", "published"):
        table.add_column(name, justify="right" if name == "published" else "left")
    for e in experiments:
        kind = Text("runnable spec") if e.runnable else Text(e.kind_text(), style="dim")
        table.add_row(
            Text(e.id), Text(one_line(e.title)), e.status, kind, Text(e.platform or DASH), str(len(e.published))
        )
    return table


# --- Markdown -------------------------------------------------------------------------------


def _md(text: str) -> str:
    return one_line(text).replace("|", "\\|")


def markdown(board: Scoreboard, command: str, date: str) -> str:
    """The full scoreboard as Markdown (docs/scoreboard.md), with the command that made it."""
    lines = [
        "# Reproduction scoreboard",
        "",
        "Generated by `vcpulab reproduce` (see [reproduce.md](reproduce.md) for how each verdict is computed);",
        "do not edit by hand.",
        "",
        f"- Command: `{command}`",
        f"- Date: {date}",
        "",
        f"**{board.total_line()}**",
        "",
    ]
    if board.quick:
        lines += [f"> {QUICK_NOTE}.", ""]
    lines += [
        "| id | measured | published | simulated (mean [95% CI]) | n | verdict |",
        "| --- | --- | --- | --- | ---: | --- |",
    ]
    for r in board.rows:
        j = r.judged
        simulated = simulated_text(j) + (f" ({j.note})" if j.note else "")
        lines.append(
            f"| {_md(r.experiment.id)} | {_md(r.what)} ({_md(quantity_text(r.entry))}) | "
            f"{_md(published_text(r.entry))} | {_md(simulated)} | {j.simulated.n} | {_md(j.verdict)} |"
        )
    missing = board.not_expressible()
    if missing:
        lines += ["", "## Not expressible", ""]
        lines += [f"- **{_md(e.id)}** ({_md(e.title)}): {_md(e.not_expressible or '')}" for e in missing]
    return "\n".join(lines) + "\n"
