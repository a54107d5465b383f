"""``vcpulab predict app.vtrace``: a traced real program replayed in the simulator, natively and
in VM scenarios, with the causes of its overhead and the mitigations (TPDS §7, DIS) that help it.

::

    trace ──► [workloads.app] trace = "app.vtrace"  (the simulator converts it: workload/replay.rs)
          ├─► native on the traced machine's CPUs   → predicted vs traced wall time (fidelity),
          │   under the traced kernel's rules (machine.py)
          ├─► native + the requested scenarios      → δη_t, δη_r per scenario
          └─► each applicable mitigation, per VM scenario → δη_t with it, best first
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from .._vcpulab import Plan, trace_info
from ..diagnose import exits, metric
from ..mitigations import CATALOGUE, Mitigation
from ..spec import toml_value
from . import machine

WORKLOAD = "app"


def spec_text(trace: str, scenarios: Sequence[str], vcpus: int | Sequence[int], seed: int = 1) -> str:
    listed = ", ".join(toml_value(s) for s in scenarios)
    counts = ", ".join(str(v) for v in ([vcpus] if isinstance(vcpus, int) else vcpus))
    return (
        f'[experiment]\nworkloads = ["{WORKLOAD}"]\nscenarios = [{listed}]\nvcpus = [{counts}]\nseeds = [{seed}]\n\n'
        f"[workloads.{WORKLOAD}]\ntrace = {toml_value(trace)}\n"
    )


@contextmanager
def simulator_path(trace: str) -> Iterator[str]:
    """A name of the file ``trace`` that a spec can hold. A spec is UTF-8 text, and a path may
    hold bytes that are not UTF-8 (Python shows them as lone surrogates): such a file is opened
    here and named by its descriptor (``/proc/self/fd/N``, the same file, read in this process)
    while the block runs."""
    try:
        trace.encode("utf-8")
    except UnicodeEncodeError:
        pass
    else:
        yield trace
        return
    fd = os.open(trace, os.O_RDONLY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)


def unmap_calls(metrics: Mapping[str, Any]) -> float:
    """Every munmap, trimming madvise and read-only mprotect a run made, shot down or not (a call
    while no other CPU runs the process flushes only its own): the count to hold against a
    program's measured unmapping calls."""
    return float(metrics.get("tlb_shootdowns", 0)) + float(metrics.get("tlb_local_only", 0))


def run_cells(text: str, overrides: Sequence[str] = ()) -> list[dict[str, Any]]:
    plan = Plan(text, "<predict>", list(overrides))
    return [json.loads(plan.run_cell(i)) for i in range(len(plan.cells()))]


def _spins(r: dict[str, Any]) -> bool:
    """Whether the program's threads busy-waited in user space (spin locks)."""
    user = r.get("breakdown", {}).get("user", {})
    return any("spin" in cause and ns > 0 for cause, ns in user.items())


EVIDENCE: dict[str, Callable[[dict[str, Any]], bool]] = {
    "pv-tlb-flush": lambda r: metric(r, "tlb_shootdowns") > 0,
    "shoot4u": lambda r: metric(r, "tlb_shootdowns") > 0,
    "malloc-trim": lambda r: metric(r, "tlb_shootdowns") > 0,
    "pv-send-ipi": lambda r: metric(r, "ipis_tlb") > 0,
    "no-halt-poll": lambda r: exits(r, "HLT") > 0,
    "guest-haltpoll": lambda r: exits(r, "HLT") > 0,
    "spin-then-block": _spins,
}
"""The mitigations of the catalogue (:data:`vcpulab.mitigations.CATALOGUE`) ``predict`` tries,
each with the evidence in a VM result that its cause is there; their transforms are the
catalogue's replay transforms."""


