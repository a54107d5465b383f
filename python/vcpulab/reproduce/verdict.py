"""Statistics and verdicts of the reproduction scoreboard: pure functions of result objects.

For one ``[[published]]`` entry of an experiment (the dict ``Plan.info()["published"]`` holds):

1. **One number per seed.** The cells matching a selector (``where``, merged with an ``order``
   selector or a point of ``over``) are grouped by seed. With ``relative_to``, each cell is first
   paired with its baseline cells: those matching ``where`` merged with ``relative_to``, of the
   same seed and, for each of workload, scenario and vcpus that the baseline selector does not
   fix, the same value; the cell's value becomes ``compare`` (ratio, change = ratio − 1, or
   difference) of its metric and the baselines' mean. The seed's values are then combined by
   ``aggregate`` (mean, max, min, sum; outside the shape rules max and min work per cell instead,
   see 2).
2. **Mean and 95 % CI over seeds**: Student t, half-width t(0.975, n − 1) · s / √n, with
   s the sample standard deviation (:func:`t975`: a table up to 30 degrees of freedom, the
   Cornish–Fisher expansion beyond; not scipy, whose import alone takes seconds). With one seed
   there is no CI. **``max`` / ``min``** (the largest or smallest over programs, sizes or
   scenarios, as the publications read it off their per-cell averages) is the extreme of the
   cells' means, not the mean of per-seed extremes: a per-seed maximum over noisy cells
   overstates the largest mean (E[max] ≥ max E). Its CI runs from the extreme of the cells'
   lower bounds to the extreme of their upper bounds, which holds the extreme mean whenever
   every cell's CI holds its own (:func:`extreme_estimate`).
3. **Verdict**, by ``rule`` (docs/reproduce.md):

   - ``value``: band [v − tol, v + tol]; reproduced when the CI lies inside it, not reproduced
     when the CI is disjoint from it, partly when they overlap;
   - ``sign``: the threshold is ``value`` (default 0); reproduced when the CI lies on the stated
     side, not reproduced when it lies on the other; when it contains the threshold, partly if
     the mean is on the stated side, else not reproduced;
   - ``order`` / ``trend`` / ``peak``: the per-seed differences of consecutive points (paired by
     seed; for ``peak``, the ``at`` point minus every other point); reproduced when every
     difference's CI is on the stated side, not reproduced when some mean is not, else partly;
   - ``none``: "no published value".

   With one seed (no CI) the verdict is at best "partly": the mean decides between partly and
   not reproduced. With no value at all (no cell matched, or none measured the metric) the
   verdict is "not run".
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..report.published import cell_matches, metric_value, shown, where_text

REPRODUCED = "reproduced"
PARTLY = "partly"
NOT_REPRODUCED = "not reproduced"
NO_PUBLISHED = "no published value"
NOT_EXPRESSIBLE = "not expressible"
NOT_RUN = "not run"
VERDICTS = (REPRODUCED, PARTLY, NOT_REPRODUCED, NOT_RUN, NO_PUBLISHED, NOT_EXPRESSIBLE)
"""Every verdict, in the order the totals list them."""

PAIRED_FIELDS = ("workload", "scenario", "vcpus")
"""Cell fields a cell and its ``relative_to`` baseline share unless the baseline selector fixes them."""


# --- statistics -----------------------------------------------------------------------------

# Student t quantiles t(0.975, ν) for ν = 1 … 30 (scipy.stats.t.ppf, six decimals).
_T975 = (
    12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004, 2.262157, 2.228139,
    2.200985, 2.178813, 2.160369, 2.144787, 2.131450, 2.119905, 2.109816, 2.100922, 2.093024, 2.085963,
    2.079614, 2.073873, 2.068658, 2.063899, 2.059539, 2.055529, 2.051831, 2.048407, 2.045230, 2.042272,
)  # fmt: skip


def t975(dof: int) -> float:
    """The two-sided 95 % Student t quantile t(0.975, ``dof``): the table up to 30 degrees of
    freedom, then the Cornish–Fisher expansion around the normal quantile (three terms; off by
    less than 10⁻⁵ from 31 on, and tending to 1.96)."""
    if dof < 1:
        raise ValueError(f"a t quantile needs at least one degree of freedom (got {dof})")
    if dof <= len(_T975):
        return _T975[dof - 1]
    z = statistics.NormalDist().inv_cdf(0.975)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    return z + g1 / dof + g2 / dof**2 + g3 / dof**3


@dataclass(frozen=True)
class Estimate:
    """The mean of per-seed values and its 95 % confidence interval (``None`` bounds with one
    value; ``mean`` ``None`` with none)."""

    n: int
    mean: float | None
    low: float | None = None
    high: float | None = None

    @property
    def has_ci(self) -> bool:
        return self.low is not None and self.high is not None

    def to_json(self) -> dict[str, Any]:
        return {"n": self.n, "mean": self.mean, "ci_low": self.low, "ci_high": self.high}


def estimate(values: Sequence[float]) -> Estimate:
    """Mean and 95 % Student-t CI of ``values`` (one per seed)."""
    n = len(values)
    if n == 0:
        return Estimate(0, None)
    mean = statistics.fmean(values)
    if n == 1:
        return Estimate(1, mean)
    half = t975(n - 1) * statistics.stdev(values) / math.sqrt(n)
    return Estimate(n, mean, mean - half, mean + half)


# --- per-seed values ------------------------------------------------------------------------

_AGGREGATES: dict[str, Callable[[Sequence[float]], float]] = {
    "mean": statistics.fmean,
    "max": max,
    "min": min,
    "sum": math.fsum,
}


def _relate(value: float, base: float, compare: str) -> float | None:
    if compare == "difference":
        return value - base
    if base == 0:
        return None
    ratio = value / base
    return ratio - 1.0 if compare == "change" else ratio


def _paired(cell: Mapping[str, Any], base: Mapping[str, Any], fixed: Mapping[str, Any]) -> bool:
    return all(f in fixed or shown(cell.get(f)) == shown(base.get(f)) for f in PAIRED_FIELDS)


def seed_values(
    results: Sequence[Mapping[str, Any]],
    metric: str,
    where: Mapping[str, Any],
    *,
    settings: Mapping[str, Any] | None = None,
    aggregate: str = "mean",
    relative_to: Mapping[str, Any] | None = None,
    compare: str = "ratio",
) -> dict[int, float]:
    """Seed → the one number of that seed for the cells ``where`` selects (see the module's
    docstring). Seeds whose cells lack the metric (or their baseline) are left out."""
    per_seed: dict[int, list[float]] = {}
    for _, seed, value in _cell_values(results, metric, where, settings, relative_to, compare):
        per_seed.setdefault(seed, []).append(value)
    return {s: _AGGREGATES[aggregate](vs) for s, vs in sorted(per_seed.items())}


CELL_KEY = ("workload", "scenario", "vcpus", "threads", "oc_vms", "variant")
"""The fields that tell one cell from another across seeds (the sweep's cell fields but the seed)."""


def _cell_values(
    results: Sequence[Mapping[str, Any]],
    metric: str,
    where: Mapping[str, Any],
    settings: Mapping[str, Any] | None,
    relative_to: Mapping[str, Any] | None,
    compare: str,
) -> Iterable[tuple[tuple[str, ...], int, float]]:
    """(cell key, seed, value) of every result ``where`` selects that has the metric (and, with
    ``relative_to``, a baseline), the value related to the baselines' mean."""
    base_where = {**where, **relative_to} if relative_to is not None else None
    bases = [r for r in results if cell_matches(r, base_where, settings)] if base_where is not None else []
    for r in results:
        if not cell_matches(r, where, settings):
            continue
        value = metric_value(r, metric)
        if value is None:
            continue
        seed = int(r["seed"])
        if base_where is not None:
            mine = [b for b in bases if int(b["seed"]) == seed and _paired(r, b, base_where)]
            base_values = [v for v in (metric_value(b, metric) for b in mine) if v is not None]
            if not base_values:
                continue
            related = _relate(value, statistics.fmean(base_values), compare)
            if related is None or not math.isfinite(related):
                continue
            value = related
        yield tuple("" if r.get(f) is None else shown(r.get(f)) for f in CELL_KEY), seed, value


def cell_seed_values(
    results: Sequence[Mapping[str, Any]],
    metric: str,
    where: Mapping[str, Any],
    *,
    settings: Mapping[str, Any] | None = None,
    relative_to: Mapping[str, Any] | None = None,
    compare: str = "ratio",
) -> dict[tuple[str, ...], dict[int, float]]:
    """Cell (its :data:`CELL_KEY` fields) → seed → value, for the cells ``where`` selects
    (related to ``relative_to``'s baselines as in :func:`seed_values`)."""
    out: dict[tuple[str, ...], dict[int, list[float]]] = {}
    for key, seed, value in _cell_values(results, metric, where, settings, relative_to, compare):
        out.setdefault(key, {}).setdefault(seed, []).append(value)
    return {k: {s: statistics.fmean(vs) for s, vs in sorted(seeds.items())} for k, seeds in out.items()}


def extreme_estimate(cells: Mapping[Any, Mapping[int, float]], aggregate: str) -> Estimate:
    """``max`` or ``min`` over cells of the cells' mean over seeds, with the CI from the
    extreme of the cells' lower bounds to the extreme of their upper bounds (it holds the
    extreme mean whenever each cell's CI holds its own mean). ``n`` is the fewest seeds of a
    cell; without a CI for every cell (a cell with one seed) there is none."""
    pick = {"max": max, "min": min}[aggregate]
    ests = [estimate(list(seeds.values())) for seeds in cells.values() if seeds]
    if not ests:
        return Estimate(0, None)
    mean = pick(e.mean for e in ests if e.mean is not None)
    n = min(e.n for e in ests)
    if not all(e.has_ci for e in ests):
        return Estimate(n, mean)
    lows = [e.low for e in ests if e.low is not None]
    highs = [e.high for e in ests if e.high is not None]
    return Estimate(n, mean, pick(lows), pick(highs))


def simulated_estimate(
    results: Sequence[Mapping[str, Any]],
    metric: str,
    where: Mapping[str, Any],
    *,
    settings: Mapping[str, Any] | None = None,
    aggregate: str = "mean",
    relative_to: Mapping[str, Any] | None = None,
    compare: str = "ratio",
) -> Estimate:
    """The simulated value of a (non-shape) entry with its 95 % CI: the extreme of the cells'
    means for ``max`` / ``min``, else the mean over seeds of each seed's number."""
    if aggregate in ("max", "min"):
        cells = cell_seed_values(results, metric, where, settings=settings, relative_to=relative_to, compare=compare)
        return extreme_estimate(cells, aggregate)
    per_seed = seed_values(
        results, metric, where, settings=settings, aggregate=aggregate, relative_to=relative_to, compare=compare
    )
    return estimate(list(per_seed.values()))


def differences(first: Mapping[int, float], second: Mapping[int, float]) -> list[float]:
    """``second − first`` seed by seed, for the seeds both have."""
    return [second[s] - first[s] for s in sorted(first) if s in second]


# --- verdicts -------------------------------------------------------------------------------


def band(value: float, tolerance: Mapping[str, float]) -> tuple[float, float]:
    """The accepted band of ``rule = "value"``: ``{"absolute": x}`` or ``{"relative": x}``."""
    if "relative" in tolerance:
        half = float(tolerance["relative"]) * abs(value)
    else:
        half = float(tolerance["absolute"])
    return value - half, value + half


def value_verdict(est: Estimate, low: float, high: float) -> str:
    """``rule = "value"``: the CI against the band [low, high]."""
    if est.mean is None:
        return NOT_RUN
    if est.low is None or est.high is None:
        return PARTLY if low <= est.mean <= high else NOT_REPRODUCED
    if low <= est.low and est.high <= high:
        return REPRODUCED
    if est.high < low or est.low > high:
        return NOT_REPRODUCED
    return PARTLY


def side_verdict(est: Estimate, threshold: float = 0.0, positive: bool = True) -> str:
    """``rule = "sign"`` (and each difference of the shape rules): is the CI above
    ``threshold`` (``positive``) or below it?"""
    if est.mean is None:
        return NOT_RUN
    sign = 1.0 if positive else -1.0
    mean_right = sign * (est.mean - threshold) > 0
    if est.low is None or est.high is None:
        return PARTLY if mean_right else NOT_REPRODUCED
    low, high = (est.low, est.high) if positive else (-est.high, -est.low)
    shifted = threshold * sign
    if low > shifted:
        return REPRODUCED
    if high < shifted:
        return NOT_REPRODUCED
    return PARTLY if mean_right else NOT_REPRODUCED


def shape_verdict(diffs: Sequence[Estimate]) -> str:
    """``order`` / ``trend`` / ``peak``: every difference (already oriented so that the stated
    side is positive) must be above 0; "not run" when a difference has no value."""
    if not diffs or any(d.mean is None for d in diffs):
        return NOT_RUN
    each = [side_verdict(d) for d in diffs]
    if NOT_REPRODUCED in each:
        return NOT_REPRODUCED
    if all(v == REPRODUCED for v in each):
        return REPRODUCED
    return PARTLY


# --- one entry ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Point:
    """One point of a shape rule: its label, per-seed values and their estimate."""

    label: str
    values: Mapping[int, float]
    estimate: Estimate

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, **self.estimate.to_json()}


