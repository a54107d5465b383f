"""``vcpulab sensitivity ROW``: how a published row's simulated number moves with each estimated
parameter of its testbed, within the parameter's declared bounds.

For every parameter the row is simulated with the parameter at its lower and at its upper bound
(the others as the preset has them). That gives the tornado figure's bar (the row's range over
the bounds) and the arc elasticity ``(Δy / y₀) / (Δp / p₀)``. "What would it take": where the
published target lies between the two ends, :func:`scipy.optimize.brentq` finds the single
value of the parameter that reaches it. A row that no single parameter can bring to its target
within the bounds points at a rate (the workload) or a missing mechanism, not at a cost.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from .rows import Estimate, Evaluator, Row, simulated

WHAT_IF_ITERATIONS = 8
"""Root-finding steps per parameter (each one simulation of the row's cells)."""


@dataclass
class Effect:
    """One parameter's effect on the row."""

    key: str
    value: float
    low: float
    high: float
    at_low: float | None
    at_high: float | None
    elasticity: float | None
    needed: float | None = None
    """The parameter value that reaches the target, alone, within the bounds (None: none)."""
    needed_reached: float | None = None
    """The row's simulated number at ``needed``."""
    note: str = ""

    @property
    def swing(self) -> float:
        if self.at_low is None or self.at_high is None:
            return 0.0
        return abs(self.at_high - self.at_low)


@dataclass
class Sensitivity:
    """The result of one ``sensitivity`` run (its JSON is stored beside the results)."""

    row: str
    what: str
    metric: str
    rule: str
    preset: str
    target: float | None
    value: float | None
    quick: bool
    seeds: list[int]
    effects: list[Effect] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            **{k: v for k, v in asdict(self).items() if k != "effects"},
            "effects": [asdict(e) for e in self.ranked()],
        }

    def ranked(self) -> list[Effect]:
        """Largest swing first (the tornado's order); ties by key."""
        return sorted(self.effects, key=lambda e: (-e.swing, e.key))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Sensitivity:
        effects = [Effect(**e) for e in data.get("effects") or ()]
        return cls(**{k: v for k, v in data.items() if k != "effects"}, effects=effects)


def elasticity(
    y0: float | None, p0: float, lo: float, hi: float, y_lo: float | None, y_hi: float | None
) -> float | None:
    """Arc elasticity over [lo, hi]: (Δy / y₀) / (Δp / p₀); None where undefined."""
    if y0 is None or y_lo is None or y_hi is None or y0 == 0 or p0 == 0 or hi == lo:
        return None
    return ((y_hi - y_lo) / abs(y0)) / ((hi - lo) / abs(p0))


def run(
    row: Row,
    params: Sequence[Estimate],
    ev: Evaluator,
    *,
    what_if: bool = True,
    step: Any = None,
) -> Sensitivity:
    """The row's sensitivity to each of ``params``; ``step(label)`` reports progress."""
    say = step or (lambda _label: None)
    target = row.target()
    say(f"{row.name}: the preset's values and {2 * len(params)} bounds")
    jobs: list[tuple[Row, list[str]]] = [(row, [])]
    for p in params:
        jobs += [(row, [p.override(p.low)]), (row, [p.override(p.high)])]
    judged = ev.judge_many(jobs)
    y0 = simulated(judged[0])
    out = Sensitivity(
        row.name,
        row.what,
        str(row.entry.get("metric")),
        row.rule,
        row.preset,
        target,
        y0,
        ev.quick,
        list(ev.seeds),
    )
    for i, p in enumerate(params):
        y_lo, y_hi = simulated(judged[1 + 2 * i]), simulated(judged[2 + 2 * i])
        effect = Effect(p.key, p.value, p.low, p.high, y_lo, y_hi, elasticity(y0, p.value, p.low, p.high, y_lo, y_hi))
        if what_if and target is not None:
            say(f"{row.name}: what {p.key} would take")
            _what_it_takes(row, p, effect, target, y0, ev)
        out.effects.append(effect)
    return out


def _what_it_takes(row: Row, p: Estimate, effect: Effect, target: float, y0: float | None, ev: Evaluator) -> None:
    """Sets ``effect.needed`` to the value of ``p`` alone that brings the row to ``target``,
    if one lies within its bounds (the row's number at the two bounds brackets the target)."""
    ends = [(p.low, effect.at_low), (p.value, y0), (p.high, effect.at_high)]
    known = [(x, y) for x, y in ends if y is not None]
    if len(known) < 2:
        effect.note = "no value: a simulation at a bound failed"
        return
    bracket = next(
        ((a, b) for a, b in zip(known, known[1:], strict=False) if (a[1] - target) * (b[1] - target) <= 0), None
    )
    if bracket is None:
        ys = [y for _, y in known]
        effect.note = f"not within its bounds: the row stays within [{min(ys):.4g}, {max(ys):.4g}]"
        return
    (x0, fa), (x1, fb) = bracket
    if fa == target:
        effect.needed, effect.needed_reached = x0, fa
        return
    if fb == target:
        effect.needed, effect.needed_reached = x1, fb
        return
    from scipy.optimize import brentq

    seen: dict[float, float] = {x0: fa, x1: fb}

    def f(x: float) -> float:
        x = p.clip(x)
        if x not in seen:
            (j,) = ev.judge_many([(row, [p.override(x)])])
            y = simulated(j)
            seen[x] = math.nan if y is None else y
        return seen[x] - target

    try:
        root = brentq(f, x0, x1, xtol=max(abs(x1 - x0) * 0.01, 1e-12), maxiter=WHAT_IF_ITERATIONS, full_output=False)
    except (RuntimeError, ValueError):
        closest = min(seen, key=lambda x: abs(seen[x] - target) if math.isfinite(seen[x]) else math.inf)
        root = closest
        effect.note = f"not converged in {WHAT_IF_ITERATIONS} steps: the closest value found"
    root = float(p.clip(root))
    if p.integer:
        root = float(round(root))
    effect.needed = root
    reached = f(root) + target  # read from `seen` when brentq evaluated it
    effect.needed_reached = reached if math.isfinite(reached) else None
