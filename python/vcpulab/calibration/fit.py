"""``vcpulab calibrate PRESET``: fit a testbed's estimated values, within their declared bounds,
to its calibration rows (``experiments/calibration.toml``), and write the calibrated preset.

The objective is the sum of the rows' squared residuals, each in units of the row's own
tolerance: for a value rule with a relative tolerance ``ln(y / value) / ln(1 + tolerance)`` (a
miss by a factor counts the same above and below, and a miss by orders of magnitude is not
flattened), with an absolute one ``(y − value) / half-band``; the distance to the wrong side of a sign
rule's threshold over the threshold's scale, 0 once a sign or shape rule holds. The parameters are
searched in the unit cube of their bounds (log-spaced where a range spans a factor 4 or more) by
:func:`scipy.optimize.minimize` with Powell's derivative-free method. Every evaluation is a
deterministic simulation stored under content keys, so the fit is deterministic, and running it
again after an interruption replays the stored evaluations and goes on where it stopped.
"""

from __future__ import annotations

import datetime
import math
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..reproduce import Suite
from ..reproduce.verdict import Judged, band
from ..spec import toml_value
from .rows import CalibrationError, Estimate, Evaluator, Row, find_row, simulated

CALIBRATION_FILE = "calibration.toml"
"""Beside the suite directory: per preset, the calibration rows and the rule that picked them."""

AT_BOUND = 0.01
"""A fitted value within this share of its range from a bound is reported as at the bound."""


@dataclass(frozen=True)
class CalibrationSet:
    """One testbed's calibration rows, declared before fitting."""

    preset: str
    rule: str
    rows: tuple[str, ...]


def calibration_path(suite_root: Path) -> Path:
    return suite_root.parent / CALIBRATION_FILE


def load_sets(path: Path) -> dict[str, CalibrationSet]:
    """Every preset's calibration set of ``path`` (a missing file: none); a malformed table is a
    :class:`CalibrationError` naming the file and the field."""
    if not path.is_file():
        return {}
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise CalibrationError(f"{path}: {e}") from None
    out = {}
    for preset, table in doc.items():
        if not isinstance(table, Mapping):
            raise CalibrationError(f"{path}: {preset}: expected a table with rule and rows")
        rule, rows = table.get("rule"), table.get("rows")
        if not isinstance(rule, str) or not rule.strip():
            raise CalibrationError(f"{path}: {preset}.rule: expected the rule that picks the rows (a string)")
        if not isinstance(rows, list) or not rows or not all(isinstance(r, str) for r in rows):
            raise CalibrationError(f'{path}: {preset}.rows: expected a non-empty list of rows ("ID:N")')
        out[preset.casefold()] = CalibrationSet(preset, rule, tuple(rows))
    return out


def residual(row: Row, j: Judged | None) -> float | None:
    """The row's residual in units of its tolerance (0 when a sign or shape rule holds);
    None when the row has no simulated value."""
    y = simulated(j)
    if y is None:
        return None
    e = row.entry
    if row.rule == "value":
        value = float(e["value"])
        tolerance = e["tolerance"]
        if "relative" in tolerance and value > 0 and y > 0:
            # A relative band: the distance in log space, in units of the band's log half-width,
            # so that a value 10 x too small weighs as much as one 10 x too large.
            return math.log(y / value) / math.log1p(float(tolerance["relative"]))
        lo, hi = band(value, tolerance)
        half = (hi - lo) / 2 or max(abs(value), 1e-12)
        return (y - value) / half
    if row.rule == "sign":
        t = float(e.get("value") or 0.0)
        positive = e.get("sign") != "negative"
        wrong = (t - y) if positive else (y - t)
        return max(0.0, wrong) / max(abs(t), 1e-12 if t == 0 else abs(t))
    if row.rule in ("order", "trend", "peak"):
        scale = max((abs(p.estimate.mean) for p in j.points if p.estimate.mean is not None), default=1.0) if j else 1.0
        return max(0.0, -y) / max(scale, 1e-12)
    raise CalibrationError(f'{row.name}: rule = "none" has no published value to fit')


