"""One definition per quantity (issue 21, items 8 and 10): the speedups of `vcpulab run` and of
the report are the same function's, the efficiency-based speedup is the simulator's, the
scalability-type rule is the simulator's, the mitigations are one catalogue, and `mitigate`
says when the simulation and the measurement disagree."""

from __future__ import annotations

import math

import itertools
from typing import Any

import pytest

from vcpulab import _vcpulab, analysis, diagnose, mitigations, scaling
from vcpulab.bridge import commands, mitigate, predict
from vcpulab.bridge.launch import Measurement
from vcpulab.report import mechanisms
from vcpulab.report.common import Namer

# --- speedup ------------------------------------------------------------------------------------


def _result(scenario: str, vcpus: int, seed: int, t: float, eff: float | None) -> dict[str, Any]:
    native = scenario == "native"
    return {
        "workload": "w",
        "scenario": scenario,
        "variant": "",
        "vcpus": vcpus,
        "threads": vcpus,
        "oc_vms": 2,
        "seed": seed,
        "t_native_s": t if native else 1.0,
        "t_virt_s": None if native else t,
        "metrics": {} if eff is None else {"eff_speedup": eff},
    }


RESULTS = [
    _result(s, n, seed, t * (1 + 0.01 * seed), e)
    for s, n, t, e in (
        ("native", 2, 1.0, 1.9),
        ("native", 4, 0.55, 3.6),
        ("native", 8, 0.31, 6.8),
        ("OC", 2, 2.1, 1.7),
        ("OC", 4, 1.2, 3.1),
        ("OC", 8, 0.9, None),
    )
    for seed in (1, 2)
]


def _stored(result: dict[str, Any]) -> dict[str, Any]:
    """A result as the report reads it from a store: flat columns, metrics as columns."""
    row = {k: v for k, v in result.items() if k != "metrics"}
    row["eff_speedup"] = result["metrics"].get("eff_speedup")
    return row


def test_run_and_report_speedups_are_one_definition() -> None:
    curves = scaling.speedup_curves(RESULTS)
    cells = [_stored(r) for r in RESULTS]
    records = mechanisms.speedup_records(cells, Namer(cells))
    by_run = {(c.scenario, p.vcpus): (p, c.base_vcpus) for c in curves for p in c.points}
    assert len(records) == len(by_run) == 6
    for rec in records:
        p, n0 = by_run[(rec["scenario"], rec["vcpus"])]
        # The same numbers, bit for bit: one function computes them.
        assert rec["t_s"] == p.t_s and rec["speedup"] == p.speedup
        assert rec["efficiency_speedup"] == p.eff_speedup
        # The report's n₀-scaled speedup is a differently named quantity.
        assert p.speedup is not None and rec["speedup_linear_to_n0"] == pytest.approx(n0 * p.speedup)
    native = {p.vcpus: p.speedup for c in curves if c.scenario == "native" for p in c.points}
    t2 = (1.01 + 1.02) / 2
    assert native[2] == 1.0 and native[4] == pytest.approx(t2 / (0.55 * 2.03 / 2))
    assert scaling.relative_speedup(2.0, 0.5) == 4.0 and scaling.speedup_linear_to_n0(2, 2.0, 0.5) == 8.0


def test_efficiency_based_speedup_is_the_simulators() -> None:
    # Means of the simulator's eff_speedup (a result's metrics or a stored column), never a
    # formula of its own: a run without it has none.
    curves = scaling.speedup_curves(RESULTS)
    oc = {p.vcpus: p.eff_speedup for c in curves if c.scenario == "OC" for p in c.points}
    assert oc == {2: pytest.approx(1.7), 4: pytest.approx(3.1), 8: None}
    assert scaling.eff_speedup({"eff_speedup": 2.5}) == 2.5
    assert scaling.eff_speedup({"metrics": {"eff_speedup": 1.5}, "eff_speedup": 9.0}) == 1.5
    assert scaling.eff_speedup({"metrics": {}}) is None


