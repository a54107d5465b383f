"""The statistics and the stopping rule of `vcpulab mitigate` (pure functions, no programs run)."""

from __future__ import annotations

import math

import pytest

from vcpulab.bridge.launch import TRIM_MADVISE, Measurement
from vcpulab.bridge.mitigate import CATALOGUE, Binary, Mitigation, Policy, Runs, applicable, compare


def measurement(wall: float, madvise: int | None = 0) -> Measurement:
    """A run whose madvise calls all drop pages (``madvise`` of them; None: not countable)."""
    counters: dict[str, int | str] = {"syscalls:sys_enter_munmap": 0}
    counters["syscalls:sys_enter_madvise"] = madvise if madvise is not None else "unavailable (no tracefs)"
    counters[TRIM_MADVISE] = counters["syscalls:sys_enter_madvise"]
    return Measurement(["p"], 2, 0, wall, wall, 0.0, 1, 1, 1000, counters, 0)


def runs(name: str, walls: list[float], outputs: set[str] | None = None) -> Runs:
    r = Runs(name, {})
    r.measurements = [measurement(w) for w in walls]
    r.outputs = outputs if outputs is not None else {"same"}
    return r


def test_speedup_and_its_interval_are_paired_by_round() -> None:
    base = runs("baseline", [2.0, 2.1, 1.9, 2.0])
    fast = runs("m", [0.5, 0.52, 0.48, 0.5])
    c = compare(base, CATALOGUE[0], "why", fast)
    assert c.speedup == pytest.approx(4.0, rel=1e-3)
    assert c.speedup_ci is not None
    lo, hi = c.speedup_ci
    assert lo < 4.0 < hi and lo > 3.9 and hi < 4.1
    assert c.same_output is True
    # A slower variant: speedup below 1, interval below 1.
    slow = compare(base, CATALOGUE[0], "why", runs("m", [4.0, 4.1, 3.9, 4.0]))
    assert slow.speedup == pytest.approx(0.5, rel=1e-3) and slow.speedup_ci is not None and slow.speedup_ci[1] < 1
    # Pairing removes what the rounds share: the machine slowing down for both runs of a round
    # widens an unpaired interval, not the paired one.
    drift = runs("baseline", [1.0, 2.0, 3.0, 4.0])
    c = compare(drift, CATALOGUE[0], "why", runs("m", [0.5, 1.0, 1.5, 2.0]))
    assert c.speedup == pytest.approx(2.0) and c.speedup_ci == pytest.approx((2.0, 2.0))
    with pytest.raises(ValueError, match="not paired"):
        compare(base, CATALOGUE[0], "why", runs("m", [1.0]))


def test_rounds_stop_when_every_paired_interval_is_narrow() -> None:
    p = Policy(min_runs=3, max_runs=6, precision=0.05, budget_s=100)
    base = runs("baseline", [1.0, 1.5, 0.8])
    tight = runs("a", [0.5, 0.75, 0.4])  # exactly half each round: done at the minimum
    loose = runs("b", [0.5, 1.5, 0.2])
    assert p.rounds_done(base, [tight], 3)
    assert not p.rounds_done(base, [tight, loose], 3)
    assert not p.rounds_done(runs("baseline", [1.0, 1.0]), [runs("a", [0.5, 0.5])], 2)  # below the minimum
    assert p.rounds_done(base, [tight, loose], 401)  # over the budget of 4 variants (baseline included)
    assert p.rounds_done(runs("baseline", [1.0] * 6), [runs("b", [0.5, 1.5, 0.2, 0.5, 1.5, 0.2])], 9)  # the maximum
    # Without variants, the baseline's own interval decides, as for one variant alone.
    assert p.rounds_done(runs("baseline", [1.0, 1.01, 0.99]), [], 3)


