"""``vcpulab diagnose``: where one cell's virtualization overhead comes from, who made whom
wait, and which mitigation (TPDS §7, DIS) wins it back.

::

    spec + --workload W --scenario OC --vcpus N ──► the cell, and the native run beside it
        ├─► causes: the VM's time per (layer, cause) minus the native run's, per instance,
        │           grouped into the causes of TPDS §2 and ranked by the time they add
        ├─► wait chains: the simulator's run.wait_chains (which preempted vCPU made which
        │           vCPUs spin, and for how long)
        └─► mitigations: the cell re-run with each applicable mitigation (TPDS §7, DIS) switched on
                    (spec overrides), δη_t and δη_r before and after, best first

Every number comes from the simulator's result objects: the ledger breakdown, the counters and
the wait-chain rows. Nothing is estimated on the side.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._vcpulab import Plan
from .mitigations import CATALOGUE, Mitigation
from .spec import toml_value

VM_SCENARIOS = ("UC", "OC", "OC2")


# --- causes ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CauseGroup:
    """A cause of overhead (TPDS §2) and the ledger keys (``layer:cause``) it owns."""

    name: str
    keys: tuple[str, ...]
    explains: str


# Some host costs serve several causes; they are split by counters of the same run (see
# shared_costs): ICR writes by IPI kind, PAUSE exits by what the CPL-0 spinning waited for,
# vCPU switches by why the vCPU left its core.
ICR = "host:exit:MSR_WRITE_ICR"
PAUSE = "host:exit:PAUSE_INSTRUCTION"
SWITCH = "host:vcpu_switch"
TLB, USER_SPIN, KERNEL_SPIN, BLOCKING, SCHEDULING, IPIS, MEMORY = (
    "TLB shootdowns",
    "user spinning",
    "kernel spinning / LHP",
    "blocking sync / halt polling",
    "host scheduling (vCPU preemption)",
    "IPIs and interrupts",
    "memory / NUMA",
)


GROUPS: tuple[CauseGroup, ...] = (
    CauseGroup(
        TLB,
        ("kernel:tlb_wait", "kernel:tlb_flush", "host:tlb_flush", "kernel:memory_op"),
        "the sender busy-waits for every target to flush (TPDS §2.3); a preempted target makes it "
        "wait for a host time slice (shootdown preemption); its IPIs exit, and its PAUSE loop causes "
        "PLE exits and directed-yield switches",
    ),
    CauseGroup(
        USER_SPIN,
        ("user:spin_user",),
        "user-level spin locks and barriers busy-wait for threads whose vCPUs are descheduled; "
        "PLE cannot see them (TPDS §2.5)",
    ),
    CauseGroup(
        KERNEL_SPIN,
        ("kernel:spin_kernel",),
        "guest kernel spin locks whose holder or next waiter is preempted (lock-holder / "
        "lock-waiter preemption), and the PLE exits and directed yields they cause (TPDS §2.4)",
    ),
    CauseGroup(
        BLOCKING,
        (
            "host:exit:HLT",
            "host:halt_poll",
            "host:vcpu_wakeup",
            "host:exit:EXCEPTION_NMI",
            "kernel:idle_poll",
            "kernel:context_switch",
        ),
        "a blocked thread idles its vCPU: HLT exit, host halt polling, the host's wake-up of the "
        "halted vCPU, and the vCPU switches of halts (TPDS §2.1)",
    ),
    CauseGroup(
        SCHEDULING,
        (),
        "the host time-slices the vCPUs of co-running VMs and preempts them on wake-ups; each "
        "switch costs a context switch plus vcpu_put / vcpu_load (TPDS Fig. 9 'scheduling')",
    ),
    CauseGroup(
        "timer writes",
        (
            "host:exit:MSR_WRITE_TSC_DEADLINE",
            "host:exit:PREEMPTION_TIMER",
            "host:timer_program",
            "kernel:timer_program",
        ),
        "tickless idle reprograms the TSC-deadline timer on every idle entry and exit (TPDS §2.1)",
    ),
    CauseGroup(
        MEMORY,
        ("user:memory_stall", "kernel:memory_stall", "host:numa_migrate"),
        "the guest does not see the host's NUMA nodes: its threads' memory is remote, a node's "
        "bandwidth saturates, data is shared across sockets, a NUMA balancer migrates pages "
        "(TPDS §6.1, §7.2; docs/numa.md)",
    ),
    CauseGroup(
        IPIS,
        (
            "host:exit:EXTERNAL_INTERRUPT",
            "host:exit:MSR_WRITE_EOI",
            "host:exit:INTERRUPT_WINDOW",
            "host:interrupt",
            "host:ipi_send",
            "kernel:interrupt",
            "kernel:ipi_send",
            "kernel:call_wait",
        ),
        "every IPI send is an ICR-write exit, even with APICv (TPDS §2.2); wake-up (reschedule) "
        "IPIs come from blocking synchronization",
    ),
)

OTHER = "other"


def group_of(key: str) -> str:
    for g in GROUPS:
        if key in g.keys:
            return g.name
    return OTHER


def _normalised(weights: Mapping[str, float], default: str) -> dict[str, float]:
    total = sum(weights.values())
    if total <= 0:
        return {default: 1.0}
    return {k: v / total for k, v in weights.items() if v > 0}


def shared_costs(result: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """For each shared host cost (``layer:cause``), the share of each cause group:

    - ICR writes: by the IPIs the VMs sent (``tlb`` → TLB shootdowns, ``resched``/``call`` → IPIs);
    - PAUSE exits: PLE sees every CPL-0 PAUSE loop, so by the guest kernel's spin time on
      kernel locks (kernel spinning) vs on shootdown acknowledgements (TLB shootdowns);
    - vCPU switches: halts (blocking sync), twice the successful directed yields (the yielder
      leaves, the boosted vCPU displaces another: split like PAUSE exits) and the remaining
      preemptions (host scheduling: slice ends and wake-up preemption).
    """
    vms = (result.get("run") or {}).get("vms") or []
    kinds: dict[str, float] = {}
    for vm in vms:
        for kind, n in (vm.get("ipis_by_kind") or {}).items():
            kinds[kind] = kinds.get(kind, 0.0) + float(n)
    icr = _normalised({TLB: kinds.get("tlb", 0.0), IPIS: kinds.get("resched", 0.0) + kinds.get("call", 0.0)}, IPIS)
    kernel = (result.get("breakdown") or {}).get("kernel") or {}
    pause = _normalised(
        {
            KERNEL_SPIN: float(kernel.get("spin_kernel", 0)),
            TLB: float(kernel.get("tlb_wait", 0)),
            IPIS: float(kernel.get("call_wait", 0)),
        },
        KERNEL_SPIN,
    )
    halts = sum(float(vm.get("halts", 0)) for vm in vms)
    pre = sum(float(vm.get("preemptions", 0)) for vm in vms)
    by_yield = min(pre, 2.0 * sum(float((vm.get("ple") or {}).get("yields", 0)) for vm in vms))
    switch = {BLOCKING: halts, SCHEDULING: pre - by_yield}
    for group, share in pause.items():
        switch[group] = switch.get(group, 0.0) + by_yield * share
    return {ICR: icr, PAUSE: pause, SWITCH: _normalised(switch, SCHEDULING)}


def _instances(result: Mapping[str, Any]) -> int:
    """The measured instances the breakdown sums over (VMs running the workload)."""
    instances = [i for i in (result.get("run") or {}).get("instances") or [] if not i.get("background")]
    return max(1, len(instances))


def flat_breakdown(result: Mapping[str, Any]) -> dict[str, float]:
    """``layer:cause`` → ns per measured instance."""
    n = _instances(result)
    return {
        f"{layer}:{cause}": ns / n
        for layer, causes in (result.get("breakdown") or {}).items()
        for cause, ns in causes.items()
    }


@dataclass
class Cause:
    """One cause of overhead in a cell: the time it adds over the native run."""

    name: str
    explains: str
    added_ns: float
    """Busy time added per instance (VM minus native), ns."""
    components: dict[str, float] = field(default_factory=dict)
    """``layer:cause`` → added ns, largest first."""
    evidence: str = ""
    preempted_ns: float | None = None
    """Of the busy-waiting in this cause, the part spent waiting for descheduled vCPUs or
    threads (from the wait chains), per instance."""

    def to_json(self, c_native_ns: float) -> dict[str, Any]:
        return {
            "cause": self.name,
            "added_ns": self.added_ns,
            "of_native_cycles": self.added_ns / c_native_ns if c_native_ns else None,
            "components": self.components,
            "evidence": self.evidence,
            "preempted_ns": self.preempted_ns,
            "explains": self.explains,
        }


def metric(result: Mapping[str, Any], name: str) -> float:
    """``result["metrics"][name]``, 0 when the run did not measure it."""
    value = (result.get("metrics") or {}).get(name)
    return float(value) if isinstance(value, (int, float)) else 0.0


def exits(result: Mapping[str, Any], reason: str) -> int:
    """VM exits of ``reason`` (all VMs), 0 without any."""
    return int((result.get("exits") or {}).get(reason, 0))


def _evidence(name: str, r: Mapping[str, Any]) -> str:
    """The counters behind a cause, in words."""

    def m(name: str) -> float:
        return metric(r, name)

    if name == "TLB shootdowns":
        return (
            f"{m('tlb_shootdowns'):.0f} shootdowns, {m('tlb_ipis'):.0f} IPIs, "
            f"mean latency {m('tlb_latency_mean_us'):.1f} µs, max {m('tlb_latency_max_us'):.0f} µs"
        )
    if name == "kernel spinning / LHP":
        return f"{m('ple_exits'):.0f} PLE exits, {m('ple_yields'):.0f} directed yields, {m('pv_kicks'):.0f} PV kicks"
    if name == BLOCKING:
        rate = (r.get("metrics") or {}).get("halt_poll_success_rate")
        polled = f", halt-poll success {rate:.0%}" if isinstance(rate, (int, float)) else ""
        return f"{exits(r, 'HLT')} HLT exits{polled}"
    if name == "timer writes":
        deadline, timer = exits(r, "MSR_WRITE_TSC_DEADLINE"), exits(r, "PREEMPTION_TIMER")
        return f"{deadline} TSC_DEADLINE writes, {timer} preemption-timer exits"
    if name == IPIS:
        return (
            f"{exits(r, 'MSR_WRITE_ICR')} ICR writes ({m('ipis_resched'):.0f} reschedule, {m('ipis_call'):.0f} "
            f"function-call), {exits(r, 'EXTERNAL_INTERRUPT')} external-interrupt exits"
        )
    if name == MEMORY:
        metrics = r.get("metrics") or {}
        if "cpi" not in metrics:
            return ""
        numad = f", numad migrated {m('numad_migrated_mib'):.0f} MiB" if m("numad_moves") > 0 else ""
        return (
            f"CPI {m('cpi'):.2f}, {m('mem_remote_fraction'):.0%} remote accesses, "
            f"busiest node's bandwidth {m('mem_bw_util_max'):.0%} used{numad}"
        )
    if name == USER_SPIN:
        return "busy-waiting in user mode"
    if name == SCHEDULING:
        vms = (r.get("run") or {}).get("vms") or []
        pre, halts = (sum(int(vm.get(k, 0)) for vm in vms) for k in ("preemptions", "halts"))
        return f"{pre} vCPU preemptions, {halts} halts"
    return ""


# Which wait-chain rows (by their ``on``) belong to which cause.
def _wait_group(on: str) -> str:
    if on == "tlb_shootdown":
        return "TLB shootdowns"
    if on == "membarrier":
        return IPIS
    if on.startswith("kspinlock"):
        return "kernel spinning / LHP"
    return "user spinning"


STALLED = ("vcpu_preempted", "thread_preempted", "vcpu_halted")


def causes(result: Mapping[str, Any], native: Mapping[str, Any]) -> list[Cause]:
    """The causes of ``result``'s overhead over the ``native`` run, largest added time first.
    The application's own computation is not a cause."""
    vm, base = flat_breakdown(result), flat_breakdown(native)
    split = shared_costs(result)
    added: dict[str, dict[str, float]] = {}
    for key in sorted(set(vm) | set(base)):
        if key.endswith(":compute"):
            continue
        delta = vm.get(key, 0.0) - base.get(key, 0.0)
        if key in split:
            for group, share in split[key].items():
                added.setdefault(group, {})[key] = delta * share
        else:
            added.setdefault(group_of(key), {})[key] = delta
    preempted: dict[str, float] = {}
    n = _instances(result)
    for row in (result.get("run") or {}).get("wait_chains") or []:
        if row["state"] in STALLED:
            g = _wait_group(row["on"])
            preempted[g] = preempted.get(g, 0.0) + row["ns"] / n
    explains = {g.name: g.explains for g in GROUPS}
    explains[OTHER] = "system calls, hypercalls and anything not listed above"
    out = []
    for name, comps in added.items():
        total = sum(comps.values())
        ordered = dict(sorted(((k, v) for k, v in comps.items() if v != 0), key=lambda kv: -abs(kv[1])))
        out.append(
            Cause(
                name=name,
                explains=explains[name],
                added_ns=total,
                components=ordered,
                evidence=_evidence(name, result),
                preempted_ns=preempted.get(name),
            )
        )
    out.sort(key=lambda c: -c.added_ns)
    return out