@dataclass(frozen=True)
class Step:
    """A difference of a shape rule: ``to − frm`` oriented so that the stated side is positive."""

    frm: str
    to: str
    estimate: Estimate

    def to_json(self) -> dict[str, Any]:
        return {"from": self.frm, "to": self.to, **self.estimate.to_json()}


@dataclass(frozen=True)
class Judged:
    """One published entry judged: the verdict, the simulated estimate shown in the row (for
    a shape rule, its weakest difference), and the points and differences behind it."""

    verdict: str
    simulated: Estimate
    points: tuple[Point, ...] = ()
    steps: tuple[Step, ...] = ()
    note: str = ""
    band: tuple[float, float] | None = None


def _natural(value: str) -> tuple[Any, ...]:
    try:
        return (0, float(value), value)
    except ValueError:
        return (1, 0.0, value)


def over_value(result: Mapping[str, Any], over: str) -> str | None:
    """The value of ``over`` (a cell field, ``variant``, or a key of the variant label) in a
    result, as text; ``None`` when the result does not have it."""
    if over in result and over not in ("metrics", "run"):
        value = result[over]
        return None if value is None else shown(value)
    for part in str(result.get("variant") or "").split(";"):
        key, eq, value = part.partition("=")
        if eq and key == over:
            return value
    return None


