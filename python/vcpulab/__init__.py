"""vcpulab: a deterministic simulator of virtualized multicore servers.

The simulator lives in the native module ``vcpulab._vcpulab`` (Rust, via PyO3); this
package is the Python front: the :func:`simulate` API and the ``vcpulab`` command.

    import vcpulab
    spec = {"experiment": {"workloads": ["ep"], "scenarios": ["UC"], "vcpus": [4]}}
    for result in vcpulab.simulate(spec):
        print(result["scenario"], result["delta_eta_t"], result["omega"])
"""

from __future__ import annotations

import json
from typing import Any

from ._vcpulab import (
    Plan,
    SimulationError,
    SpecError,
    VcpulabError,
    bench,
    version,
    workload_toml,
    workloads,
)
from .spec import OverridesLike, SpecLike, load_spec, normalize_overrides
from .traced.manifest import set_default_root

# Workloads named traced.<suite>.<program> are the repository's traces/ unless VCPULAB_TRACES
# names another directory (docs/real-programs.md).
set_default_root()

__version__: str = version()

__all__ = [
    "Plan",
    "SimulationError",
    "SpecError",
    "VcpulabError",
    "__version__",
    "bench",
    "plan",
    "simulate",
    "workload_toml",
    "workloads",
]


def plan(spec: SpecLike, *, overrides: OverridesLike = (), source: str | None = None) -> Plan:
    """Validate a spec (path, TOML text or dict) plus overrides into a :class:`Plan`.

    Raises :class:`SpecError` for an invalid spec or override, ``OSError`` for an unreadable file.
    """
    loaded = load_spec(spec, source)
    return Plan(loaded.text, loaded.source, normalize_overrides(overrides))


def simulate(spec: SpecLike, *, overrides: OverridesLike = (), source: str | None = None) -> list[dict[str, Any]]:
    """Run every cell of an experiment and return one result dict per cell.

    ``spec`` is a path to a ``.toml`` file, TOML text, or a dict shaped like the TOML.
    ``overrides`` are ``"PATH=VALUE"`` strings (as ``vcpulab run --set``) or a mapping
    ``{"experiment.vcpus": [4]}``. The dicts are the same objects ``vcpulab run --json`` prints.
    """
    p = plan(spec, overrides=overrides, source=source)
    return [json.loads(p.run_cell(i)) for i in range(len(p.cells()))]
