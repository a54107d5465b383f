"""The traced machine's kernel as simulator settings (vcpulab/bridge/machine.py)."""

from __future__ import annotations

import json

import pytest

from vcpulab._vcpulab import Plan
from vcpulab.bridge import machine


@pytest.mark.parametrize(
    ("release", "mm_locks", "slice_ms"),
    [
        ("4.15.0-20-generic", "mmap_sem", None),
        ("6.3.13", "mmap_sem", None),
        ("6.4.0", "per_vma_faults", None),
        ("6.5.7-arch1", "per_vma_faults", None),
        ("6.6.0", "per_vma_faults", 1.5),
        ("6.16.9", "per_vma_faults", 1.5),
        ("6.17.0-rc1", "per_vma", 1.5),
        ("6.18.44-fc-v1098", "per_vma", 1.5),
        ("7.0.1", "per_vma", 1.5),
    ],
)
def test_each_kernel_gets_the_rules_of_its_version(release: str, mm_locks: str, slice_ms: float | None) -> None:
    k = machine.Machine(release, 2)
    assert k.known and k.mm_locks == mm_locks and k.slice_ms == slice_ms
    sets = k.overrides()
    assert sets[0] == f'host.mm_locks="{mm_locks}"'
    assert any("sched_latency" in s for s in sets) == (slice_ms is not None)
    assert release in k.describe()


def test_the_slice_scales_as_the_scheduler_tunables() -> None:
    # 0.75 ms x (1 + ilog2(min(CPUs, 8)))
    assert [machine.base_slice_ms(n) for n in (1, 2, 3, 4, 8, 64)] == [0.75, 1.5, 1.5, 2.25, 3.0, 3.0]


@pytest.mark.parametrize("release", [None, "", "unknown"])
def test_a_trace_without_its_kernel_keeps_the_default_preset(release: str | None) -> None:
    k = machine.traced({"kernel": release, "cpus": 2})
    assert not k.known and k.overrides() == [] and "not recorded" in k.describe()


@pytest.mark.parametrize(
    ("libc", "tcache", "trim"),
    [("2.17", 0, "always"), ("2.22", 0, "threshold"), ("2.27", 576, "threshold"), ("2.36", 640, "threshold")],
)
def test_each_glibc_gets_its_malloc(libc: str, tcache: int, trim: str) -> None:
    k = machine.Machine("6.18.1", 2, libc)
    assert (k.tcache_bytes, k.arena_trim) == (tcache, trim)
    assert f"host.tcache_bytes={tcache}" in k.overrides() and f'host.arena_trim="{trim}"' in k.overrides()
    assert f"glibc {libc}" in k.describe()
    assert machine.Machine("6.18.1", 2, None).tcache_bytes is None


def test_the_overrides_are_valid_spec_settings() -> None:
    text = '[experiment]\nworkloads = ["lock"]\nscenarios = ["native"]\nvcpus = [2]\n'
    for release in ("6.18.1", "6.5.0", "5.15.0"):
        plan = Plan(text, "<test>", machine.Machine(release, 2, "2.36").overrides())
        spec = plan.spec_toml()
        assert f'mm_locks = "{machine.Machine(release, 2).mm_locks}"' in spec
        assert json.loads(plan.run_cell(0))["t_native_s"] > 0