# --- the wake-up path ----------------------------------------------------------------------------

WAKE_STEPS: tuple[tuple[str, str, str], ...] = (
    ("host:exit:MSR_WRITE_ICR", "waker", "the waker's ICR write exits (every IPI, APICv or not)"),
    ("host:vcpu_wakeup", "waker", "the host's try_to_wake_up of a halted vCPU, in that exit"),
    ("host:ipi_send", "waker", "a host reschedule IPI to the woken vCPU's core (no MWAIT)"),
    ("host:vcpu_switch", "wakee", "the host's switch to (and from) the vCPU thread, FPU switching included"),
    ("host:exit:EXCEPTION_NMI", "wakee", "the woken thread's first FPU use (#NM; lazy FPU, KVM before 4.15)"),
    ("host:exit:EXTERNAL_INTERRUPT", "wakee", "interrupts for a vCPU in guest mode without APICv"),
    ("host:exit:MSR_WRITE_EOI", "wakee", "the guest's EOI (no APICv)"),
    ("host:exit:INTERRUPT_WINDOW", "wakee", "one injection per entry (no APICv)"),
    ("kernel:interrupt", "wakee", "the guest's reschedule interrupt"),
    (
        "host:exit:MSR_WRITE_TSC_DEADLINE",
        "both",
        "tick stop on idle entry (off the path) and restart on wake-up (on it)",
    ),
    ("host:exit:HLT", "off", "the waiter's HLT"),
    ("host:halt_poll", "off", "host halt polling (its success shortens the wakee's path)"),
)
"""Host and guest steps of a blocking wait in a VM: ``layer:cause``, which side of a wake-up it
lies on (the waker's, the wakee's, both, or off the critical path), and what it is
(docs/semantics.md, the halt-and-wake path)."""


