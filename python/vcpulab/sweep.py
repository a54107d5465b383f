"""Running an experiment's cells as a sweep: on all local cores, on a Dask cluster, or inline;
skipping what the results store already holds, storing each result as soon as it exists.

Work is split into **tasks**, each one simulation:

- a *cell task* runs a cell's own simulation and pairs it with its baseline and 1-VM
  reference, which it receives as summaries (it never re-simulates them);
- a *baseline task* runs a simulation that is a dependency but no selected cell's own run
  (OC2's k native instances; the native or 1-VM run when that scenario is not selected).

A cell task becomes ready once the summaries of its dependencies are known (from the store, or
from a finished task), so every baseline runs once and is shared by all the cells paired with
it, whichever process or machine runs them. Each simulation is a pure function of its
configuration, so the results do not depend on the executor, the number of workers or the
order of completion.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import queue
import re
import signal
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from ._vcpulab import Plan, VcpulabError
from ._vcpulab import build_id as _version
from .store import ResultsStore, StoreWriter, journal_line, run_row
from .text import printable

# --- the work -------------------------------------------------------------------------------


@dataclass(frozen=True)
class SpecPayload:
    """What a worker needs to rebuild the plan (spec text, its source name, overrides) and to
    label the rows it produces (the materialised spec's hash)."""

    text: str
    source: str
    overrides: tuple[str, ...]
    spec_hash: str = ""

    @property
    def digest(self) -> str:
        h = hashlib.sha256()
        for part in (self.text, self.source, *self.overrides):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()


@dataclass(frozen=True)
class Task:
    """One simulation: the own run of ``cells`` (``kind == "cell"``: cells that share their
    own run, such as OC and OC2 with the same k) or a baseline of cell ``cells[0]``."""

    kind: str
    cells: tuple[int, ...]
    key: str
    layout: str = ""
    count: int = 0
    deps: tuple[str, ...] = ()
    # (cell key, config key) of each of `cells`: the stored row's identity.
    row_keys: tuple[tuple[str, str], ...] = ()


@dataclass
class Outcome:
    """What a task returns: each cell's stored row (cell tasks) and every summary it
    simulated. Rows are built here, in the worker, so the process that stores them only
    writes."""

    task: Task
    rows: list[tuple[int, dict[str, Any]]]
    summaries: list[tuple[str, str]]
    # Each row as its journal line (encoded here too, off the storing process).
    lines: list[str] = field(default_factory=list)


class _Plans(threading.local):
    """The plan a worker thread last built, by payload digest. Per thread: a Dask worker runs
    several tasks at once on its threads, and a plan runs one simulation at a time. A plan
    kept from an earlier sweep (Dask workers outlive sweeps) still knows the summaries it
    simulated then, so :func:`_execute` never relies on it to report them afresh."""

    def __init__(self) -> None:
        self.plans: dict[str, Plan] = {}


_PLANS = _Plans()


def _plan_for(payload: SpecPayload) -> Plan:
    plans = _PLANS.plans
    plan = plans.get(payload.digest)
    if plan is None:
        plans.clear()  # one experiment per worker thread at a time
        plan = Plan(payload.text, payload.source, list(payload.overrides))
        plans[payload.digest] = plan
    return plan


class TaskFailed(Exception):
    """A simulation failed in a worker (a plain, picklable carrier of the simulator's message)."""


def execute(payload: SpecPayload, task: Task, provided: dict[str, str]) -> Outcome:
    """Runs one task (in whatever process the executor chose)."""
    try:
        return _execute(payload, task, provided)
    except VcpulabError as e:
        # The native module's exceptions do not survive pickling between processes.
        raise TaskFailed(str(e)) from None


def _execute(payload: SpecPayload, task: Task, provided: dict[str, str]) -> Outcome:
    plan = _plan_for(payload)
    for key, summary in provided.items():
        plan.provide_summary(key, summary)
    rows = []
    if task.kind == "cell":
        version = _version()
        for i, (key, config_key) in zip(task.cells, task.row_keys, strict=True):
            result = json.loads(plan.run_cell(i))
            rows.append(
                (i, run_row(result, key=key, config_key=config_key, spec_hash=payload.spec_hash, version=version))
            )
    # The summary of the task's own simulation, whether this plan simulated it just now or
    # knew it already (a worker's plan outlives a sweep, and a task may run again after a
    # sweep was stopped): the sweep waits for it, and take_new_summaries() only reports the
    # summaries the plan has not reported before.
    own = plan.run_job(task.cells[0], task.layout, task.count)
    summaries = dict(plan.take_new_summaries())
    summaries[task.key] = own
    return Outcome(task, rows, list(summaries.items()), [journal_line("runs", row) for _, row in rows])


# --- executors ------------------------------------------------------------------------------


class Executor(Protocol):
    """Runs tasks somewhere; finished ones come back through :meth:`next_done`."""

    workers: int

    def submit(self, payload: SpecPayload, task: Task, provided: dict[str, str]) -> None: ...
    def next_done(self, timeout: float) -> tuple[Task, Outcome | BaseException] | None: ...
    def close(self, cancel: bool) -> None: ...


class InlineExecutor:
    """Runs each task in this process when asked for the next result (``--jobs 1``)."""

    workers = 1

    def __init__(self) -> None:
        self._pending: deque[tuple[SpecPayload, Task, dict[str, str]]] = deque()

    def submit(self, payload: SpecPayload, task: Task, provided: dict[str, str]) -> None:
        self._pending.append((payload, task, provided))

    def next_done(self, timeout: float) -> tuple[Task, Outcome | BaseException] | None:
        if not self._pending:
            return None
        payload, task, provided = self._pending.popleft()
        try:
            return task, execute(payload, task, provided)
        except KeyboardInterrupt:
            raise
        except Exception as e:
            return task, e

    def close(self, cancel: bool) -> None:
        self._pending.clear()


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _init_worker(parent: int) -> None:
    """A local worker: it leaves Ctrl-C to the parent, which stops it; SIGTERM ends it at
    once (not the parent's handler, inherited through fork); and it dies with the parent,
    however the parent ends (on Linux: killed by the kernel when the parent exits)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


class _ResultQueue:
    """Finished tasks, put by the executor's callback threads, taken by the sweep."""

    def __init__(self) -> None:
        self._done: queue.Queue[tuple[Task, Outcome | BaseException]] = queue.Queue()

    def next_done(self, timeout: float) -> tuple[Task, Outcome | BaseException] | None:
        try:
            return self._done.get(timeout=timeout)
        except queue.Empty:
            return None


class LocalExecutor(_ResultQueue):
    """A pool of worker processes on this machine (default: one per core)."""

    def __init__(self, workers: int) -> None:
        super().__init__()
        self.workers = workers
        # Fork (where the platform has it): workers start at once with the module loaded. The
        # pool is created before the sweep opens DuckDB or starts any thread (see cmd_run).
        # Measured on tpds-small with 2 workers: 7.4 s with fork, 9.6 s with forkserver.
        # concurrent.futures rather than multiprocessing.Pool: the latter's worker-handler
        # thread wakes on every unread result and spun for ~9 % of a core here.
        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        self._pool = ProcessPoolExecutor(
            workers,
            mp_context=multiprocessing.get_context(method),
            initializer=_init_worker,
            initargs=(os.getpid(),),
        )
        # Workers start on the first submission: start them now, before the caller opens
        # DuckDB or starts threads.
        for f in [self._pool.submit(os.getpid) for _ in range(workers)]:
            f.result()

    def submit(self, payload: SpecPayload, task: Task, provided: dict[str, str]) -> None:
        def done(f: Future[Outcome]) -> None:
            try:
                self._done.put((task, f.result()))
            except BaseException as e:  # the task's own error, a dead worker, or cancellation
                self._done.put((task, e))

        self._pool.submit(execute, payload, task, provided).add_done_callback(done)

    def close(self, cancel: bool) -> None:
        if cancel:
            # Stop the running simulations too (Ctrl-C, a failed cell), not only queued ones.
            # SIGKILL: a worker has nothing to clean up, and no handler or blocked signal
            # mask can keep it alive (a live worker would hold the pool's shutdown forever).
            workers = list((getattr(self._pool, "_processes", None) or {}).values())
            for proc in workers:
                proc.kill()
            for proc in workers:
                proc.join(timeout=10)
            # A worker killed while it wrote its result leaves part of a message in the result
            # pipe, and the pool's manager thread waits for the rest for ever: this process holds
            # a write end of that pipe too, so no end-of-file comes (the Ctrl-C hang CI saw, with
            # the manager thread in Connection.recv). Closing that end once the workers are dead
            # turns the wait into end-of-file, which the manager takes for a broken pool.
            writer = getattr(getattr(self._pool, "_result_queue", None), "_writer", None)
            if writer is not None:
                writer.close()
        self._pool.shutdown(wait=True, cancel_futures=cancel)


# How long --cluster waits for the scheduler to answer, and then for a first worker (unless
# VCPULAB_CLUSTER_WAIT_S says otherwise).
CLUSTER_CONNECT_S = 10.0
CLUSTER_WAIT_S = 60.0


def cluster_wait_s() -> float:
    """How long to wait for a first worker: $VCPULAB_CLUSTER_WAIT_S, else :data:`CLUSTER_WAIT_S`."""
    text = os.environ.get("VCPULAB_CLUSTER_WAIT_S")
    if text is None:
        return CLUSTER_WAIT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 86_400:
        raise ConnectionError(f"VCPULAB_CLUSTER_WAIT_S: expected seconds from 0 to 86400 (got {printable(text)!r})")
    return value
# What --cluster takes: [PROTOCOL://]HOST:PORT with one of Dask's protocols (not the dashboard's http).
_CLUSTER_ADDRESS = re.compile(r"(?:(?:tcp|tls|ws|wss|ucx)://)?(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):[0-9]{1,5}")


def check_cluster_address(address: str) -> None:
    """A ConnectionError (one line) for a ``--cluster`` value that is no scheduler address."""
    if _CLUSTER_ADDRESS.fullmatch(address) and 0 < int(address.rsplit(":", 1)[1]) < 65536:
        return
    hint = (
        " (that is a web address, e.g. the dashboard's; the scheduler listens on tcp://HOST:8786)"
        if address.lower().startswith(("http://", "https://"))
        else ""
    )
    raise ConnectionError(
        f"--cluster: expected a Dask scheduler address such as tcp://HOST:8786 or HOST:8786 "
        f"(protocols tcp, tls, ws, wss, ucx), got {printable(address)!r}{hint}"
    )


class DaskExecutor(_ResultQueue):
    """Tasks on a Dask distributed cluster (``--cluster tcp://HOST:8786``). The workers need
    vcpulab installed (the same version: results carry it)."""

    def __init__(self, address: str) -> None:
        super().__init__()
        try:
            from distributed import Client
        except ImportError as e:  # pragma: no cover - dask is a dependency
            raise RuntimeError("--cluster needs dask[distributed] (pip install 'dask[distributed]')") from e
        check_cluster_address(address)
        try:
            self._client = Client(address, timeout=f"{CLUSTER_CONNECT_S:g}s", set_as_default=False)
        except (OSError, ValueError) as e:  # TimeoutError is an OSError
            raise ConnectionError(f"--cluster: cannot reach the Dask scheduler at {address}: {e}") from None
        try:
            self.workers = self._wait_for_workers(address)
        except BaseException:
            self._client.close()
            raise
        self._futures: dict[Any, Any] = {}  # by Dask key
        self._lock = threading.Lock()

    def _wait_for_workers(self, address: str) -> int:
        """The threads of the cluster's workers, after waiting up to :func:`cluster_wait_s`
        for a first worker to join (saying so on stderr); ConnectionError if none does."""
        info = self._client.scheduler_info()
        if not info.get("workers"):
            wait = cluster_wait_s()
            sys.stderr.write(
                f"vcpulab: note: the Dask scheduler at {address} has no workers yet; waiting up to "
                f"{wait:g} s for one (start one with `dask worker {address}`)\n"
            )
            sys.stderr.flush()
            try:
                self._client.wait_for_workers(1, timeout=wait)
            except (TimeoutError, OSError):
                raise ConnectionError(
                    f"--cluster: the Dask scheduler at {address} has no workers (waited {wait:g} s); "
                    f"start some with `dask worker {address}`"
                ) from None
            info = self._client.scheduler_info()
        threads: int = sum(w.get("nthreads", 1) for w in info.get("workers", {}).values())
        return max(1, threads)

    def submit(self, payload: SpecPayload, task: Task, provided: dict[str, str]) -> None:
        fut = self._client.submit(execute, payload, task, provided, pure=False, retries=0)
        with self._lock:
            self._futures[fut.key] = fut

        def done(f: Any) -> None:
            with self._lock:
                self._futures.pop(f.key, None)
            try:
                self._done.put((task, f.result()))
            except BaseException as e:  # the task's own error, or its cancellation
                self._done.put((task, e))

        fut.add_done_callback(done)

    def close(self, cancel: bool) -> None:
        with self._lock:
            futures = list(self._futures.values())
        if cancel and futures:
            self._client.cancel(futures)
        self._client.close()


def make_executor(jobs: int | None, cluster: str | None) -> Executor:
    if cluster:
        return DaskExecutor(cluster)
    workers = jobs if jobs is not None else (os.cpu_count() or 1)
    if workers <= 1:
        return InlineExecutor()
    return LocalExecutor(workers)


# --- the sweep ------------------------------------------------------------------------------


class CellFailed(Exception):
    """A simulation of the sweep failed; the results finished before it are stored."""

    def __init__(self, message: str, stored: int) -> None:
        super().__init__(message)
        self.stored = stored


@dataclass
class SweepPlan:
    """Which cells to run and which tasks that takes."""

    cells: list[int]
    jobs: dict[int, dict[str, Any]]
    stored: list[int]
    tasks: list[Task]
    known: dict[str, str] = field(default_factory=dict)


def plan_sweep(plan: Plan, selected: Sequence[int], stored_keys: set[str], baselines: dict[str, str]) -> SweepPlan:
    """Tasks for the selected cells that are not stored yet."""
    jobs = {i: json.loads(plan.cell_jobs(i)) for i in selected}
    todo = [i for i in selected if jobs[i]["key"] not in stored_keys]
    stored = [i for i in selected if jobs[i]["key"] in stored_keys]
    by_main: dict[str, list[int]] = {}
    for i in todo:
        by_main.setdefault(jobs[i]["main"]["key"], []).append(i)
    tasks: list[Task] = []
    extra: dict[str, Task] = {}
    for main, group in by_main.items():
        deps = []
        for i in group:
            for role in ("base", "alone"):
                job = jobs[i][role]
                if job is None or job["key"] == main:
                    continue
                # A stored baseline is a dependency too, known from the start: the worker is
                # given its summary rather than simulating it again.
                deps.append(job["key"])
                if job["key"] not in baselines and job["key"] not in by_main and job["key"] not in extra:
                    extra[job["key"]] = Task("baseline", (i,), job["key"], job["layout"], job["count"])
        row_keys = tuple((jobs[i]["key"], jobs[i]["config_key"]) for i in group)
        own = jobs[group[0]]["main"]
        tasks.append(
            Task(
                "cell",
                tuple(group),
                main,
                own["layout"],
                own["count"],
                deps=tuple(dict.fromkeys(deps)),
                row_keys=row_keys,
            )
        )
    # Baselines first, then cells in plan order (native cells before the ones they feed).
    return SweepPlan(
        cells=list(selected), jobs=jobs, stored=stored, tasks=[*extra.values(), *tasks], known=dict(baselines)
    )


def plan_stored(plan: Plan, selected: Sequence[int], store: ResultsStore | None) -> SweepPlan:
    """:func:`plan_sweep` of the selected cells against what ``store`` holds (cells and
    baseline summaries); everything is to run without a store."""
    if store is None:
        return plan_sweep(plan, selected, set(), {})
    with store.reading():
        stored_keys = store.keys()
        known = store.baselines()
    return plan_sweep(plan, selected, stored_keys, known)


def stored_rows(store: ResultsStore | None, sweep: SweepPlan) -> dict[int, dict[str, Any]]:
    """The stored rows of the sweep's cells that are already in ``store``, by cell index."""
    if store is None or not sweep.stored:
        return {}
    with store.reading():
        rows = store.rows(sweep.jobs[i]["key"] for i in sweep.stored)
    return {i: rows[sweep.jobs[i]["key"]] for i in sweep.stored}


def sweep_units(sweep: SweepPlan) -> int:
    """The steps of a sweep's progress: one per cell it runs, one per baseline simulation."""
    return sum(len(t.cells) if t.kind == "cell" else 1 for t in sweep.tasks)


@dataclass
class SweepReport:
    """What a sweep did."""

    ran: int = 0
    skipped: int = 0
    baselines: int = 0
    rows: dict[int, dict[str, Any]] = field(default_factory=dict)


def run_sweep(
    plan: Plan,
    payload: SpecPayload,
    sweep: SweepPlan,
    executor: Executor,
    writer: StoreWriter | None,
    *,
    on_result: Callable[[int, dict[str, Any]], None] = lambda i, r: None,
    on_baseline: Callable[[Task], None] = lambda t: None,
    keep_open: bool = False,
) -> SweepReport:
    """Runs ``sweep``'s tasks on ``executor``; every finished cell's row is stored (and passed
    to ``on_result``) before the next result is awaited. Raises :class:`CellFailed` on the first
    failed simulation (after cancelling the rest) and lets KeyboardInterrupt through (after
    stopping the workers); what finished before either is stored. The executor is closed at the
    end, unless ``keep_open`` and the sweep succeeded (several sweeps sharing one pool of
    workers, such as ``vcpulab reproduce``'s)."""
    version = _version()
    known = dict(sweep.known)
    report = SweepReport(skipped=len(sweep.stored))
    # Tasks whose dependencies are all known are ready, in plan order; the others wait, indexed
    # by the summaries they still miss.
    ready: deque[Task] = deque()
    missing: dict[Task, set[str]] = {}
    blocked_on: dict[str, list[Task]] = {}
    for t in sweep.tasks:
        need = {d for d in t.deps if d not in known}
        if need:
            missing[t] = need
            for d in need:
                blocked_on.setdefault(d, []).append(t)
        else:
            ready.append(t)
    in_flight = 0
    limit = max(2, 2 * executor.workers)
    cancel = True
    try:
        while ready or missing or in_flight:
            while ready and in_flight < limit:
                t = ready.popleft()
                executor.submit(payload, t, {d: known[d] for d in t.deps})
                in_flight += 1
            if in_flight == 0:
                gaps = sorted({d for need in missing.values() for d in need})
                raise RuntimeError(f"sweep stalled: no task can start (missing baselines {gaps[:3]})")
            done = executor.next_done(timeout=0.2)
            if done is None:
                continue
            in_flight -= 1
            task, outcome = done
            if isinstance(outcome, BaseException):
                raise CellFailed(_describe(plan, task, outcome), report.ran) from outcome
            new = [(k, s) for k, s in outcome.summaries if k not in known]
            known.update(outcome.summaries)
            for k, _ in new:
                for t in blocked_on.pop(k, ()):
                    need = missing[t]
                    need.discard(k)
                    if not need:
                        del missing[t]
                        ready.append(t)
            if writer is not None:
                # Summaries first: a stored cell's baselines are always stored too.
                writer.add_baselines(new, version)
                writer.append("runs", [row for _, row in outcome.rows], outcome.lines)
            if task.kind != "cell":
                report.baselines += 1
                on_baseline(task)
            for i, row in outcome.rows:
                report.ran += 1
                report.rows[i] = row
                on_result(i, row)
        cancel = False
    finally:
        if cancel or not keep_open:
            executor.close(cancel=cancel)
    return report


def _describe(plan: Plan, task: Task, exc: BaseException) -> str:
    message = str(exc).strip() or type(exc).__name__
    if task.kind == "cell":
        return message
    c = plan.cells()[task.cells[0]]
    cell = f"workload '{c['workload']}' vcpus {c['vcpus']} seed {c['seed']}"
    return f"baseline ({task.layout} ×{task.count}) of {cell}: {message}"


# --- selecting cells ------------------------------------------------------------------------

CELL_FIELDS = ("workload", "scenario", "vcpus", "threads", "oc_vms", "seed", "variant")


class OnlyError(ValueError):
    """A malformed ``--only`` filter."""


def parse_only(texts: Iterable[str]) -> dict[str, set[str]]:
    """``"workload=dedup,vcpus=16|32"`` (repeatable) → field → accepted values. Different
    fields must all match; values of one field (``|``-separated, or repeated) are
    alternatives."""
    want: dict[str, set[str]] = {}
    for text in texts:
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, eq, values = part.partition("=")
            name = name.strip()
            if not eq or not values.strip():
                raise OnlyError(f"--only: expected FIELD=VALUE (got {part!r})")
            if name not in CELL_FIELDS:
                raise OnlyError(f"--only: unknown field {name!r} (expected one of {', '.join(CELL_FIELDS)})")
            want.setdefault(name, set()).update(v.strip() for v in values.split("|"))
    return want


def select_cells(cells: Sequence[Mapping[str, Any]], want: Mapping[str, set[str]]) -> list[int]:
    """Indices of the cells matching ``want`` (scenario names case-insensitively)."""

    def norm(name: str, value: Any) -> str:
        return str(value).lower() if name == "scenario" else str(value)

    wanted = {k: {norm(k, v) for v in vs} for k, vs in want.items()}
    return [i for i, c in enumerate(cells) if all(norm(k, c[k]) in vs for k, vs in wanted.items())]