def tried(r: dict[str, Any]) -> list[tuple[Mitigation, tuple[str, ...]]]:
    """(mitigation, its replay overrides) for each of :data:`EVIDENCE` whose evidence ``r``
    shows, in the catalogue's order."""
    out = []
    for mit in CATALOGUE:
        shows = EVIDENCE.get(mit.id)
        overrides = mit.replay_overrides(WORKLOAD)
        if shows is not None and overrides is not None and mit.requires(r) and shows(r):
            out.append((mit, overrides))
    return out


@dataclass
class Prediction:
    info: dict[str, Any]
    fidelity: dict[str, Any]  # the native run on the traced machine's CPUs
    results: list[dict[str, Any]]  # native + requested scenarios
    mitigations: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        def strip(r: dict[str, Any]) -> dict[str, Any]:
            return {k: v for k, v in r.items() if k not in ("run", "instances")}

        return {
            "trace": self.info,
            "fidelity": strip(self.fidelity),
            "results": [strip(r) for r in self.results],
            "mitigations": self.mitigations,
            "warnings": self.warnings(),
        }

    def warnings(self) -> list[str]:
        """What the user must know before trusting the numbers: time the trace does not
        explain, vCPUs the program cannot use."""
        unexplained = unexplained_warning(self.info["replay"])
        return ([unexplained] if unexplained else []) + idle_vcpus(self)


def causes(r: dict[str, Any], native: dict[str, Any], top: int = 5) -> list[tuple[str, float, float]]:
    """The (layer:cause, VM ns per instance, native ns) with the most added time, largest first;
    the application's own compute is not a cause."""
    instances = max(1, len(r.get("instances", [])) or 1)
    base = native.get("breakdown", {})
    rows = []
    for layer, by_cause in r.get("breakdown", {}).items():
        for cause, ns in by_cause.items():
            if (layer, cause) == ("user", "compute"):
                continue
            own = ns / instances
            before = float(base.get(layer, {}).get(cause, 0))
            if own > before:
                rows.append((f"{layer}:{cause}", own, before))
    rows.sort(key=lambda x: -(x[1] - x[2]))
    return rows[:top]