def wake_path(result: Mapping[str, Any], native: Mapping[str, Any]) -> dict[str, Any]:
    """How long a woken thread waits to run in the VM and natively (the schedulers' wake-up
    latency: woken → running, mean over the measured instances' threads), the wake-up count,
    and the VM's time per step of the halt-and-wake path (per instance) with its side."""

    def latency(r: Mapping[str, Any]) -> tuple[int, float | None]:
        count, total = 0, 0.0
        for inst in (r.get("run") or {}).get("instances") or []:
            if inst.get("background"):
                continue
            w = inst.get("wake_latency") or {}
            n = int(w.get("count") or 0)
            count += n
            total += float(w.get("mean_ns") or 0.0) * n
        return count, (total / count if count else None)

    (n_vm, vm_ns), (n_native, native_ns) = latency(result), latency(native)
    flat = flat_breakdown(result)
    steps = [
        {"step": key, "side": side, "what": what, "ns": flat[key]}
        for key, side, what in WAKE_STEPS
        if flat.get(key, 0.0) > 0
    ]
    return {
        "wakeups": n_vm,
        "wakeups_native": n_native,
        "latency_ns": vm_ns,
        "latency_native_ns": native_ns,
        "steps": steps,
    }


# --- wait chains -------------------------------------------------------------------------------


