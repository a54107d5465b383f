"""`vcpulab categorize --declared`: a workload's undercommitted categories over its vCPU counts
against those its profile declares (issue 23's agreement criterion)."""

from __future__ import annotations

from typing import Any

from vcpulab import analysis
from vcpulab._vcpulab import workloads


def row(workload: str, vcpus: int, categories: list[str], config: str = "", variant: str = "") -> dict[str, Any]:
    return {
        "workload": workload,
        "variant": variant,
        "config": config,
        "vcpus": vcpus,
        "dt_uc": 0.0,
        "categories": categories,
    }


def test_declared_categories_read_the_kvm_overhead_entries() -> None:
    assert analysis.declared_categories(["high host overhead (blocking sync, IPIs)", "high overcommit overhead"]) == {
        "high host"
    }
    assert analysis.declared_categories(["negligible"]) == {"negligible"}
    assert analysis.declared_categories(["high overcommit overhead"]) == set()
    # Every built-in profile of the TPDS set declares something the comparison can read.
    declared = {w["name"]: w["kvm_overhead"] for w in workloads()}
    assert analysis.declared_categories(declared["parsec.dedup"]) == {"high host"}
    assert analysis.declared_categories(declared["splash2x.fft"]) == {"negligible"}


def test_agreement_is_the_union_over_the_vcpu_counts() -> None:
    declared = {
        "a": ["high host overhead (x)"],
        "b": ["negligible"],
        "c": ["negligible"],
        "d": ["high overcommit overhead"],
        "e": ["high guest overhead (NUMA)", "high host overhead (y)"],
    }
    rows = [
        # a: high host at one size is enough (TPDS categorizes over all sizes).
        row("a", 4, ["negligible"]), row("a", 64, ["high host", "high overcommit"]),
        # b: negligible at every size.
        row("b", 4, ["negligible"]), row("b", 64, ["negligible"]),
        # c: not negligible at one size, and in no other UC category: disagrees.
        row("c", 4, ["negligible"]), row("c", 64, []),
        # d: declares only high overcommit (no UC category); the simulation gives none.
        row("d", 4, ["high overcommit"]), row("d", 64, []),
        # e: both declared, only one simulated.
        row("e", 4, ["high guest"]), row("e", 64, ["high guest"]),
        # A workload whose profile declares nothing is left out.
        row("lock", 4, ["negligible"]),
    ]  # fmt: skip
    got = {
        r["workload"]: (r["simulated"], r["declared"], r["agree"], r["vcpus"])
        for r in analysis.agreement(rows, declared)
    }
    assert got == {
        "a": (["high host"], ["high host"], True, [4, 64]),
        "b": (["negligible"], ["negligible"], True, [4, 64]),
        "c": ([], ["negligible"], False, [4, 64]),
        "d": ([], [], True, [4, 64]),
        "e": (["high guest"], ["high guest", "high host"], False, [4, 64]),
    }


def test_agreement_keeps_configurations_apart() -> None:
    declared = {"a": ["high host overhead"]}
    rows = [
        row("a", 4, ["high host"], config="x"),
        row("a", 4, [], config="y"),
        row("a", 4, ["high host"], variant="v"),
    ]
    got = sorted((r["variant"], r["config"], r["agree"]) for r in analysis.agreement(rows, declared))
    assert got == [("", "x", True), ("", "y", False), ("v", "", True)]
