"""The scoreboard: one row per published value (id, what, published, simulated mean and 95 %
CI, n, verdict; and the same of the trace run, "—" without one), the per-id lines of the
experiments that cannot be expressed or have no trace run, and the total lines (profiles, and
trace runs); as a rich table, a JSON document and Markdown."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.table import Table
from rich.text import Text

from ..report.published import where_text
from .run import ExperimentResults
from .suite import Experiment
from .traces import NO_BENCHMARK, PROFILE, TRACE
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

PROFILE_CHECK_METRICS = frozenset({"parallelism", "sync_per_thread_s"})
"""Metrics whose native value a workload profile declares (its ``scalability_type``, DIS-4.1's
two thresholds): judged on a profile run, such a row checks the profile's declaration, not the
model. It is shown apart from the validation rows (on a trace run it is a real measurement and
counts)."""

QUICK_NOTE = "quick run (reduced sizes, [reproduce] quick): the verdicts are not meaningful"


@dataclass(frozen=True)
class Row:
    """One published value of one experiment, judged."""

    experiment: Experiment
    index: int
    entry: Mapping[str, Any]
    judged: Judged
    trace: Judged | None = None
    """The same entry judged on the trace run (:mod:`.traces`); None without one."""
    calibration: bool = False
    """A calibration row of its testbed (``experiments/calibration.toml``): fitted to, counted
    apart, never as reproduced."""

    @property
    def profile_check(self) -> bool:
        """A native row of a metric the workload profile declares (:data:`PROFILE_CHECK_METRICS`)."""
        where = self.entry.get("where") or {}
        return self.entry.get("metric") in PROFILE_CHECK_METRICS and where.get("scenario") == "native"

    @property
    def illustration(self) -> bool:
        """A row of an experiment whose source result is an idealised illustration (its
        ``[reproduce] illustration`` says why the model may depart from the ideal arithmetic)."""
        return bool(self.experiment.reproduce.get("illustration"))

    @property
    def role(self) -> str:
        if self.calibration:
            return "calibration"
        if self.illustration:
            return "illustration"
        return "profile check" if self.profile_check else "validation"

    @property
    def name(self) -> str:
        """``ID:N``, N counted from 1 (how ``sensitivity`` and ``calibrate`` name it)."""
        return f"{self.experiment.id}:{self.index + 1}"

    @property
    def what(self) -> str:
        text = self.entry.get("what")
        if text:
            text = one_line(text)
        else:
            where = where_text(self.entry.get("where") or {})
            text = f"{self.entry['metric']}" + (f" ({where})" if where else "")
        if self.calibration:
            return f"{text} [calibration row {self.name}]"
        return f"{text} [illustration]" if self.illustration else text

    def to_json(self) -> dict[str, Any]:
        e, j = self.entry, self.judged
        return {
            "id": self.experiment.id,
            "index": self.index,
            "row": self.name,
            "role": self.role,
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
            "trace": None if self.trace is None else trace_json(self.trace),
        }


def trace_json(j: Judged) -> dict[str, Any]:
    """A row's trace-run judgement as JSON: the simulated estimate, verdict and note."""
    return {
        **j.simulated.to_json(),
        "verdict": j.verdict,
        "note": j.note,
        "points": [p.to_json() for p in j.points],
        "differences": [s.to_json() for s in j.steps],
    }


