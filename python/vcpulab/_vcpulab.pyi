"""Type stubs for the native module built from crates/vcpulab-py."""

from typing import Self, TypedDict, final

__all__ = [
    "Plan",
    "SimulationError",
    "SpecError",
    "VcpulabError",
    "bench",
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
    seed: int
    variant: str  # "" without experiment.vary, else e.g. "vm.tlb=pv" or "a=1;b=2"

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

class _PolicyInfo(TypedDict):
    kind: str
    name: str
    field: str
    description: str

def version() -> str: ...

class VcpulabError(Exception):
    """Base class of every error raised by the simulator."""

class SpecError(VcpulabError):
    """A spec, workload or override is invalid. ``str(e)`` is one line naming the field."""

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
    def spec_toml(self) -> str:
        """The fully materialised spec, after overrides."""
    def __len__(self) -> int: ...

def workloads() -> list[_WorkloadInfo]: ...
def workload_toml(name: str) -> str: ...
def policies() -> list[_PolicyInfo]: ...
def characterize(workload: str, cpus: int, seed: int, slice_ns: int, overrides: list[str]) -> str:
    """Run ``workload`` natively with n = ``cpus`` and characterize it; JSON text."""
def bench(seconds: float) -> str: ...