def over_points(results: Sequence[Mapping[str, Any]], where: Mapping[str, Any], over: str, settings: Any) -> list[str]:
    """The values ``over`` takes among the cells ``where`` selects: numerically sorted when all
    are numbers, else in the plan's order."""
    seen: dict[str, None] = {}
    for r in results:
        if cell_matches(r, where, settings):
            v = over_value(r, over)
            if v is not None:
                seen.setdefault(v, None)
    values = list(seen)
    if all(_natural(v)[0] == 0 for v in values):
        values.sort(key=_natural)
    return values


def _same_point(value: str, at: Any) -> bool:
    want = shown(at)
    if value == want:
        return True
    try:
        return float(value) == float(want)
    except ValueError:
        return False


def judge(
    entry: Mapping[str, Any], results: Sequence[Mapping[str, Any]], settings: Mapping[str, Any] | None = None
) -> Judged:
    """The verdict of one ``[[published]]`` entry (a dict of ``Plan.info()["published"]``) over
    the experiment's result objects; ``settings`` is the materialised spec (for selector keys
    no variant sets)."""
    rule = str(entry.get("rule") or "none")
    where: dict[str, Any] = dict(entry.get("where") or {})
    direction = str(entry.get("direction") or "increasing")
    metric = str(entry["metric"])
    how: dict[str, Any] = {
        "settings": settings,
        "aggregate": str(entry.get("aggregate") or "mean"),
        "relative_to": entry.get("relative_to"),
        "compare": str(entry.get("compare") or "ratio"),
    }

    def values(extra: Mapping[str, Any]) -> dict[int, float]:
        return seed_values(results, metric, {**where, **extra}, **how)

    if rule in ("order", "trend", "peak"):
        return _judge_shape(entry, rule, direction, where, results, settings, values)
    est = simulated_estimate(results, metric, where, **how)
    if rule == "value":
        lo, hi = band(float(entry["value"]), entry["tolerance"])
        return Judged(value_verdict(est, lo, hi), est, band=(lo, hi))
    if rule == "sign":
        threshold = float(entry.get("value") or 0.0)
        return Judged(side_verdict(est, threshold, entry.get("sign") != "negative"), est)
    verdict = NO_PUBLISHED
    return Judged(verdict, est, note="" if est.mean is not None else "no cell matched")


