"""The statistics and verdicts of `vcpulab reproduce` (vcpulab.reproduce.verdict): each rule,
each outcome, CI edge cases, one seed, relative_to pairing; property tests with hypothesis."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vcpulab.reproduce import verdict as v
from vcpulab.reproduce.verdict import (
    NO_PUBLISHED,
    NOT_REPRODUCED,
    NOT_RUN,
    PARTLY,
    REPRODUCED,
    Estimate,
    estimate,
    judge,
    seed_values,
    side_verdict,
    t975,
    value_verdict,
)


def cell(seed: int, value: float | None, metric: str = "m", **fields: Any) -> dict[str, Any]:
    base = {"workload": "w", "scenario": "UC", "vcpus": 2, "threads": 2, "seed": seed, "variant": ""}
    base.update(fields)
    base["metrics"] = {} if value is None else {metric: value}
    return base


def entry(**kw: Any) -> dict[str, Any]:
    e: dict[str, Any] = {"metric": "m", "where": {}, "rule": "none", "aggregate": "mean", "compare": "ratio"}
    e.update(kw)
    return e


# --- statistics -----------------------------------------------------------------------------


def test_t_quantiles_match_scipy() -> None:
    from scipy.stats import t

    for dof in [*range(1, 40), 50, 100, 1000, 10**6]:
        assert t975(dof) == pytest.approx(float(t.ppf(0.975, dof)), abs=2e-5)
    with pytest.raises(ValueError):
        t975(0)


def test_estimate_edges() -> None:
    assert estimate([]) == Estimate(0, None)
    assert estimate([2.0]) == Estimate(1, 2.0)  # one seed: no CI
    same = estimate([1.5, 1.5, 1.5])
    assert (same.mean, same.low, same.high) == (1.5, 1.5, 1.5)  # no spread: a zero-width CI
    e = estimate([1.0, 2.0, 3.0])
    half = 4.302653 * 1.0 / math.sqrt(3)
    assert e.mean == 2.0 and e.low == pytest.approx(2.0 - half) and e.high == pytest.approx(2.0 + half)


# --- value ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([1.00, 1.01, 0.99], REPRODUCED),  # CI inside [0.9, 1.1]
        ([1.50, 1.51, 1.49], NOT_REPRODUCED),  # CI above the band
        ([0.50, 0.51, 0.49], NOT_REPRODUCED),  # CI below the band
        ([1.00, 1.20, 0.90], PARTLY),  # CI overlaps the band's edge
        ([1.00], PARTLY),  # one seed, in the band: never reproduced
        ([1.50], NOT_REPRODUCED),  # one seed, out of it
        ([], NOT_RUN),
    ],
)
def test_value_rule(values: list[float], expected: str) -> None:
    results = [cell(s, x) for s, x in enumerate(values, 1)]
    j = judge(entry(rule="value", value=1.0, tolerance={"absolute": 0.1}), results)
    assert j.verdict == expected
    assert j.band == (0.9, 1.1)


def test_relative_tolerance_and_band_edges() -> None:
    assert v.band(-2.0, {"relative": 0.25}) == (-2.5, -1.5)
    assert value_verdict(Estimate(2, 1.0, 0.9, 1.1), 0.9, 1.1) == REPRODUCED  # touching the edges is inside
    assert value_verdict(Estimate(2, 1.2, 1.1, 1.3), 0.9, 1.1) == PARTLY  # touching from outside overlaps


# --- sign -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "sign", "threshold", "expected"),
    [
        ([2.0, 2.1, 1.9], "positive", None, REPRODUCED),
        ([-2.0, -2.1, -1.9], "positive", None, NOT_REPRODUCED),
        ([-2.0, -2.1, -1.9], "negative", None, REPRODUCED),
        ([0.5, -0.3, 0.4], "positive", None, PARTLY),  # CI crosses 0, mean right
        ([-0.5, 0.3, -0.4], "positive", None, NOT_REPRODUCED),  # CI crosses 0, mean wrong
        ([1.6, 1.7, 1.65], "positive", 1.5, REPRODUCED),  # "more than 150 %"
        ([1.2, 1.3, 1.25], "positive", 1.5, NOT_REPRODUCED),
        ([0.2], "positive", None, PARTLY),  # one seed
        ([-0.2], "positive", None, NOT_REPRODUCED),
    ],
)
def test_sign_rule(values: list[float], sign: str, threshold: float | None, expected: str) -> None:
    results = [cell(s, x) for s, x in enumerate(values, 1)]
    assert judge(entry(rule="sign", sign=sign, value=threshold), results).verdict == expected


def test_aggregate_max_per_seed() -> None:
    # Two workloads per seed: max takes the larger one of each seed (the shape rules' per-seed
    # number; the value and sign rules take the extreme of the cells' means, below).
    results = [cell(s, x, workload=w) for s in (1, 2) for w, x in (("a", 0.1), ("b", 1.6 + s / 100))]
    got = seed_values(results, "m", {}, aggregate="max")
    assert got == {1: pytest.approx(1.61), 2: pytest.approx(1.62)}
    assert judge(entry(rule="sign", sign="positive", value=1.5, aggregate="max"), results).verdict == REPRODUCED
    assert seed_values(results, "m", {}, aggregate="sum")[1] == pytest.approx(1.71)
    assert seed_values(results, "m", {}, aggregate="min")[1] == pytest.approx(0.1)


def test_max_is_the_largest_cell_mean_not_the_mean_of_per_seed_maxima() -> None:
    # Two cells of the same mean 0.5 whose seeds disagree: every seed's maximum is 1.0, but
    # no cell averages more than 0.5 (the publications' maximum is over per-cell averages).
    results = [cell(1, 0.0, vcpus=4), cell(2, 1.0, vcpus=4), cell(1, 1.0, vcpus=8), cell(2, 0.0, vcpus=8)]
    assert seed_values(results, "m", {}, aggregate="max") == {1: 1.0, 2: 1.0}
    j = judge(entry(rule="sign", sign="positive", value=0.8, aggregate="max"), results)
    assert j.simulated.mean == pytest.approx(0.5)
    assert j.verdict == NOT_REPRODUCED  # the CI contains 0.8 but the mean is below it
    # The CI: from the largest lower bound to the largest upper bound of the cells' CIs.
    a, b = estimate([0.0, 1.0]), estimate([1.0, 0.0])
    assert (j.simulated.low, j.simulated.high) == (pytest.approx(max(a.low, b.low)), pytest.approx(max(a.high, b.high)))


def test_extreme_estimate_bounds_and_edges() -> None:
    cells = {("a",): {1: 1.0, 2: 1.2, 3: 1.1}, ("b",): {1: 2.0, 2: 2.4, 3: 2.2}, ("c",): {1: 0.5, 2: 0.5, 3: 0.5}}
    hi = v.extreme_estimate(cells, "max")
    b = estimate([2.0, 2.4, 2.2])
    assert (hi.n, hi.mean, hi.low, hi.high) == (3, pytest.approx(2.2), pytest.approx(b.low), pytest.approx(b.high))
    lo = v.extreme_estimate(cells, "min")
    assert (lo.mean, lo.low, lo.high) == (0.5, 0.5, 0.5)  # the zero-width cell is the smallest
    # One cell with a single seed: no CI for the extreme; no cell at all: nothing.
    one = v.extreme_estimate({("a",): {1: 1.0, 2: 3.0}, ("b",): {1: 5.0}}, "max")
    assert (one.n, one.mean, one.has_ci) == (1, 5.0, False)
    assert v.extreme_estimate({}, "max") == Estimate(0, None)


def test_min_relative_to_works_per_cell() -> None:
    # Ratios to the baseline are formed seed by seed, then averaged per cell, then the minimum.
    results = [
        *(cell(s, 2.0, scenario="native", vcpus=n) for s in (1, 2) for n in (4, 8)),
        cell(1, 1.0, vcpus=4), cell(2, 1.2, vcpus=4),  # ratios 0.5, 0.6
        cell(1, 1.8, vcpus=8), cell(2, 1.0, vcpus=8),  # ratios 0.9, 0.5
    ]  # fmt: skip
    j = judge(
        entry(rule="none", where={"scenario": "UC"}, relative_to={"scenario": "native"}, aggregate="min"), results
    )
    assert j.simulated.mean == pytest.approx(0.55)  # cell means 0.55 and 0.7; per-seed minima would give 0.5


@given(
    st.lists(
        st.lists(st.floats(min_value=-10, max_value=10, allow_nan=False), min_size=3, max_size=3),
        min_size=1,
        max_size=6,
    )
)
def test_extreme_mean_never_exceeds_the_mean_of_per_seed_maxima(rows: list[list[float]]) -> None:
    # rows[c][s]: cell c, seed s. max over cells of means <= mean over seeds of max over cells,
    # and the estimate's CI contains its mean.
    cells = {(str(c),): {s: x for s, x in enumerate(row, 1)} for c, row in enumerate(rows)}
    e = v.extreme_estimate(cells, "max")
    per_seed_max = [max(row[s] for row in rows) for s in range(3)]
    assert e.mean is not None and e.low is not None and e.high is not None
    assert e.mean <= sum(per_seed_max) / 3 + 1e-9
    assert e.low - 1e-9 <= e.mean <= e.high + 1e-9


# --- relative_to ----------------------------------------------------------------------------


def test_relative_to_pairs_seed_workload_and_vcpus() -> None:
    results = []
    for seed in (1, 2):
        for w, base in (("a", 1.0), ("b", 4.0)):
            results.append(cell(seed, base, workload=w, scenario="native"))
            results.append(cell(seed, base * (1.5 + seed / 10), workload=w, scenario="UC"))
    # Each UC cell over ITS native cell (same seed and workload), then the mean per seed.
    got = seed_values(results, "m", {"scenario": "UC"}, relative_to={"scenario": "native"})
    assert got == {1: pytest.approx(1.6), 2: pytest.approx(1.7)}
    change = seed_values(results, "m", {"scenario": "UC"}, relative_to={"scenario": "native"}, compare="change")
    assert change[1] == pytest.approx(0.6)
    diff = seed_values(
        results, "m", {"scenario": "UC", "workload": "b"}, relative_to={"scenario": "native"}, compare="difference"
    )
    assert diff == {1: pytest.approx(4.0 * 0.6), 2: pytest.approx(4.0 * 0.7)}


def test_relative_to_fixing_a_field_does_not_pair_on_it() -> None:
    results = [cell(1, 10.0, vcpus=1), cell(1, 8.0, vcpus=2), cell(1, 5.0, vcpus=4)]
    got = seed_values(results, "m", {"vcpus": 4}, relative_to={"vcpus": 1})
    assert got == {1: pytest.approx(0.5)}


def test_relative_to_without_baseline_or_zero_baseline_skips_the_seed() -> None:
    natives = [cell(2, 0.0, scenario="native"), cell(3, 1.0, scenario="native")]
    results = [cell(1, 2.0), cell(2, 2.0), cell(3, 2.0), *natives]
    got = seed_values(results, "m", {"scenario": "UC"}, relative_to={"scenario": "native"})
    assert got == {3: 2.0}  # seed 1 has no baseline, seed 2 a zero one


def test_cells_without_the_metric_are_not_counted() -> None:
    results = [cell(1, 1.0), cell(2, None)]
    assert seed_values(results, "m", {}) == {1: 1.0}
    assert judge(entry(rule="none"), [cell(1, None)]).simulated.n == 0


# --- order, trend, peak ---------------------------------------------------------------------


def _series(points: dict[int, list[float]], over: str = "vcpus") -> list[dict[str, Any]]:
    return [cell(seed, x, **{over: p}) for p, xs in points.items() for seed, x in enumerate(xs, 1)]


def test_trend_increasing_each_outcome() -> None:
    up = _series({1: [1.0, 1.1, 0.9], 2: [2.0, 2.1, 1.9], 4: [3.0, 3.1, 2.9]})
    e = entry(rule="trend", over="vcpus", direction="increasing")
    j = judge(e, up)
    assert j.verdict == REPRODUCED
    assert [p.label for p in j.points] == ["vcpus=1", "vcpus=2", "vcpus=4"]
    assert len(j.steps) == 2
    assert judge({**e, "direction": "decreasing"}, up).verdict == NOT_REPRODUCED
    # Paired by seed: the points' own CIs overlap, but every seed increases: reproduced.
    paired = _series({1: [1.0, 2.0, 3.0], 2: [1.1, 2.1, 3.1]})
    assert judge(e, paired).verdict == REPRODUCED
    # Means in order but one difference's CI crosses 0: partly.
    noisy = _series({1: [1.0, 1.0, 1.0], 2: [1.5, 0.8, 1.3]})
    assert judge(e, noisy).verdict == PARTLY
    # One point: nothing to judge.
    assert judge(e, _series({1: [1.0, 2.0]})).verdict == NOT_RUN


def test_trend_over_a_variant_key_keeps_numeric_order() -> None:
    results = [
        cell(s, x, variant=f"vm.ple.window_cycles={w}")
        for w, x in ((4096, 3.0), (512, 1.0), (16384, 5.0))
        for s in (1, 2)
    ]
    j = judge(entry(rule="trend", over="vm.ple.window_cycles"), results)
    assert [p.label for p in j.points] == [
        "vm.ple.window_cycles=512",
        "vm.ple.window_cycles=4096",
        "vm.ple.window_cycles=16384",
    ]
    assert j.verdict == REPRODUCED  # zero spread: zero-width CIs on the right side


def test_order_rule_merges_selectors_over_where() -> None:
    results = [cell(s, x, scenario=sc, workload=w) for s in (1, 2, 3) for sc, x in (("UC", 1.0 + s / 50), ("OC", 2.0))
               for w in ("a", "b")]  # fmt: skip
    e = entry(rule="order", where={"workload": "a"}, order=[{"scenario": "UC"}, {"scenario": "OC"}])
    assert judge(e, results).verdict == REPRODUCED
    assert judge({**e, "direction": "decreasing"}, results).verdict == NOT_REPRODUCED
    missing = {**e, "order": [{"scenario": "UC"}, {"scenario": "OC2"}]}
    assert judge(missing, results).verdict == NOT_RUN


def test_peak_rule() -> None:
    results = _series({8: [1.0, 1.1], 16: [3.0, 3.1], 32: [2.0, 2.2]})
    e = entry(rule="peak", over="vcpus", at=16)
    j = judge(e, results)
    assert j.verdict == REPRODUCED
    assert {(s.frm, s.to) for s in j.steps} == {("vcpus=8", "vcpus=16"), ("vcpus=32", "vcpus=16")}
    assert judge({**e, "at": 32}, results).verdict == NOT_REPRODUCED
    absent = judge({**e, "at": 64}, results)
    assert absent.verdict == NOT_RUN and "64" in absent.note


def test_none_rule_shows_the_value() -> None:
    j = judge(entry(rule="none", value=3.0), [cell(1, 1.0), cell(2, 2.0)])
    assert j.verdict == NO_PUBLISHED and j.simulated.mean == 1.5


def test_published_and_quantity_texts() -> None:
    assert v.published_text(entry(rule="value", value=1.17, tolerance={"relative": 0.2})) == "1.17 ± 20%"
    assert v.published_text(entry(rule="value", value=1.0, tolerance={"absolute": 0.05})) == "1 ± 0.05"
    assert v.published_text(entry(rule="sign", sign="positive", value=1.5)) == "> 1.5"
    assert v.published_text(entry(rule="sign", sign="negative")) == "< 0"
    assert v.published_text(entry(rule="trend", over="vcpus", direction="increasing")) == "increasing over vcpus"
    assert v.published_text(entry(rule="peak", over="vcpus", at=32)) == "peak at vcpus=32"
    assert v.published_text(entry(rule="order", order=[{"vcpus": 1}, {"vcpus": 2}])) == "vcpus=1 < vcpus=2"
    assert v.published_text(entry()) == "—"
    assert v.quantity_text(entry(relative_to={"scenario": "native"})) == "m / (scenario=native)"
    assert v.quantity_text(entry(aggregate="max")) == "max m"


# --- properties -----------------------------------------------------------------------------

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
samples = st.lists(finite, min_size=2, max_size=12)


@given(samples, finite, st.floats(min_value=1e-3, max_value=1e6))
def test_a_ci_inside_the_band_is_never_not_reproduced(values: list[float], centre: float, tol: float) -> None:
    est = estimate(values)
    assert est.low is not None and est.high is not None
    lo, hi = centre - tol, centre + tol
    got = value_verdict(est, lo, hi)
    if lo <= est.low and est.high <= hi:
        assert got == REPRODUCED
    if got == NOT_REPRODUCED:
        assert est.high < lo or est.low > hi
    if est.mean is not None and lo <= est.mean <= hi:
        assert got != NOT_REPRODUCED


@given(samples, finite)
def test_swapping_the_side_flips_reproduced_and_not(values: list[float], threshold: float) -> None:
    est = estimate(values)
    up, down = side_verdict(est, threshold, True), side_verdict(est, threshold, False)
    if up == REPRODUCED:
        assert down == NOT_REPRODUCED
    if down == REPRODUCED:
        assert up == NOT_REPRODUCED


@given(st.lists(st.lists(finite, min_size=3, max_size=3), min_size=2, max_size=5))
def test_swapping_the_direction_flips_reproduced_and_not(points: list[list[float]]) -> None:
    results = _series({i + 1: xs for i, xs in enumerate(points)})
    e = entry(rule="trend", over="vcpus")
    up = judge({**e, "direction": "increasing"}, results).verdict
    down = judge({**e, "direction": "decreasing"}, results).verdict
    if up == REPRODUCED:
        assert down == NOT_REPRODUCED
    if down == REPRODUCED:
        assert up == NOT_REPRODUCED


@given(st.lists(finite, min_size=1, max_size=1), finite)
def test_one_seed_is_never_reproduced(values: list[float], centre: float) -> None:
    results = [cell(1, values[0])]
    for e in (
        entry(rule="value", value=centre, tolerance={"absolute": 1.0}),
        entry(rule="sign", sign="positive", value=centre),
        entry(rule="sign", sign="negative", value=centre),
    ):
        assert judge(e, results).verdict in (PARTLY, NOT_REPRODUCED)


@given(samples)
def test_the_ci_contains_the_mean(values: list[float]) -> None:
    est = estimate(values)
    assert est.low is not None and est.high is not None and est.mean is not None
    assert est.low <= est.mean + 1e-9 * max(1.0, abs(est.mean))
    assert est.mean <= est.high + 1e-9 * max(1.0, abs(est.mean))
