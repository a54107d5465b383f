"""Type stubs for the native module built from crates/vcpulab-py."""

import os
from typing import Self, TypedDict, final

__all__ = [
    "TIMELINE_MAX_EVENTS",
    "TIMELINE_WINDOW_NS",
    "Plan",
    "SimulationError",
    "SpecError",
    "VcpulabError",
    "bench",
    "build_id",
    "version",
    "workload_toml",
    "workloads",
]

# Stub-only shapes of the dicts the module returns (not importable at run time).

class _Cell(TypedDict):
    workload: str
    scenario: str  # "native" | "UC" | "OC" | "OC2"
    vcpus: int
    threads: int
    oc_vms: int
    seed: int
    variant: str  # "" without experiment.vary, else e.g. "vm.tlb=pv" or "a=1;b=2"

class _PlatformInfo(TypedDict):
    name: str
    title: str
    used_by: list[str]
    default: bool

class _WorkloadInfo(TypedDict):
    name: str
    description: str
    model: str
    source: str
    suite: str
    sync: list[str]
    basis: str
    scalability_type: int
    version: int
    kvm_overhead: list[str]

class _PolicyInfo(TypedDict):
    kind: str
    name: str
    field: str
    description: str

TIMELINE_WINDOW_NS: int
"""Default end of a timeline's window (ns of virtual time): the first 100 ms."""
TIMELINE_MAX_EVENTS: int
"""Default cap on a timeline's events."""

def version() -> str: ...
def build_id() -> str:
    """``version+fingerprint of the simulator's source``: what stored results record and key on."""

class VcpulabError(Exception):
    """Base class of every error raised by the simulator."""

class SpecError(VcpulabError):
    """A spec, workload or override is invalid. ``str(e)`` is one line naming the field."""

class TraceError(VcpulabError):
    """A trace file cannot be read (truncated, corrupted, newer format)."""

class SimulationError(VcpulabError):
    """A run could not complete (run limit reached, deadlock). ``str(e)`` is one line."""

@final
class Plan:
    """A validated experiment: the list of cells to run, built from a TOML spec."""

    def __new__(cls, spec_text: str, source: str, overrides: list[str]) -> Self: ...
    def cells(self) -> list[_Cell]: ...
    def info(self) -> str:
        """Published values, ``[report]`` settings and variant labels as JSON text:
        ``{"published": [{"metric", "value", "source", "where"}...], "report": {"columns", "cdf"},
        "variants": [label...]}``."""
    def run_cell(self, i: int) -> str:
        """Run cell ``i`` and return its result object as JSON text (IndexError if out of range)."""
    def run_cell_with_timeline(
        self, i: int, from_ns: int = 0, to_ns: int | None = ..., max_events: int = ...
    ) -> tuple[str, bytes, int, int | None]:
        """Run cell ``i`` recording a timeline of its own simulation (not its baselines) in
        the virtual-time window [``from_ns``, ``to_ns``) (default the first
        ``TIMELINE_WINDOW_NS``; None: until the run ends), stopping at ``max_events`` (default
        ``TIMELINE_MAX_EVENTS``). Returns (result JSON text — the same as ``run_cell``'s —,
        the timeline as Trace Event Format JSON bytes, its event count, the virtual ns where
        the cap stopped recording or None). ValueError for a bad window. A failed simulation
        (run limit, deadlock) raises SimulationError with the timeline up to the failure in
        its attributes ``timeline`` (bytes), ``timeline_events`` and
        ``timeline_truncated_at``."""
    def spec_toml(self) -> str:
        """The fully materialised spec, after overrides."""
    def cell_jobs(self, i: int) -> str:
        """JSON text: ``key``, ``config_key`` and the jobs ``main``, ``base``, ``alone`` (each
        ``{"key", "layout", "count"}`` or null) of cell ``i``."""
    def run_job(self, i: int, layout: str, count: int) -> str:
        """Simulate (or find) baseline ``layout`` ("native" | "vms") × ``count`` of cell ``i``;
        its summary as JSON text."""
    def provide_summary(self, key: str, summary: str) -> None:
        """Record a summary computed elsewhere so cells paired with job ``key`` reuse it."""
    def take_new_summaries(self) -> list[tuple[str, str]]:
        """(job key, summary JSON) simulated since the last call."""
    def __len__(self) -> int: ...

def workloads() -> list[_WorkloadInfo]: ...
def workload_toml(name: str) -> str: ...
def policies() -> list[_PolicyInfo]: ...
def platforms() -> list[_PlatformInfo]: ...
def platform_toml(name: str) -> str:
    """A platform preset's TOML, its sources as comments; ``SpecError`` for an unknown name."""
def platform_estimates(name: str) -> str:
    """A platform preset's ``# estimate:`` values with their ``# bounds:``, as JSON text: a list of
    ``{key, value, integer, min, max, fixed, reason, line}`` (``key`` the dotted path, ``value`` as
    the preset gives it, ``min``/``max`` in the key's unit or null with ``fixed`` true for a
    choice, ``line`` the key's line in the preset); ``SpecError`` for an unknown name."""

def characterize(workload: str, cpus: int, seed: int, slice_ns: int, overrides: list[str]) -> str:
    """Run ``workload`` natively with n = ``cpus`` and characterize it; JSON text. SIGINT and
    SIGTERM stop the simulation (the signal handler's exception is raised)."""

def scalability_type(
    parallelism: float, sync_per_thread_s: float, cpus: int, high_parallelism: float = 0.75, slice_ms: float = 24.0
) -> int:
    """The digest §1.4 scalability type (1 high parallelism / low synchronization, 2 low/high,
    3 high/high, 4 low/low): the rule of ``characterize-sim`` (Rust ``characterize::classify``)."""

def bench(seconds: float) -> str:
    """Simulate the fixed bench model for at least ``seconds``; JSON text. SIGINT and SIGTERM
    stop it (the signal handler's exception is raised)."""

class PerfCounters:
    """Linux perf counters on process ``pid`` and every thread and child it starts, enabled
    at its next ``exec`` (attach while it waits before the exec)."""

    def __init__(self, pid: int, events: list[str]) -> None: ...
    def read(self) -> dict[str, int | str]:
        """Event → count, or → the reason (a str) it is unavailable here."""

def trace_info(path: str | os.PathLike[str], pid: int | None = None) -> str:
    """JSON: the trace's processes and the replay statistics of the chosen process."""