def _judge_shape(
    entry: Mapping[str, Any],
    rule: str,
    direction: str,
    where: Mapping[str, Any],
    results: Sequence[Mapping[str, Any]],
    settings: Mapping[str, Any] | None,
    values: Callable[[Mapping[str, Any]], dict[int, float]],
) -> Judged:
    sign = -1.0 if direction == "decreasing" and rule != "peak" else 1.0
    if rule == "order":
        selectors = [dict(s) for s in entry.get("order") or ()]
        labels = [where_text(s) for s in selectors]
    else:
        over = str(entry["over"])
        names = over_points(results, where, over, settings)
        selectors = [{over: n} for n in names]
        labels = [f"{over}={n}" for n in names]
    series = [values(s) for s in selectors]
    points = tuple(Point(lbl, v, estimate(list(v.values()))) for lbl, v in zip(labels, series, strict=True))
    pairs: list[tuple[int, int]]
    note = ""
    if rule == "peak":
        at = entry.get("at")
        peak = next((i for i, s in enumerate(selectors) if _same_point(shown(next(iter(s.values()))), at)), None)
        if peak is None:
            return Judged(NOT_RUN, Estimate(0, None), points, note=f"no cell with {entry['over']}={shown(at)}")
        pairs = [(i, peak) for i in range(len(points)) if i != peak]
    else:
        pairs = [(i, i + 1) for i in range(len(points) - 1)]
    if len(points) < 2:
        note = f"fewer than two points ({len(points)})"
    steps = tuple(
        Step(points[a].label, points[b].label, estimate([sign * d for d in differences(series[a], series[b])]))
        for a, b in pairs
    )
    verdict = shape_verdict([s.estimate for s in steps])
    weakest = _weakest(steps)
    return Judged(verdict, weakest.estimate if weakest else Estimate(0, None), points, steps, note=note)