def test_output_comparison_needs_a_stable_baseline() -> None:
    stable = runs("baseline", [1.0, 1.0], {"a"})
    assert compare(stable, CATALOGUE[0], "", runs("m", [1.0, 1.0], {"b"})).same_output is False
    varying = runs("baseline", [1.0, 1.0], {"a", "b"})
    assert compare(varying, CATALOGUE[0], "", runs("m", [1.0, 1.0], {"a"})).same_output is None


def test_one_run_has_no_interval() -> None:
    c = compare(runs("b", [1.0]), CATALOGUE[0], "", runs("m", [0.5]))
    assert c.speedup == pytest.approx(2.0) and c.speedup_ci is None


def test_stopping_rule() -> None:
    p = Policy(min_runs=3, max_runs=6, precision=0.05, budget_s=100)
    assert not p.done(runs("b", [1.0, 1.0]), 1)  # below the minimum
    assert p.done(runs("b", [1.0, 1.01, 0.99]), 3)  # tight: done at the minimum
    assert not p.done(runs("b", [1.0, 2.0, 0.5]), 3)  # noisy: go on
    assert p.done(runs("b", [1.0, 2.0, 0.5, 1, 2, 0.5]), 9)  # the maximum
    assert p.done(runs("b", [30.0, 60.0]), 101)  # over budget with two runs
    assert not p.done(runs("b", [99.0]), 101)  # one run is not enough unless far over budget
    assert p.done(runs("b", [250.0]), 250)


def test_which_mitigations_apply() -> None:
    plain = Binary("/bin/x", True, frozenset({"libc.so.6"}), frozenset({"malloc", "free"}))
    spin = Binary("/bin/y", True, frozenset({"libc.so.6"}), frozenset({"pthread_spin_lock", "pthread_spin_unlock"}))
    omp = Binary("/bin/z", True, frozenset({"libgomp.so.1", "libc.so.6"}), frozenset())
    churn, quiet = measurement(1.0, madvise=100_000), measurement(1.0, madvise=500)
    names = lambda chosen: [m.name for m, _, applies in chosen if applies]  # noqa: E731
    assert names(applicable(plain, churn, False)) == ["malloc-trim"]
    assert names(applicable(plain, quiet, False)) == []
    assert names(applicable(spin, quiet, False)) == ["spin-then-block"]
    assert names(applicable(omp, quiet, False)) == ["omp-passive"]
    # On request every one is run; those that do not apply say why not, and are not applicable.
    everything = applicable(plain, quiet, True)
    assert [m.name for m, _, _ in everything] == [m.name for m in CATALOGUE] and names(everything) == []
    why = {m.name: reason for m, reason, _ in everything}
    assert "too few" in why["malloc-trim"] and "no pthread_spin_lock" in why["spin-then-block"]
    # Counts this machine cannot take: the allocator tunables are tried rather than ruled out.
    unknown = applicable(plain, measurement(1.0, madvise=None), False)
    assert names(unknown) == ["malloc-trim"] and "unavailable" in unknown[0][1]
    # Only advice that drops pages counts as trimming: MADV_WILLNEED on a mapped input does not.
    willneed = measurement(1.0, madvise=0)
    willneed.counters["syscalls:sys_enter_madvise"] = 100_000
    assert names(applicable(plain, willneed, False)) == []
    assert all(isinstance(m, Mitigation) and m.cause for m in CATALOGUE)
    assert not math.isnan(measurement(1.0).cpu_s)


def test_the_parallelism_percentile_never_exceeds_the_cpus() -> None:
    """Sampling jitter can make an interval's Δ run time / Δt exceed the CPUs given (issue 26:
    a p90 of 2.13 on 2 CPUs); no interval counts more threads on a CPU than there are CPUs."""
    from vcpulab.bridge.characterize import characterize
    from vcpulab.bridge.launch import Sample

    m = measurement(1.0)
    m.samples = [Sample(t_s=0.01 * i, threads=3, running=2.13 if i % 2 else 1.5, waiting=0.0) for i in range(20)]
    c = characterize(m)
    assert c.parallelism_p90 == pytest.approx(float(m.cpus)) and m.cpus == 2