def test_efficiency_based_speedup_matches_dis_natively() -> None:
    # DIS ch.4: Speedup_PM = N − (time idling or busy-waiting) / execution time, i.e. the busy
    # time less busy-waiting over the run time, for a native run's one instance.
    plan = _vcpulab.Plan(
        '[experiment]\nworkloads = ["spinbarrier"]\nscenarios = ["native"]\nvcpus = [4]\nseeds = [1]\n',
        "<test>",
        ["workloads.spinbarrier.params.steps=20"],
    )
    import json

    r = json.loads(plan.run_cell(0))
    i = r["run"]["instances"][0]
    busy_wait = i["spin_ns"] + i["tlb_wait_ns"]
    idle = 4 * i["finish_ns"] - i["busy_ns"]
    dis = 4 - (idle + busy_wait) / i["finish_ns"]
    assert busy_wait > 0
    assert r["metrics"]["eff_speedup"] == pytest.approx(dis, rel=1e-9)


# --- scalability type -----------------------------------------------------------------------------


def test_one_scalability_type_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    th = analysis.Thresholds()
    for par, sync, cpus in itertools.product((0.0, 2.99, 3.0, 3.01, 4.0), (0.0, 41.66, 1000 / 24, 41.67), (4,)):
        assert analysis.scalability_type(par, sync, cpus, th) == _vcpulab.scalability_type(par, sync, cpus)
    # Cut-offs inclusive: 75 % of 4 CPUs = 3 running threads; one switch per 24 ms slice.
    assert analysis.scalability_type(3.0, 1000 / 24, 4, th) == 3
    assert analysis.scalability_type(2.99, 1000 / 24 - 0.01, 4, th) == 4
    assert analysis.scalability_type(None, 1.0, 4, th) is None
    other = analysis.Thresholds(high_parallelism=0.5, slice_ms=10.0)
    assert analysis.scalability_type(2.0, 99.0, 4, other) == _vcpulab.scalability_type(2.0, 99.0, 4, 0.5, 10.0) == 1
    # analysis has no rule of its own: it asks the simulator's.
    seen: list[tuple[Any, ...]] = []

    def rule(*args: Any) -> int:
        seen.append(args)
        return 7

    monkeypatch.setattr(analysis, "_scalability_type", rule)
    assert analysis.scalability_type(1.0, 2.0, 4, th) == 7 and seen == [(1.0, 2.0, 4, 0.75, 24.0)]


def test_characterize_sim_and_analysis_agree() -> None:
    import json

    c = json.loads(_vcpulab.characterize("barrier", 4, 1, 24_000_000, ["workloads.barrier.params.steps=50"]))
    th = analysis.Thresholds()
    assert analysis.scalability_type(c["parallelism"], c["sync_per_thread_s"], 4, th) == c["scalability_type"]


# --- the mitigation catalogue ------------------------------------------------------------------------


def test_catalogue_has_no_duplicate_transforms() -> None:
    cat = mitigations.CATALOGUE
    assert len({m.id for m in cat}) == len(cat) and len({m.name for m in cat}) == len(cat)
    for a, b in itertools.combinations(cat, 2):
        assert not set(a.transforms()) & set(b.transforms()), (a.id, b.id)
        assert a.transforms() != () and b.transforms() != ()
    groups = {g.name for g in diagnose.GROUPS}
    assert all(set(m.causes) <= groups for m in cat), [m.causes for m in cat if not set(m.causes) <= groups]
    assert all(m.model for m in cat)


def test_every_command_uses_the_one_catalogue() -> None:
    assert diagnose.CATALOGUE is mitigations.CATALOGUE
    assert {m.id for m in mitigate.CATALOGUE} == {"malloc-trim", "spin-then-block", "omp-passive"}
    assert all(m.entry is mitigations.by_id(m.id) for m in mitigate.CATALOGUE)
    assert set(predict.EVIDENCE) <= {m.id for m in mitigations.CATALOGUE if m.replay is not None}
    # The simulated equivalent `mitigate` replays is the entry's replay transform, the one
    # `predict` uses.
    trim = mitigations.by_id("malloc-trim")
    spin = mitigations.by_id("spin-then-block")
    assert mitigate.Mitigation(trim, lambda b, m: None).simulated == trim.replay_overrides(predict.WORKLOAD)
    assert spin.replay_overrides("app") == ('workloads.app.spinlocks="spin-then-block"',)
    assert spin.spec_overrides("lock") == ('workloads.lock.transform.spin="spin_then_block"',)
    assert mitigations.by_id("pv-send-ipi").causes == (mitigations.TLB, mitigations.IPIS)