def fidelity(
    trace: str, cpus: int, seed: int = 1, overrides: Sequence[str] = (), info: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The native replay of ``trace`` on ``cpus`` cores (its result object) on the kernel it was
    traced on (:mod:`vcpulab.bridge.machine`; ``info`` = its ``trace_info``, read if not given),
    with spec ``overrides``."""
    replay = (info or json.loads(trace_info(trace)))["replay"]
    with simulator_path(trace) as path:
        return run_cells(spec_text(path, ["native"], cpus, seed), [*machine.traced(replay).overrides(), *overrides])[0]


def predict(
    trace: str,
    scenarios: Sequence[str],
    vcpus: Sequence[int] | None,
    cpus: int | None,
    seed: int = 1,
    on_step: Callable[[str], None] = lambda s: None,
) -> Prediction:
    """The native replay on ``cpus`` (default: as traced), then native and each of
    ``scenarios`` at each vCPU count of ``vcpus`` (default: the traced machine's CPUs), then
    each mitigation whose cause a VM result shows."""
    info = json.loads(trace_info(trace))  # the file read and checked whole, errors naming it
    with simulator_path(trace) as path:
        return _predict(path, info, scenarios, vcpus, cpus, seed, on_step)


def _predict(
    trace: str,
    info: dict[str, Any],
    scenarios: Sequence[str],
    vcpus: Sequence[int] | None,
    cpus: int | None,
    seed: int,
    on_step: Callable[[str], None],
) -> Prediction:
    traced_cpus = int(info["replay"]["cpus"]) or 1
    native_cpus = cpus or traced_cpus
    on_step(f"native replay on {native_cpus} CPUs")
    native_run = fidelity(trace, native_cpus, seed, info=info)
    wanted = ["native", *dict.fromkeys(s for s in scenarios if s != "native")]
    counts = list(dict.fromkeys(vcpus or [traced_cpus]))
    on_step(f"{', '.join(wanted)} with {', '.join(map(str, counts))} vCPUs")
    results = run_cells(spec_text(trace, wanted, counts, seed))
    results.sort(key=lambda r: (r["vcpus"], wanted.index(r["scenario"])))
    pred = Prediction(info, native_run, results)
    for r in results:
        if r["scenario"] == "native":
            continue
        for mit, overrides in tried(r):
            on_step(f"{r['scenario']} with {r['vcpus']} vCPUs with {mit.name}")
            cell = run_cells(spec_text(trace, ["native", r["scenario"]], r["vcpus"], seed), overrides)[-1]
            pred.mitigations.append(
                {
                    "scenario": r["scenario"],
                    "vcpus": r["vcpus"],
                    "id": mit.id,
                    "name": mit.name,
                    "cause": mit.cause,
                    "overrides": list(overrides),
                    "t_virt_s": cell["t_virt_s"],
                    # The VM's time before / after: what the user gains where they run.
                    "speedup": r["t_virt_s"] / cell["t_virt_s"],
                    # δη against the native run with the same change (an application-level fix
                    # speeds the native run up too).
                    "delta_eta_t": cell["delta_eta_t"],
                    "delta_eta_r": cell["delta_eta_r"],
                }
            )
    pred.mitigations.sort(key=lambda m: (m["vcpus"], m["scenario"], -m["speedup"]))
    return pred


# The share of the threads' time, off a CPU for no traced reason and not the traced machine's
# scheduling, above which `predict`, `mitigate` and `fidelity` warn that the replay does not
# see what the program waited for.
UNEXPLAINED_SHARE = 0.10


def unexplained_warning(replay: dict[str, Any]) -> str | None:
    """The warning for a trace whose threads spent more than :data:`UNEXPLAINED_SHARE` of
    their time blocked where the tracer does not see (the replay's ``blocked_untraced_ns`` and
    ``unexplained_unsplit_ns`` over ``thread_ns``), or None."""
    thread = int(replay.get("thread_ns") or 0)
    blocked = int(replay.get("blocked_untraced_ns") or 0)
    unsplit = int(replay.get("unexplained_unsplit_ns") or 0)
    if thread <= 0 or (blocked + unsplit) / thread <= UNEXPLAINED_SHARE:
        return None
    parts = []
    if blocked:
        parts.append(
            f"{blocked / 1e9:.3f} s blocked in calls the tracer does not see (inline system calls, such as "
            "libgomp's futex waits, or I/O), replayed as fixed sleeps where they happened: the prediction "
            "cannot make them shorter or longer"
        )
    if unsplit:
        parts.append(
            f"{unsplit / 1e9:.3f} s of threads without exit statistics (killed by the process's exit, or a "
            "version-1 trace), which cannot be told from waiting for a CPU: not replayed, as if those threads "
            "never blocked there"
        )
    share = (blocked + unsplit) / thread
    return f"{share:.0%} of the threads' time was spent off a CPU for no traced reason: " + "; ".join(parts)


def idle_vcpus(pred: Prediction) -> list[str]:
    """A note for each vCPU count above the most threads the program had running at once
    (alive and not in a traced wait, for at least 1 % of its run and a scheduling period of the
    traced machine or a tenth of the run: the replay's ``threads_at_once``): those vCPUs idle, and δη then measures a VM bigger than the program
    can use."""
    at_once = int(pred.info["replay"].get("threads_at_once") or pred.info["replay"]["threads"])
    counts = sorted({int(r["vcpus"]) for r in pred.results if r["scenario"] != "native"})
    return [
        f"{v} vCPUs: the program had at most {at_once} thread(s) running at once, so at least {v - at_once} "
        f"vCPU(s) stay idle and the result measures a VM larger than the program can use. Where the "
        f"program takes a thread count, trace it again with {v} threads to predict it at {v} vCPUs."
        for v in counts
        if v > at_once
    ]
