"""The sensitivity section of the HTML report: one tornado figure and table per row that
``vcpulab sensitivity ROW --results RESULTS`` analysed into this store
(``RESULTS/sensitivity/<ID>_<N>.json``)."""

from __future__ import annotations

import json
import re
from functools import partial
from pathlib import Path

from ..calibration.sensitivity import Sensitivity
from . import figures as F
from .common import Figures, how, what
from .page import Section, Table

TITLE, ANCHOR = "Sensitivity of published rows to the testbed's estimates", "sensitivity"
SHOWN = 15
"""Parameters drawn per tornado (the largest swings); the table lists all."""


def stored(root: Path) -> list[Sensitivity]:
    """The analyses stored under ``root/sensitivity``, in name order (unreadable files are
    skipped: the report never fails on them)."""
    out = []
    for path in sorted((root / "sensitivity").glob("*.json")):
        try:
            out.append(Sensitivity.from_json(json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, ValueError, TypeError):
            continue
    return out


def section(root: Path, figs: Figures) -> Section | None:
    """The section, or None when no sensitivity was stored (the report then has none)."""
    analyses = stored(root)
    if not analyses:
        return None
    body = what(
        "For each analysed row, how its simulated number moves when one estimated value of the testbed goes to "
        "its lower or upper bound, the others as the preset has them (`vcpulab sensitivity`)."
    )
    body += how(
        "Bars: the row's value at the parameter's lower bound (blue) and upper bound (orange); solid line: the "
        "preset's values; dashed: the published target. Elasticity = (Δy / y₀) / (Δp / p₀) over the bounds. "
        "'Needed' is the single value within the bounds that reaches the target, where one does; a row no "
        "parameter can reach points at a rate or a missing mechanism rather than a cost."
    )
    tables = []
    for s in analyses:
        ranked = s.ranked()
        bars = [
            F.TornadoBar(e.key.rsplit(".", 1)[-1], e.at_low, e.at_high)
            for e in ranked[:SHOWN]
            if e.at_low is not None and e.at_high is not None
        ]
        title = f"{s.row}: {s.what}"
        if bars:
            body += figs.html(partial(F.tornado, title, bars, s.value, s.target, s.metric), f"Sensitivity of {s.row}")
        name = "sensitivity_" + re.sub(r"[^a-z0-9]+", "_", s.row.lower()).strip("_")
        tables.append(
            Table(
                name,
                ("parameter", "value", "low", "high", "at_low", "at_high", "elasticity", "needed", "note"),
                tuple(
                    (e.key, e.value, e.low, e.high, e.at_low, e.at_high, e.elasticity, e.needed, e.note) for e in ranked
                ),
                caption=f"{title} (preset {s.preset}; simulated {s.value}, target {s.target})",
                shown=True,
            )
        )
    return Section(TITLE, ANCHOR, body, tuple(tables))