def test_profile_transforms_are_valid_overrides() -> None:
    spec = '[experiment]\nworkloads = ["lock"]\nscenarios = ["native", "UC"]\nvcpus = [2]\nseeds = [1]\n'
    for m in mitigations.CATALOGUE:
        overrides = m.spec_overrides("lock")
        if overrides is not None:
            _vcpulab.Plan(spec, "<test>", list(overrides))  # raises SpecError if one is wrong


# --- measured vs simulated (vcpulab mitigate) --------------------------------------------------------


def _measurement(wall: float) -> Measurement:
    counters: dict[str, int | str] = {"syscalls:sys_enter_munmap": 0, "syscalls:sys_enter_madvise": 0}
    return Measurement(["p"], 2, 0, wall, wall, 0.0, 1, 1, 1000, counters, 0)


def _runs(name: str, walls: list[float]) -> mitigate.Runs:
    r = mitigate.Runs(name, {})
    r.measurements = [_measurement(w) for w in walls]
    r.outputs = {"same"}
    return r


def test_agreement_of_intervals() -> None:
    assert mitigate.agrees((1.5, 2.5), 2.0) is True
    assert mitigate.agrees((1.5, 2.5), 1.12) is False
    assert mitigate.agrees((1.5, 2.5), 1.12, (1.0, 1.6)) is True  # the intervals overlap
    assert mitigate.agrees(None, 1.12) is None  # one run: no interval, no verdict
    assert mitigate.agrees((1.5, 2.5), None) is None


def _comparisons() -> tuple[mitigate.Runs, list[mitigate.Comparison]]:
    base = _runs("baseline", [5.0, 5.2, 4.8, 5.0])
    trim = next(m for m in mitigate.CATALOGUE if m.id == "malloc-trim")
    spin = next(m for m in mitigate.CATALOGUE if m.id == "spin-then-block")
    far = mitigate.compare(base, trim, "churn", _runs("malloc-trim", [0.030, 0.031, 0.029, 0.030]))
    far.predicted = 1.12
    near = mitigate.compare(base, spin, "spin", _runs("spin-then-block", [2.5, 2.6, 2.4, 2.5]))
    near.predicted = 2.0
    return base, [far, near]


def test_disagreement_is_said_with_what_the_model_leaves_out() -> None:
    base, (far, near) = _comparisons()
    # Paired by round: the geometric mean of the per-round ratios.
    ratios = [b / m for b, m in zip([5.0, 5.2, 4.8, 5.0], [0.030, 0.031, 0.029, 0.030])]
    assert far.speedup == pytest.approx(math.prod(ratios) ** 0.25) and far.agrees is False
    assert far.remark is not None
    assert "outside the measured 95 % CI" in far.remark and "gains more here" in far.remark
    assert "page faults" in far.remark and "kernel time" in far.remark
    assert far.mitigation.entry.model in far.remark
    assert near.agrees is True and near.remark is None
    doc = commands.mitigate_json(["p"], base, [far, near])
    a, b = doc["mitigations"]
    assert a["simulation_agrees"] is False and a["remark"] == far.remark
    assert b["simulation_agrees"] is True and b["remark"] is None
    from rich.console import Console

    console = Console(width=160, record=True)
    console.print(commands.mitigation_table(["p"], base, [far, near]))
    text = console.export_text()
    assert "1.12× (disagrees)" in text and "2.00×" in text and "2.00× (disagrees)" not in text
    assert "outside the measured 95 % CI" in text and "page faults" in text