def _weakest(steps: Iterable[Step]) -> Step | None:
    """The difference closest to the wrong side: the smallest CI lower bound (or mean)."""

    def key(s: Step) -> float:
        e = s.estimate
        if e.mean is None:
            return -math.inf
        return e.low if e.low is not None else e.mean

    return min(steps, key=key, default=None)


# --- texts ----------------------------------------------------------------------------------


def _num(x: float) -> str:
    return f"{x:.4g}"


def published_text(entry: Mapping[str, Any]) -> str:
    """The scoreboard's "published" cell: the value and tolerance, or the rule in words."""
    rule = str(entry.get("rule") or "none")
    value = entry.get("value")
    if rule == "value":
        tol = entry.get("tolerance") or {}
        spread = f"{_num(tol['relative'] * 100)}%" if "relative" in tol else _num(float(tol.get("absolute", 0)))
        return f"{_num(float(value or 0.0))} ± {spread}"
    if rule == "sign":
        op = "<" if entry.get("sign") == "negative" else ">"
        return f"{op} {_num(float(value or 0.0))}"
    if rule == "order":
        op = " > " if entry.get("direction") == "decreasing" else " < "
        return op.join(where_text(s) for s in entry.get("order") or ())
    if rule == "trend":
        return f"{entry.get('direction') or 'increasing'} over {entry.get('over')}"
    if rule == "peak":
        return f"peak at {entry.get('over')}={shown(entry.get('at'))}"
    return DASH if value is None else f"{_num(float(value))} (not judged)"


DASH = "—"


def quantity_text(entry: Mapping[str, Any]) -> str:
    """What the number is: the metric, relative to its baseline when it has one."""
    metric = str(entry["metric"])
    base = entry.get("relative_to")
    agg = str(entry.get("aggregate") or "mean")
    text = metric if agg == "mean" else f"{agg} {metric}"
    if base:
        compare = str(entry.get("compare") or "ratio")
        word = {"ratio": "/", "change": "change vs", "difference": "−"}[compare]
        text = f"{text} {word} ({where_text(base)})"
    return text


_SPACES = re.compile(r"\s+")


def one_line(text: Any) -> str:
    """Text on one line (for table cells)."""
    return _SPACES.sub(" ", str(text or "")).strip()