def wait_chains(result: Mapping[str, Any], top: int = 5) -> dict[str, Any]:
    """The wait-chain rows summarised: busy-wait time by culprit state, and the culprits that
    were descheduled (largest first) with the vCPUs they made wait."""
    rows = (result.get("run") or {}).get("wait_chains") or []
    by_state: dict[str, float] = {}
    culprits: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        by_state[row["state"]] = by_state.get(row["state"], 0.0) + row["ns"]
        if row["state"] not in STALLED:
            continue
        c = culprits.setdefault(
            (row["culprit"], row["state"]), {"culprit": row["culprit"], "state": row["state"], "ns": 0, "victims": {}}
        )
        c["ns"] += row["ns"]
        v = c["victims"].setdefault((row["waiter"], row["on"]), 0)
        c["victims"][(row["waiter"], row["on"])] = v + row["ns"]
    ranked = sorted(culprits.values(), key=lambda c: (-c["ns"], c["culprit"]))[:top]
    for c in ranked:
        victims = sorted(c["victims"].items(), key=lambda kv: (-kv[1], kv[0]))
        c["victims"] = [{"waiter": w, "on": on, "ns": ns} for (w, on), ns in victims]
    return {
        "by_state": dict(sorted(by_state.items(), key=lambda kv: -kv[1])),
        "culprits": ranked,
        "total_ns": sum(by_state.values()),
    }