@dataclass(frozen=True)
class Scoreboard:
    """Every row and the experiments behind them."""

    rows: tuple[Row, ...]
    experiments: tuple[Experiment, ...]
    quick: bool = False
    no_trace: Mapping[str, str] | None = None
    """Experiment id → why it has no trace run (every runnable experiment run without one);
    None when the trace runs were not asked for (``--no-traces``)."""
    traced: frozenset[str] = frozenset()
    """The ids of the experiments run with traces."""
    partial: Mapping[str, str] = field(default_factory=dict)
    """Experiment id → the benchmarks its trace run left out for want of traces."""

    def validation(self) -> list[Row]:
        """The rows that count: every row but the calibration rows, the illustrations and the
        profile checks."""
        return [r for r in self.rows if r.role == "validation"]

    def role_counts(self, role: str) -> dict[str, int]:
        """The profile runs' verdict counts over the rows of one ``role``."""
        return verdict_counts([r.judged.verdict for r in self.rows if r.role == role])

    def totals(self) -> dict[str, Any]:
        """The profile runs' counts over the validation rows; ``calibration``,
        ``illustrations`` and ``profile_checks``: those rows' own counts; ``trace``: the same counts over the rows of
        the experiments run with traces but the calibration rows (a profile check is a real
        measurement there), how many those are, and the trace runs' total line."""
        traced = [r for r in self.rows if r.trace is not None and not r.calibration]
        return {
            **self.role_counts("validation"),
            "calibration": self.role_counts("calibration"),
            "profile_checks": self.role_counts("profile check"),
            "illustrations": self.role_counts("illustration"),
            "experiments": len(self.experiments),
            "runnable": sum(1 for e in self.experiments if e.runnable),
            "not_expressible": sum(1 for e in self.experiments if not e.runnable),
            "trace": {
                **verdict_counts([r.trace.verdict for r in traced if r.trace is not None]),
                "experiments": len(self.traced),
                "line": self.trace_line(),
            },
        }

    def total_line(self) -> str:
        t = self.totals()
        line = reproduced_text(t)
        extra = []
        if t["no_published_value"]:
            extra.append(f"{t['no_published_value']} shown without a published value")
        if t["not_expressible"]:
            extra.append(f"{t['not_expressible']} of {t['experiments']} experiments not expressible")
        p = t["profile_checks"]
        if p["published_values"]:
            extra.append(
                f"{p['published_values']} rows that check a profile's declared type shown apart "
                f"({p['reproduced']} reproduced)"
            )
        i = t["illustrations"]
        if i["published_values"]:
            extra.append(
                f"{i['published_values']} rows of idealised illustrations shown apart "
                f"({i['reproduced']} match the ideal arithmetic)"
            )
        c = t["calibration"]
        if c["published_values"]:
            extra.append(
                f"{c['published_values']} calibration rows counted apart ({c['reproduced']} within their band, "
                f"never counted as reproduced)"
            )
        if extra:
            line += "; " + "; ".join(extra)
        if self.quick:
            line += f" [{QUICK_NOTE}]"
        return line

    def trace_line(self) -> str:
        """``with traces: N of M published values reproduced (...)`` over the rows of the
        experiments run with traces, and how many experiments were run without."""
        if self.no_trace is None:
            return "with traces: not run (--no-traces)"
        traced = [r.trace.verdict for r in self.rows if r.trace is not None and not r.calibration]
        ran = len(self.traced)
        if not ran:
            line = "with traces: no experiment run with traces"
        else:
            line = f"with traces: {reproduced_text(verdict_counts(traced))}"
            line += f"; {ran} experiment{'s' if ran != 1 else ''} run with traces"
        without = len([eid for eid, why in self.no_trace.items() if why != NO_BENCHMARK])
        if without:
            line += f"{', ' if ran else ' ('}{without} with PARSEC/SPLASH-2x workloads without{'' if ran else ')'}"
        if self.quick and ran:
            line += f" [{QUICK_NOTE}]"
        return line

    def trace_lines(self) -> list[str]:
        """Per experiment without a trace run, why (those naming no PARSEC/SPLASH-2x workload
        left out: a trace run was never in question)."""
        lines = [f"{eid}: no trace run: {why}" for eid, why in (self.no_trace or {}).items() if why != NO_BENCHMARK]
        return lines + [
            f"{eid}: trace run without the benchmarks lacking traces: {why}" for eid, why in self.partial.items()
        ]

    def not_expressible(self) -> list[Experiment]:
        return [e for e in self.experiments if not e.runnable]

    def to_json(self) -> dict[str, Any]:
        return {
            "quick": self.quick,
            "total": self.total_line(),
            "totals": self.totals(),
            "rows": [r.to_json() for r in self.rows],
            "ids": [{**id_json(e), "trace": self.trace_status(e)} for e in self.experiments],
        }

    def trace_status(self, e: Experiment) -> dict[str, Any] | None:
        """``{"run": true}``, or ``{"run": false, "reason": ...}``; None when not asked for or
        the experiment was not run."""
        if self.no_trace is None or not e.runnable:
            return None
        if e.id in self.no_trace:
            return {"run": False, "reason": self.no_trace[e.id]}
        return {"run": True} if e.id in self.traced else None


def verdict_counts(verdicts: Sequence[str]) -> dict[str, int]:
    """How many rows have each verdict, and how many of them have a published value."""
    return {
        "published_values": sum(1 for v in verdicts if v != NO_PUBLISHED),
        "reproduced": verdicts.count(REPRODUCED),
        "partly": verdicts.count(PARTLY),
        "not_reproduced": verdicts.count(NOT_REPRODUCED),
        "not_run": verdicts.count(NOT_RUN),
        "no_published_value": verdicts.count(NO_PUBLISHED),
    }


def reproduced_text(t: Mapping[str, Any]) -> str:
    """``N of M published values reproduced (a partly, b not reproduced[, c not run])``."""
    parts = [f"{t['partly']} partly", f"{t['not_reproduced']} not reproduced"]
    if t["not_run"]:
        parts.append(f"{t['not_run']} not run")
    return f"{t['reproduced']} of {t['published_values']} published values reproduced ({', '.join(parts)})"


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


