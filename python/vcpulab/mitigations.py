"""The one catalogue of the mitigations of TPDS §7 and DIS, used by ``vcpulab diagnose`` (on a spec's
workload), ``vcpulab predict`` (on a replayed trace) and ``vcpulab mitigate`` (on a real program
and, for its *simulated* column, on a replay of its trace).

Each entry spells each of its transforms once:

- ``settings``: spec overrides of the machine, VM or guest (any workload);
- ``profile``: fields of a profile workload (``[workloads.W]``, e.g. ``transform.spin``);
  ``None`` when no profile-workload field does it;
- ``replay``: fields of a traced workload (``[workloads.W] trace = ...``: ``heap``,
  ``spinlocks``); ``None`` when the replay has no equivalent;
- ``environment``: how the real program gets it without recompiling (``vcpulab mitigate``);
- ``model``: what the simulator's model of the transform does and leaves out, the remark shown
  when the simulation and a measurement disagree.

Two spellings of one change are one entry; a different change (spin-then-block with a 50 µs
budget in a profile workload and a ~2 µs one in a replay) says so in its ``model``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .spec import toml_value

# The cause groups of ``vcpulab diagnose`` (TPDS §2) the mitigations address.
TLB = "TLB shootdowns"
USER_SPIN = "user spinning"
KERNEL_SPIN = "kernel spinning / LHP"
BLOCKING = "blocking sync / halt polling"
TIMER = "timer writes"
IPIS = "IPIs and interrupts"
MEMORY = "memory / NUMA"


@dataclass(frozen=True)
class EnvChange:
    """One change of a real program's environment: ``set`` a variable, ``append`` to a
    ``:``-separated one (``GLIBC_TUNABLES``) or ``preload`` a native library of vcpulab."""

    variable: str
    action: str
    value: str


def _always(result: Mapping[str, Any]) -> bool:
    return True


@dataclass(frozen=True)
class Mitigation:
    """A mitigation (TPDS §7, DIS) and its transforms (see the module docstring)."""

    id: str
    name: str
    causes: tuple[str, ...]
    """The cause groups it addresses, the first being the one it is listed under."""
    what: str
    model: str
    settings: tuple[str, ...] = ()
    profile: tuple[tuple[str, Any], ...] | None = ()
    replay: tuple[tuple[str, Any], ...] | None = ()
    environment: tuple[EnvChange, ...] = ()
    requires: Callable[[Mapping[str, Any]], bool] = _always
    """What a simulated result must show for the mitigation to change anything."""

    @property
    def cause(self) -> str:
        return self.causes[0]

    def spec_overrides(self, workload: str) -> tuple[str, ...] | None:
        """The overrides that switch it on for profile workload ``workload``; ``None`` when a
        profile workload cannot have it."""
        if self.profile is None:
            return None
        return self.settings + tuple(_field(workload, k, v) for k, v in self.profile)

    def replay_overrides(self, workload: str) -> tuple[str, ...] | None:
        """The overrides that switch it on for traced workload ``workload``; ``None`` when the
        replay has no equivalent."""
        if self.replay is None:
            return None
        return self.settings + tuple(_field(workload, k, v) for k, v in self.replay)

    def transforms(self) -> tuple[tuple[str, Any], ...]:
        """Every transform it spells, as (kind, value) pairs: what makes two entries the same."""
        out: list[tuple[str, Any]] = [("setting", s) for s in self.settings]
        out += [("profile", p) for p in self.profile or ()]
        out += [("replay", p) for p in self.replay or ()]
        out += [("environment", e) for e in self.environment]
        return tuple(out)


def _field(workload: str, key: str, value: Any) -> str:
    return f"workloads.{workload}.{key}={toml_value(value)}"


def _exits(result: Mapping[str, Any], reason: str) -> int:
    return int((result.get("exits") or {}).get(reason, 0))


MALLOC_TUNABLES = "glibc.malloc.trim_threshold=268435456:glibc.malloc.top_pad=67108864"

_VM_ONLY = "the replay runs it as any spec setting (it is a VM or guest setting, not a change of the program)"

CATALOGUE: tuple[Mitigation, ...] = (
    Mitigation(
        "pv-tlb-flush",
        "PV TLB flush",
        (TLB,),
        "the guest defers the flush of preempted vCPUs to their next entry (vm.tlb = pv)",
        "the simulator's model of the PV flush (docs/policies.md); " + _VM_ONLY,
        settings=('vm.tlb="pv"',),
    ),
    Mitigation(
        "shoot4u",
        "Shoot4U",
        (TLB,),
        "the host invalidates the targets' TLB entries itself (vm.tlb = shoot4u)",
        "the simulator's model of Shoot4U's hypercall (docs/policies.md); " + _VM_ONLY,
        settings=('vm.tlb="shoot4u"',),
    ),
    Mitigation(
        "malloc-trim",
        "allocator trim threshold / top pad",
        (TLB,),
        f"allocator trim threshold 256 MiB and top pad 64 MiB (GLIBC_TUNABLES={MALLOC_TUNABLES})",
        "the simulation re-runs the program's allocations through a model of glibc's heap with the new "
        "thresholds and prices its page faults, heap growth and trims (and their TLB shootdowns) at the "
        "simulator's cost table; it leaves out what page faults and kernel time really cost on this "
        "machine (zeroing and re-faulting pages, page-table work: a re-faulted page costs ~2 µs on a "
        "nested VM, far more than the table), and any kernel time the trace did not record",
        profile=(("heap.trim_threshold", "256MiB"), ("heap.top_pad", "64MiB")),
        replay=(("heap.trim_threshold", "256MiB"), ("heap.top_pad", "64MiB")),
        environment=(EnvChange("GLIBC_TUNABLES", "append", MALLOC_TUNABLES),),
    ),
    Mitigation(
        "pv-send-ipi",
        "PV send-IPI",
        (TLB, IPIS),
        "multicast IPIs are sent with one hypercall instead of an ICR-write exit each (vm.pv.send_ipi)",
        "the simulator's model of the send-IPI hypercall (TLB and call-function IPIs only, not "
        "reschedule IPIs: docs/semantics.md); " + _VM_ONLY,
        settings=("vm.pv.send_ipi=true",),
    ),
    Mitigation(
        "spin-then-block",
        "spin-then-block",
        (USER_SPIN,),
        "spin locks spin briefly, then block (LD_PRELOAD libspinblock.so for pthread_spin_*)",
        "a profile workload's spinning objects spin up to 50 µs (transform.spin_budget) and then block; a "
        "replay's spin locks spin ~2 µs and then block, as libspinblock.so does; the simulation prices the "
        "blocking and wake-ups at the cost table and leaves out the preloaded library's own cost and the "
        "cache effects of the changed schedule",
        profile=(("transform.spin", "spin_then_block"),),
        replay=(("spinlocks", "spin-then-block"),),
        environment=(EnvChange("LD_PRELOAD", "preload", "libspinblock.so"),),
    ),
    Mitigation(
        "blocking-replacement",
        "blocking replacement",
        (USER_SPIN,),
        "spinning objects block at once (transform.spin = block)",
        "a profile workload's spinning objects become blocking ones; a replay has no equivalent",
        profile=(("transform.spin", "block"),),
        replay=None,
    ),
    Mitigation(
        "omp-passive",
        "omp-passive",
        (USER_SPIN,),
        "OpenMP threads block instead of spinning when idle (OMP_WAIT_POLICY=passive)",
        "not simulated: the replay has no OpenMP runtime (its idle threads' spinning is traced as compute)",
        profile=None,
        replay=None,
        environment=(EnvChange("OMP_WAIT_POLICY", "set", "passive"),),
    ),
    Mitigation(
        "pv-spinlocks",
        "PV spinlocks",
        (KERNEL_SPIN,),
        "a kernel-lock waiter halts after spinning and is kicked (vm.pv.spinlocks)",
        "the simulator's model of PV qspinlocks (kernel ticket locks only); " + _VM_ONLY,
        settings=("vm.pv.spinlocks=true",),
    ),
    Mitigation(
        "fixed-ple-window",
        "fixed PLE window (16384 cycles)",
        (KERNEL_SPIN,),
        "the pause-loop-exiting window stays at 16,384 cycles",
        "the simulator's model of PLE; " + _VM_ONLY,
        settings=('vm.ple.window_policy="fixed"', "vm.ple.window_cycles=16384"),
    ),
    Mitigation(
        "ple-off",
        "PLE off",
        (KERNEL_SPIN,),
        "no pause-loop exiting",
        "the simulator's model of PLE; " + _VM_ONLY,
        settings=("vm.ple.enabled=false",),
        requires=lambda r: _exits(r, "PAUSE_INSTRUCTION") > 0,
    ),
    Mitigation(
        "no-halt-poll",
        "no host halt polling",
        (BLOCKING,),
        "the host does not poll before it deschedules a halted vCPU",
        "the simulator's model of KVM's halt polling; " + _VM_ONLY,
        settings=("vm.halt_poll.enabled=false",),
    ),
    Mitigation(
        "guest-haltpoll",
        "guest haltpoll",
        (BLOCKING,),
        "the guest polls before it halts (cpuidle haltpoll)",
        "the simulator's model of guest haltpoll; " + _VM_ONLY,
        settings=('guest.idle="haltpoll"',),
    ),
    Mitigation(
        "tick-kept",
        "tick never stopped",
        (TIMER,),
        "the guest keeps its periodic tick when idle (no tickless idle)",
        "the simulator's model of the guest tick; " + _VM_ONLY,
        settings=("guest.tickless=false",),
    ),
    Mitigation(
        "ipiv",
        "IPI virtualization",
        (IPIS,),
        "IPIs to running vCPUs are delivered without an exit (vm.ipiv)",
        "the simulator's model of IPI virtualization; " + _VM_ONLY,
        settings=("vm.ipiv=true",),
    ),
    Mitigation(
        "numa-exposed",
        "expose NUMA to the guest",
        (MEMORY,),
        "the guest sees the host's NUMA nodes (vm.numa = exposed)",
        "the simulator's memory model (docs/numa.md); " + _VM_ONLY,
        settings=('vm.numa="exposed"',),
    ),
    Mitigation(
        "numad",
        "numad-like balancer",
        (MEMORY,),
        "a numad-like host daemon places VMs on NUMA nodes (host.numad)",
        "the simulator's model of a numad-like balancer (docs/numa.md); " + _VM_ONLY,
        settings=("host.numad.enabled=true",),
    ),
)


def by_id(mitigation_id: str) -> Mitigation:
    """The catalogue's entry ``mitigation_id``."""
    for m in CATALOGUE:
        if m.id == mitigation_id:
            return m
    raise KeyError(mitigation_id)