@dataclass
class Scale:
    """A parameter's map from the unit interval to its bounds."""

    p: Estimate

    @property
    def log(self) -> bool:
        return self.p.low > 0 and self.p.high / self.p.low >= 4

    def value(self, x: float) -> float:
        x = min(1.0, max(0.0, x))
        if self.log:
            v = self.p.low * (self.p.high / self.p.low) ** x
        else:
            v = self.p.low + x * (self.p.high - self.p.low)
        return float(round(v)) if self.p.integer else v

    def unit(self, v: float) -> float:
        if self.log:
            return math.log(v / self.p.low) / math.log(self.p.high / self.p.low)
        return (v - self.p.low) / (self.p.high - self.p.low)


@dataclass
class Fitted:
    """One fitted value."""

    key: str
    start: float
    value: float
    low: float
    high: float
    at_bound: str | None
    reason: str


@dataclass
class Fit:
    """What ``calibrate`` found."""

    preset: str
    rows: list[str]
    rule: str
    values: list[Fitted] = field(default_factory=list)
    residuals: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    """Row → (simulated, residual) at the fitted values."""
    start_residuals: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    objective: float = math.inf
    start_objective: float = math.inf
    evaluations: int = 0


def calibration_rows(suite: Suite, preset: str, names: Sequence[str]) -> list[Row]:
    """The named rows, each of them on ``preset`` and with a published value (else a
    :class:`CalibrationError` naming the row)."""
    rows = [find_row(suite, n) for n in names]
    for r in rows:
        if r.preset.casefold() != preset.casefold():
            raise CalibrationError(f"{r.name}: runs on preset {r.preset}, not {preset}: a calibration is per testbed")
        if r.experiment.status == "withheld" or r.rule == "none":
            raise CalibrationError(f"{r.name}: has no published value to fit (withheld or figure only)")
    return rows


def fit(
    suite: Suite,
    preset: str,
    row_names: Sequence[str],
    rule: str,
    params: Sequence[Estimate],
    ev: Evaluator,
    *,
    max_evals: int = 60,
    step: Callable[[str], None] | None = None,
) -> Fit:
    """Fits ``params`` to the rows; ``step(label)`` is called once per evaluation."""
    from scipy.optimize import minimize

    say = step or (lambda _label: None)
    rows = calibration_rows(suite, preset, row_names)
    scales = [Scale(p) for p in params]
    cache: dict[tuple[float, ...], tuple[float, dict[str, tuple[float | None, float | None]]]] = {}
    out = Fit(preset, [r.name for r in rows], rule)

    def evaluate(values: tuple[float, ...]) -> tuple[float, dict[str, tuple[float | None, float | None]]]:
        if values in cache:
            return cache[values]
        overrides = [s.p.override(v) for s, v in zip(scales, values, strict=True)]
        judged = ev.judge_many([(r, overrides) for r in rows])
        per_row = {r.name: (simulated(j), residual(r, j)) for r, j in zip(rows, judged, strict=True)}
        # A row without a value (a failed simulation) counts as far off, so the search avoids it.
        total = math.fsum((res if res is not None else 1e3) ** 2 for _, res in per_row.values())
        cache[values] = (total, per_row)
        out.evaluations += 1
        say(f"evaluation {out.evaluations}: objective {total:.4g}")
        return cache[values]

    start = tuple(float(p.value) for p in params)
    out.start_objective, out.start_residuals = evaluate(start)

    def objective(x: Any) -> float:
        return evaluate(tuple(s.value(float(xi)) for s, xi in zip(scales, x, strict=True)))[0]

    best = start
    if params and out.start_objective > 0:
        x0 = [min(1.0, max(0.0, s.unit(p.value))) for s, p in zip(scales, params, strict=True)]
        res = minimize(
            objective,
            x0,
            method="Powell",
            bounds=[(0.0, 1.0)] * len(params),
            options={"maxfev": max_evals, "xtol": 1e-2, "ftol": 1e-3},
        )
        best = min(cache, key=lambda k: (cache[k][0], k != start))
        del res
    out.objective, out.residuals = cache[best]
    for s, v in zip(scales, best, strict=True):
        span = s.p.high - s.p.low
        at = None
        if span > 0 and v != s.p.value:
            if v - s.p.low <= AT_BOUND * span:
                at = "lower"
            elif s.p.high - v <= AT_BOUND * span:
                at = "upper"
        out.values.append(Fitted(s.p.key, s.p.value, v, s.p.low, s.p.high, at, s.p.reason))
    return out


