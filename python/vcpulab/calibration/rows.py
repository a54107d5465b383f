"""Published rows as functions of a testbed's parameters: which row (``ID:N``), its target (the
value at which its verdict flips), and its simulated value for given parameter values, run
through the suite's machinery (:mod:`vcpulab.reproduce.run`) into one results store, so that
every evaluation is stored under content keys and a repeated one is read back, not re-run.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._vcpulab import SpecError, platform_estimates
from ..reproduce import Experiment, Suite, SuiteError
from ..reproduce.run import ExperimentResults, Prepared, prepare, run_suite
from ..reproduce.verdict import Judged, judge
from ..spec import toml_value
from ..store import ResultsStore
from ..sweep import Executor

DISCRETE = frozenset({"hz"})
"""Estimates that take a few discrete values (``CONFIG_HZ``: 100, 250, 300, 1000), never varied
continuously."""

CELL_FIELDS = {"workload": "workloads", "scenario": "scenarios", "vcpus": "vcpus"}
"""Cell fields of a row's selectors → the experiment's lists they narrow."""


class CalibrationError(ValueError):
    """Bad input to ``sensitivity`` or ``calibrate``: a one-line message naming what is wrong."""


@dataclass(frozen=True)
class Row:
    """One ``[[published]]`` entry of an experiment: ``ID:N``, N counted from 1."""

    experiment: Experiment
    index: int
    entry: Mapping[str, Any]

    @property
    def name(self) -> str:
        return f"{self.experiment.id}:{self.index + 1}"

    @property
    def rule(self) -> str:
        return str(self.entry.get("rule") or "none")

    @property
    def what(self) -> str:
        return str(self.entry.get("what") or self.entry.get("metric") or "")

    @property
    def preset(self) -> str:
        return self.experiment.platform

    def target(self) -> float | None:
        """The value of the row's simulated number (:attr:`Judged.simulated`) at which its
        verdict flips: the published value, a sign rule's threshold, 0 for a shape rule's
        weakest difference; None for a row shown without a published value."""
        if self.rule == "value":
            return float(self.entry["value"])
        if self.rule == "sign":
            return float(self.entry.get("value") or 0.0)
        if self.rule in ("order", "trend", "peak"):
            return 0.0
        return None


def find_row(suite: Suite, text: str) -> Row:
    """The row ``ID:N`` of ``suite``; ``ID`` alone when the experiment has exactly one judged
    row. A bad name is a :class:`CalibrationError` listing the choices."""
    name, _, number = text.partition(":")
    try:
        (experiment,) = suite.select([name])
    except SuiteError as e:
        raise CalibrationError(str(e)) from None
    if not experiment.runnable:
        raise CalibrationError(
            f"{experiment.id}: not expressible ({experiment.not_expressible}): it has no rows to vary"
        )
    entries = experiment.published
    judged = [i for i, e in enumerate(entries) if str(e.get("rule") or "none") != "none"]
    if not number:
        if len(judged) != 1:
            listing = "; ".join(f"{experiment.id}:{i + 1} {entries[i].get('what', '')}" for i in judged) or "none"
            raise CalibrationError(f"{text}: name one row as {experiment.id}:N ({len(judged)} judged rows: {listing})")
        return Row(experiment, judged[0], entries[judged[0]])
    if not number.isdigit() or not 1 <= int(number) <= len(entries):
        raise CalibrationError(
            f"{text}: expected {experiment.id}:N with N from 1 to {len(entries)} (its [[published]] rows)"
        )
    i = int(number) - 1
    return Row(experiment, i, entries[i])


def narrowing_overrides(entry: Mapping[str, Any], vary: Mapping[str, Any] | None = None) -> list[str]:
    """``--set`` overrides that keep only the workloads, scenarios and vCPU counts the row can
    select (its ``where``, merged with each ``order`` point and with ``relative_to``), and of
    the spec's ``experiment.vary`` lists only the values it selects, so that varying a parameter
    re-runs only the cells the row reads. A field some selector leaves open is not narrowed."""
    where = dict(entry.get("where") or {})
    points = [{**where, **dict(point)} for point in entry.get("order") or ()]
    selectors = points or [where]
    if entry.get("relative_to"):
        selectors += [{**s, **dict(entry["relative_to"])} for s in list(selectors)]
    out = []
    for field in CELL_FIELDS:
        values: list[Any] = []
        for s in selectors:
            if field not in s:
                break
            v = s[field]
            for x in v if isinstance(v, list) else [v]:
                if x not in values:
                    values.append(x)
        else:
            out.append(f"experiment.{CELL_FIELDS[field]}={toml_value(values)}")
    if vary:
        narrowed = dict(vary)
        for key, options in vary.items():
            if not isinstance(options, list) or not all(key in s for s in selectors):
                continue
            chosen = [
                v for v in options if any(v == s[key] or (isinstance(s[key], list) and v in s[key]) for s in selectors)
            ]
            if chosen and chosen != options:
                narrowed[key] = chosen
        if narrowed != dict(vary):
            out.append(f"experiment.vary={toml_value(narrowed)}")
    return out


@dataclass(frozen=True)
class Estimate:
    """One preset value marked "estimate" and its declared bounds (``# bounds:``)."""

    key: str
    value: float
    low: float
    high: float
    integer: bool
    reason: str

    def override(self, value: float) -> str:
        v: Any = int(round(value)) if self.integer else float(value)
        return f"{self.key}={toml_value(v)}"

    def clip(self, value: float) -> float:
        return min(self.high, max(self.low, value))


def preset_estimates(preset: str, keys: Sequence[str] = ()) -> list[Estimate]:
    """The numeric estimates of ``preset`` with their bounds (values declared ``fixed`` are
    choices, never fitted); with ``keys``, those only, in that order (an unknown or fixed key
    is a :class:`CalibrationError`)."""
    try:
        raw = json.loads(platform_estimates(preset))
    except SpecError as e:
        raise CalibrationError(str(e)) from None
    numeric = {}
    fixed = set()
    for r in raw:
        if r.get("fixed") or r.get("min") is None or r["min"] == r["max"] or r["key"].rsplit(".", 1)[-1] in DISCRETE:
            fixed.add(r["key"])
            continue
        value = r["value"]
        numeric[r["key"]] = Estimate(
            r["key"],
            float(value),
            float(r["min"]),
            float(r["max"]),
            isinstance(value, int) and not isinstance(value, bool),
            str(r.get("reason") or ""),
        )
    if not keys:
        return list(numeric.values())
    out = []
    for k in keys:
        if k in numeric:
            out.append(numeric[k])
        elif k in fixed:
            raise CalibrationError(f"--param {k}: a choice in preset {preset} (bounds: fixed), not a quantity to vary")
        else:
            close = [n for n in numeric if k.rsplit(".", 1)[-1] in n]
            hint = f" (did you mean {', '.join(close[:3])}?)" if close else ""
            raise CalibrationError(f"--param {k}: not an estimate of preset {preset}{hint}")
    return out


@dataclass
class Evaluator:
    """Runs rows' experiments with parameter values and judges them. Each evaluation is a set
    of ``--set`` overrides on top of the experiments' own (and ``base``: a calibrated preset's
    values); every cell goes into ``store``, so evaluating the same values again reads them."""

    store: ResultsStore
    executor: Callable[[], Executor]
    quick: bool = False
    seeds: Sequence[int] = ()
    base: Sequence[str] = ()
    progress: bool = False
    runs: int = 0
    """Simulations run so far (cells not found in the store)."""

    def _extra(self, row: Row, overrides: Sequence[str]) -> list[str]:
        seeds = [f"experiment.seeds={toml_value(list(self.seeds))}"] if self.seeds else []
        vary = (tomllib.loads(row.experiment.text).get("experiment") or {}).get("vary")
        return [*narrowing_overrides(row.entry, vary), *seeds, *self.base, *overrides]

    def judge_many(self, jobs: Sequence[tuple[Row, Sequence[str]]]) -> list[Judged | None]:
        """Each (row, overrides) judged, all their cells run in one pool; None where a
        simulation failed (a run limit, a deadlock)."""
        prepared: list[Prepared] = []
        index: dict[tuple[str, str], int] = {}
        slots: list[int] = []
        for row, overrides in jobs:
            try:
                p = prepare(row.experiment, self.quick, self._extra(row, overrides))
            except SuiteError as e:
                raise CalibrationError(str(e)) from None
            key = (row.experiment.id, p.payload.spec_hash)
            if key not in index:
                index[key] = len(prepared)
                prepared.append(p)
            slots.append(index[key])
        done = run_suite(prepared, self.store, self.executor(), progress=self.progress, reopen=self.executor)
        self.runs += done.ran
        return [_judged(done.experiments[s], row) for s, (row, _) in zip(slots, jobs, strict=True)]


def _judged(run: ExperimentResults, row: Row) -> Judged | None:
    if run.failed is not None:
        return None
    return judge(row.entry, run.results, run.prepared.settings)


def simulated(j: Judged | None) -> float | None:
    """The row's simulated number (its mean over seeds), None when it has none."""
    if j is None or j.simulated.mean is None or not math.isfinite(j.simulated.mean):
        return None
    return j.simulated.mean