# --- mitigations -------------------------------------------------------------------------------


SIGNIFICANT = 0.01
"""A cause is worth mitigating when it adds at least this fraction of the native cycles."""


def _in_force(override: str, settings: Mapping[str, Any]) -> bool:
    """Whether the materialised spec already has ``path=value`` (workload paths, whose names
    may contain dots, are never considered in force)."""
    path, _, value = override.partition("=")
    if path.startswith("workloads."):
        return False
    node: Any = settings
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return bool(node == tomllib.loads(f"v = {value}")["v"])


def applicable(
    cause_list: Sequence[Cause],
    result: Mapping[str, Any],
    c_native_ns: float,
    settings: Mapping[str, Any] | None = None,
) -> list[tuple[Mitigation, str]]:
    """(mitigation, the cause it is tried for): the mitigations of the catalogue
    (:data:`vcpulab.mitigations.CATALOGUE`) that a profile workload can have, for the
    significant causes, in the causes' order, each once; none that the spec (``settings``, the
    materialised spec) already switches on."""
    significant = [c.name for c in cause_list if c_native_ns and c.added_ns >= SIGNIFICANT * c_native_ns]
    seen: set[str] = set()
    out = []
    for cause in significant:
        for m in CATALOGUE:
            overrides = m.spec_overrides(str(result["workload"]))
            if cause not in m.causes or overrides is None or m.id in seen or not m.requires(result):
                continue
            if settings is not None and all(_in_force(o, settings) for o in overrides):
                continue
            seen.add(m.id)
            out.append((m, cause))
    return out


# --- running -----------------------------------------------------------------------------------


class DiagnoseError(Exception):
    """The selection does not name one VM cell."""


@dataclass
class Diagnosis:
    cell: dict[str, Any]
    result: dict[str, Any]
    native: dict[str, Any]
    causes: list[Cause]
    waits: dict[str, Any]
    wake: dict[str, Any] = field(default_factory=dict)
    mitigations: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        c_native = float(self.result.get("c_native_ns") or 0.0)
        keep = (
            "t_native_s",
            "t_virt_s",
            "delta_eta_t",
            "delta_eta_r",
            "omega",
            "weighted_speedup",
            "c_native_ns",
            "c_virt_ns",
        )
        return {
            "cell": self.cell,
            "result": {k: self.result.get(k) for k in keep},
            "causes": [c.to_json(c_native) for c in self.causes],
            "wait_chains": self.waits,
            "wake_path": self.wake,
            "mitigations": self.mitigations,
        }