def build(
    results: Sequence[ExperimentResults],
    experiments: Sequence[Experiment],
    quick: bool,
    no_trace: Mapping[str, str] | None = None,
    calibration: frozenset[str] = frozenset(),
) -> Scoreboard:
    """The scoreboard of a run: every published entry of every run experiment judged, on its
    profile run and, where the experiment had one, on its trace run (``results`` holds both:
    ``prepared.source`` tells them apart). ``no_trace``: why the others had none (None: the
    trace runs were not asked for)."""
    rows: list[Row] = []
    by_id = {(r.prepared.experiment.id, r.prepared.source): r for r in results}
    for e in experiments:
        run = by_id.get((e.id, PROFILE))
        if run is None:
            continue
        traced = by_id.get((e.id, TRACE))
        for i, entry in enumerate(run.prepared.experiment.published):
            trace = None if traced is None else _judge(traced, traced.prepared.experiment.published[i])
            rows.append(Row(e, i, entry, _judge(run, entry), trace, f"{e.id}:{i + 1}" in calibration))
    traced_ids = frozenset(eid for eid, source in by_id if source == TRACE)
    partial = {eid: r.prepared.partial for (eid, source), r in by_id.items() if source == TRACE and r.prepared.partial}
    return Scoreboard(tuple(rows), tuple(experiments), quick, no_trace, traced_ids, partial)


def _judge(run: ExperimentResults, entry: Mapping[str, Any]) -> Judged:
    if run.failed is not None:
        return Judged(NOT_RUN, estimate([]), note=f"simulation failed: {run.failed}")
    return judge(entry, run.results, run.prepared.settings)


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


def trace_cells(r: Row, note: str = "\n{}") -> tuple[str, str, str]:
    """A row's trace value (with its note, formatted by ``note``), n and verdict; "—" without
    a trace run."""
    j = r.trace
    if j is None:
        return DASH, DASH, DASH
    return simulated_text(j) + (note.format(j.note) if j.note else ""), str(j.simulated.n), j.verdict


def rich_table(board: Scoreboard) -> Table:
    title = "reproduction scoreboard" + (f" — {QUICK_NOTE}" if board.quick else "")
    table = Table(title=Text(title), title_justify="left")
    traces = board.no_trace is not None
    columns = [
        ("id", "left"),
        ("measured", "left"),
        ("published", "left"),
        ("profile (mean [95% CI])" if traces else "simulated (mean [95% CI])", "left"),
        ("n", "right"),
        ("verdict", "left"),
    ]
    if traces:
        columns += [("trace (mean [95% CI])", "left"), ("n", "right"), ("trace verdict", "left")]
    for name, justify in columns:
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for r in board.rows:
        j = r.judged
        cells: list[Any] = [
            Text(r.experiment.id),
            Text(r.what + f"\n{quantity_text(r.entry)}"),
            Text(published_text(r.entry)),
            Text(simulated_text(j) + (f"\n{j.note}" if j.note else "")),
            str(j.simulated.n),
            Text(j.verdict, style=VERDICT_STYLES[j.verdict]),
        ]
        if traces:
            value, n, verdict = trace_cells(r)
            cells += [Text(value), n, Text(verdict, style=VERDICT_STYLES.get(verdict, "dim"))]
        table.add_row(*cells)
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
    traces = board.no_trace is not None
    lines = [
        "# Reproduction scoreboard",
        "",
        "Generated by `vcpulab reproduce` (see [reproduce.md](reproduce.md) for how each verdict is computed",
        "and, for the trace columns, which value to believe); do not edit by hand.",
        "",
        f"- Command: `{command}`",
        f"- Date: {date}",
        "",
        f"**{board.total_line()}**",
        "",
        f"**{board.trace_line()}**",
        "",
    ]
    if board.quick:
        lines += [f"> {QUICK_NOTE}.", ""]
    if traces:
        lines += [
            "| id | measured | published | profile (mean [95% CI]) | n | verdict | trace (mean [95% CI]) | n "
            "| trace verdict |",
            "| --- | --- | --- | --- | ---: | --- | --- | ---: | --- |",
        ]
    else:
        lines += [
            "| id | measured | published | simulated (mean [95% CI]) | n | verdict |",
            "| --- | --- | --- | --- | ---: | --- |",
        ]
    for r in board.rows:
        j = r.judged
        simulated = simulated_text(j) + (f" ({j.note})" if j.note else "")
        line = (
            f"| {_md(r.experiment.id)} | {_md(r.what)} ({_md(quantity_text(r.entry))}) | "
            f"{_md(published_text(r.entry))} | {_md(simulated)} | {j.simulated.n} | {_md(j.verdict)} |"
        )
        if traces:
            value, n, verdict = trace_cells(r, note=" ({})")
            line += f" {_md(value)} | {n} | {_md(verdict)} |"
        lines.append(line)
    without = board.trace_lines()
    if without:
        lines += ["", "## Without a trace run, or without some benchmarks' traces", ""]
        lines += [f"- {_md(line)}" for line in without]
    missing = board.not_expressible()
    if missing:
        lines += ["", "## Not expressible", ""]
        lines += [f"- **{_md(e.id)}** ({_md(e.title)}): {_md(e.not_expressible or '')}" for e in missing]
    return "\n".join(lines) + "\n"