def calibrated_toml(f: Fit, name: str, command: str) -> str:
    """The calibrated preset: a spec overlay (``[platform] preset`` and the fitted values in their
    tables), with the bounds, the residuals and the rows used as comments."""
    today = datetime.date.today().isoformat()
    lines = [
        f"# Calibrated preset {name}: {f.preset} with {len(f.values)} estimates fitted by `{command}` ({today}).",
        f"# Calibration rows ({f.rule}):",
        *(f"#   {r}" for r in f.rows),
        f"# Objective (sum of squared residuals in tolerance units): {f.start_objective:.4g} -> {f.objective:.4g} "
        f"in {f.evaluations} evaluations.",
        "# Residuals at the fitted values (simulated; residual; at the preset's values):",
    ]
    for r in f.rows:
        y, res = f.residuals.get(r, (None, None))
        y0, res0 = f.start_residuals.get(r, (None, None))
        lines.append(f"#   {r}: {_g(y)}; {_g(res)} (was {_g(y0)}; {_g(res0)})")
    bound = [v for v in f.values if v.at_bound]
    if bound:
        lines.append("# Values that ended at a bound (the sign of a missing mechanism, not a result):")
        lines += [f"#   {v.key} at its {v.at_bound} bound {_g(v.value)}" for v in bound]
    lines += ["", "[platform]", f"preset = {toml_value(f.preset)}"]
    tables: dict[str, list[Fitted]] = {}
    for v in f.values:
        table, _, _ = v.key.rpartition(".")
        tables.setdefault(table, []).append(v)
    for table, values in tables.items():
        lines += ["", f"[{table}]"]
        for v in values:
            mark = f"; at its {v.at_bound} bound" if v.at_bound else ""
            lines.append(f"# calibrated: {_g(v.start)} -> {_g(v.value)} within [{_g(v.low)}, {_g(v.high)}]{mark}")
            value: Any = int(v.value) if float(v.value).is_integer() and float(v.start).is_integer() else v.value
            lines.append(f"{v.key.rpartition('.')[2]} = {toml_value(value)}")
    return "\n".join(lines) + "\n"


def overlay_overrides(path: Path) -> tuple[str, list[str]]:
    """A calibrated preset file as (its base preset, ``--set`` overrides of its values)."""
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise CalibrationError(f"{path}: {e}") from None
    platform = doc.get("platform")
    if not isinstance(platform, Mapping) or not isinstance(platform.get("preset"), str):
        raise CalibrationError(f"{path}: platform.preset: expected the preset it calibrates (a string)")
    out: list[str] = []

    def walk(prefix: str, node: Mapping[str, Any]) -> None:
        for k, v in node.items():
            if isinstance(v, Mapping):
                walk(f"{prefix}{k}.", v)
            else:
                out.append(f"{prefix}{k}={toml_value(v)}")

    walk("", {k: v for k, v in doc.items() if k != "platform"})
    return str(platform["preset"]), out


def _g(x: float | None) -> str:
    return "—" if x is None else f"{x:.4g}"