def find_cell(cells: Sequence[Mapping[str, Any]], selected: Sequence[int]) -> tuple[int, int]:
    """The one VM cell among ``selected`` and the native cell of the same configuration."""
    vm = [i for i in selected if cells[i]["scenario"] in VM_SCENARIOS]
    if not vm:
        raise DiagnoseError("diagnose explains virtualization overhead: select a UC, OC or OC2 cell (--scenario)")
    if len(vm) > 1:
        labels = "; ".join(label(cells[i]) for i in vm[:4]) + ("; ..." if len(vm) > 4 else "")
        raise DiagnoseError(
            f"diagnose needs one cell; the selection has {len(vm)} ({labels}): narrow it with "
            "--workload/--scenario/--vcpus/--seed or --only FIELD=VALUE"
        )
    cell = cells[vm[0]]
    same = ("workload", "vcpus", "threads", "seed", "variant")
    native = [i for i, c in enumerate(cells) if c["scenario"] == "native" and all(c[k] == cell[k] for k in same)]
    if not native:
        raise DiagnoseError(f"no native cell beside {label(cell)} (the spec must allow scenario native)")
    return vm[0], native[0]


def label(cell: Mapping[str, Any]) -> str:
    """``heapchurn in OC, 16 vCPUs, seed 1`` (with the variant in brackets if any)."""
    variant = f" [{cell['variant']}]" if cell.get("variant") else ""
    return f"{cell['workload']} in {cell['scenario']}, {cell['vcpus']} vCPUs, seed {cell['seed']}{variant}"


def run(
    text: str,
    source: str,
    overrides: Sequence[str],
    selected: Callable[[Sequence[Mapping[str, Any]]], list[int]],
    mitigate: bool = True,
    on_step: Callable[[str], None] = lambda s: None,
    on_plan: Callable[[int], None] = lambda n: None,
) -> Diagnosis:
    """Diagnoses the one VM cell that ``selected`` picks from the plan of ``text`` +
    ``overrides`` (native is added to its scenarios when missing), then re-runs it with each
    applicable mitigation."""
    overrides = [*overrides, "record.wait_chains=true"]
    plan = Plan(text, source, overrides)
    cells = plan.cells()
    scenarios = list(dict.fromkeys(c["scenario"] for c in cells))
    if "native" not in scenarios:
        # The native run of the same configuration is the reference.
        overrides.append(f"experiment.scenarios={toml_value(['native', *scenarios])}")
        plan = Plan(text, source, overrides)
        cells = plan.cells()
    i, j = find_cell(cells, selected(cells))
    cell = cells[i]
    on_step(f"{label(cell)} and its native run")
    native = json.loads(plan.run_cell(j))
    result = json.loads(plan.run_cell(i))
    cause_list = causes(result, native)
    diag = Diagnosis(
        cell={k: cell[k] for k in ("workload", "scenario", "vcpus", "threads", "oc_vms", "seed", "variant")},
        result=result,
        native=native,
        causes=cause_list,
        waits=wait_chains(result),
        wake=wake_path(result, native),
    )
    if not mitigate:
        return diag
    settings = tomllib.loads(plan.spec_toml())
    mits = applicable(cause_list, result, float(result.get("c_native_ns") or 0.0), settings)
    on_plan(len(mits))
    for m, cause in mits:
        on_step(f"{label(cell)} with {m.name}")
        extra = m.spec_overrides(str(cell["workload"])) or ()
        with_plan = Plan(text, source, [*overrides, *extra])
        k, _ = find_cell(with_plan.cells(), selected(with_plan.cells()))
        after = json.loads(with_plan.run_cell(k))
        diag.mitigations.append(_mitigation_row(m, cause, extra, result, after))
    diag.mitigations.sort(key=lambda r: (r["delta_eta_t"], -r["speedup"], r["name"]))
    return diag


def _mitigation_row(
    m: Mitigation, cause: str, extra: Sequence[str], before: Mapping[str, Any], after: Mapping[str, Any]
) -> dict[str, Any]:
    return {
        "id": m.id,
        "name": m.name,
        "cause": cause,
        "overrides": list(extra),
        "delta_eta_t": after["delta_eta_t"],
        "delta_eta_r": after["delta_eta_r"],
        "change_delta_eta_t": after["delta_eta_t"] - before["delta_eta_t"],
        "change_delta_eta_r": after["delta_eta_r"] - before["delta_eta_r"],
        # What the user sees in the VM: its run time before / after.
        "speedup": before["t_virt_s"] / after["t_virt_s"],
        "t_virt_s": after["t_virt_s"],
        "t_native_s": after["t_native_s"],
    }
