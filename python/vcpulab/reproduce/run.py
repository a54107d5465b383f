"""Running the suite's runnable specs through the normal results machinery: each spec is a
sweep (:func:`vcpulab.sweep.plan_sweep` / :func:`~vcpulab.sweep.run_sweep`) into ONE results
store shared by the whole suite, on one pool of workers.

Cells are stored under content keys, so a cell that two experiments share (the same
simulation: workload, settings, seed) is simulated once, and running the suite again resumes
where it stopped: only the cells not stored yet run.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from .. import render
from .._vcpulab import Plan, SpecError
from ..store import COMPACT_ABOVE, ResultsStore, StoreWriter
from ..sweep import (
    CellFailed,
    Executor,
    SpecPayload,
    SweepPlan,
    plan_stored,
    run_sweep,
    stored_rows,
    sweep_units,
)
from .suite import Experiment, SuiteError


@dataclass(frozen=True)
class Prepared:
    """A runnable experiment's plan (with the quick overrides for ``--quick``) and what
    rebuilds it in a worker."""

    experiment: Experiment
    plan: Plan
    payload: SpecPayload
    settings: Mapping[str, Any]
    """The materialised spec (for selector keys that no variant sets)."""
    source: str = "profile"
    """``"profile"``: the spec as written; ``"trace"``: its PARSEC/SPLASH-2x workloads replaced
    by their traced programs (:mod:`.traces`)."""
    partial: str = ""
    """For a trace run: the benchmarks it leaves out for want of traces (empty: none)."""
    extra: tuple[str, ...] = ()
    """The ``--set`` overrides beyond the quick ones (a calibrated preset's values)."""

    @property
    def label(self) -> str:
        """The experiment's id, with `` (traces)`` for a trace run (progress and failures)."""
        return self.experiment.id if self.source == "profile" else f"{self.experiment.id} (traces)"

    @property
    def cells(self) -> list[Mapping[str, Any]]:
        return list(self.plan.cells())


def prepare(experiment: Experiment, quick: bool, extra: Sequence[str] = ()) -> Prepared:
    """The plan of a runnable experiment; with ``quick`` its ``[reproduce] quick`` overrides
    applied, then the ``extra`` ``--set`` overrides (a calibrated preset's values, a parameter
    that ``sensitivity`` varies); a bad one is a :class:`SuiteError` naming the file."""
    overrides = [*(experiment.quick_overrides() if quick else []), *extra]
    source = str(experiment.path)
    try:
        plan = Plan(experiment.text, source, overrides)
    except SpecError as e:
        message = str(e)
        if (quick or extra) and not message.startswith(source):
            where = "reproduce.quick" if not extra else "overrides" if not quick else "reproduce.quick or overrides"
            message = f"{source}: {where}: {message}"
        raise SuiteError(message) from None
    spec_text = plan.spec_toml()
    spec_hash = hashlib.sha256(spec_text.encode()).hexdigest()[:16]
    payload = SpecPayload(experiment.text, source, tuple(overrides), spec_hash)
    return Prepared(experiment, plan, payload, tomllib.loads(spec_text), extra=tuple(extra))


@dataclass
class ExperimentResults:
    """What a run gave for one experiment: a result object (without ``run``) per cell, in plan
    order, and how many cells ran now or came from the store."""

    prepared: Prepared
    results: list[dict[str, Any]] = field(default_factory=list)
    ran: int = 0
    stored: int = 0
    failed: str | None = None
    """Why a simulation of the experiment failed (a run limit, a deadlock): its entries are
    then not judged, and the suite went on with the next experiment."""


@dataclass
class SuiteRun:
    """What :func:`run_suite` did."""

    experiments: list[ExperimentResults]

    @property
    def ran(self) -> int:
        return sum(e.ran for e in self.experiments)

    @property
    def stored(self) -> int:
        return sum(e.stored for e in self.experiments)


def _result(row: Mapping[str, Any]) -> dict[str, Any]:
    """The result object of a stored row, without the bulky ``run`` record (not needed for
    verdicts)."""
    result: dict[str, Any] = json.loads(row["result_json"])
    return result


class _Progress:
    """One progress bar over the whole suite; the total is what the store lacked when the run
    started, and steps another experiment computed meanwhile are counted as they are skipped."""

    def __init__(self, done: Any) -> None:
        self.done = done

    def skip(self, n: int, label: str) -> None:
        for _ in range(max(0, n)):
            self.done(label)


@contextmanager
def _suite_progress(total: int, enabled: bool, workers: int) -> Iterator[_Progress]:
    with render.sweep_progress(total, enabled, workers) as done:
        yield _Progress(done)


def run_suite(
    prepared: Sequence[Prepared],
    store: ResultsStore,
    executor: Executor,
    *,
    progress: bool = False,
    reopen: Callable[[], Executor] | None = None,
) -> SuiteRun:
    """Runs every cell of ``prepared`` not in ``store`` yet, experiment after experiment, on
    ``executor`` (kept open between them, closed at the end). A failed simulation (a run limit,
    a deadlock) fails its experiment only: it is recorded in ``failed`` and, when ``reopen``
    gives a new executor for the rest (the failed sweep stopped the old one's workers), the
    suite goes on; without ``reopen`` it raises :class:`~vcpulab.sweep.CellFailed` naming the
    experiment. KeyboardInterrupt goes through. Every finished cell is stored either way."""
    out: list[ExperimentResults] = []
    with store.writer() as writer:
        planned = _plan_all(prepared, store)
        total = sum(sweep_units(s) for s in planned)
        with _suite_progress(total, progress, executor.workers) as bar:
            for p, first in zip(prepared, planned, strict=True):
                try:
                    out.append(_run_one(p, first, store, writer, executor, bar))
                except CellFailed as e:
                    if reopen is None:
                        raise
                    out.append(ExperimentResults(p, failed=str(e).removeprefix(f"{p.label}: ")))
                    executor.close(cancel=True)
                    executor = reopen()
        if any(e.ran for e in out):
            with store.reading():
                writer.compact(above=COMPACT_ABOVE)
    executor.close(cancel=False)
    return SuiteRun(out)


def _plan_all(prepared: Sequence[Prepared], store: ResultsStore) -> list[SweepPlan]:
    """Every experiment's sweep against the store as it is now (one read of the store)."""
    from ..sweep import plan_sweep

    with store.reading():
        keys, known = store.keys(), store.baselines()
    return [plan_sweep(p.plan, range(len(p.cells)), keys, known) for p in prepared]


def _run_one(
    p: Prepared, first: SweepPlan, store: ResultsStore, writer: StoreWriter, executor: Executor, bar: _Progress
) -> ExperimentResults:
    cells = p.cells
    eid = p.label
    writer.flush()  # what the experiments before this one computed is now in the store
    sweep = plan_stored(p.plan, range(len(cells)), store) if first.tasks else first
    bar.skip(sweep_units(first) - sweep_units(sweep), f"{eid}: already computed")
    writer.save_spec(p.payload.spec_hash, p.plan.spec_toml())
    rows = stored_rows(store, sweep)

    def on_result(i: int, row: dict[str, Any]) -> None:
        rows[i] = row
        bar.done(f"{eid}: {render.cell_label(cells[i])}")

    try:
        report = run_sweep(
            p.plan,
            p.payload,
            sweep,
            executor,
            writer,
            on_result=on_result,
            on_baseline=lambda t: bar.done(f"{eid}: baseline of {render.cell_label(cells[t.cells[0]])}"),
            keep_open=True,
        )
    except CellFailed as e:
        raise CellFailed(f"{eid}: {e}", e.stored) from e.__cause__
    results = [_result(rows[i]) for i in range(len(cells))]
    return ExperimentResults(p, results, ran=report.ran, stored=len(sweep.stored))
