"""Helpers shared by the report's section builders: series names, figure rendering, means."""

from __future__ import annotations

import html
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .data import scenario_rank
from .page import figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def mean(values: Iterable[float | None]) -> float | None:
    vs = [float(v) for v in values if v is not None]
    return sum(vs) / len(vs) if vs else None


def _k_example(ks: Sequence[int]) -> str:
    """``k = 2: −50 %`` for each k (at most three)."""
    parts = [f"k = {k}: {(1 / k - 1) * 100:+.0f} %".replace("-", "−") for k in ks[:3]]
    return ", ".join(parts) + (", ..." if len(ks) > 3 else "")


def gamma_notes(rows: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(scenario, note) for OC and OC2 when ``rows`` (results or stored cells) have some: what
    their δη_t = (t_v·γ_v − t_p·γ_p)/(t_p·γ_p) compares with, and what a negative value means.
    Shown under ``vcpulab run``'s table and in the report's captions and methods."""
    rows = list(rows)
    scenarios = {r.get("scenario") for r in rows}
    out = []
    if "OC" in scenarios:
        ks = sorted({int(r["oc_vms"]) for r in rows if r.get("scenario") == "OC" and r.get("oc_vms")})
        out.append(
            (
                "OC",
                "k VMs share the cores and each is entitled to 1/k of them, so δη_t compares with γ_v/γ_p = 1/k: "
                f"equal wall times give δη_t = 1/k − 1 ({_k_example(ks or [2])}), because the VM did its work with "
                "1/k of the CPU, not because it is faster. A negative δη_t means the VM took less than k times the "
                "native time with 1/k of the cores (e.g. the native run left cores idle).",
            )
        )
    if "OC2" in scenarios:
        out.append(
            (
                "OC2",
                "the same k VMs against k native instances sharing the cores the same way (γ_v/γ_p = 1): equal wall "
                "times give δη_t = 0.",
            )
        )
    return out


def gamma_text(rows: Iterable[Mapping[str, Any]]) -> str:
    """:func:`gamma_notes` as one paragraph (``""`` without OC and OC2 rows)."""
    return " ".join(f"In {scenario}, {note}" for scenario, note in gamma_notes(rows))


class Namer:
    """Labels of the series a figure distinguishes: the scenario, plus the variant when the
    store has several, plus k (``oc_vms``) for OC/OC2 when it has several, plus the thread
    count when one vCPU count was run with several."""

    def __init__(self, cells: Sequence[Mapping[str, Any]]) -> None:
        self.variants = len({c["variant"] for c in cells}) > 1
        self.ks = len({c["oc_vms"] for c in cells if c["scenario"] in ("OC", "OC2")}) > 1
        by_n: dict[int, set[int]] = {}
        for c in cells:
            by_n.setdefault(c["vcpus"], set()).add(c["threads"])
        self.threads = any(len(t) > 1 for t in by_n.values())

    def key(self, cell: Mapping[str, Any], variant: bool = True) -> tuple[Any, ...]:
        """The series a cell belongs to, as a sortable tuple (without its variant if not ``variant``)."""
        k = cell["oc_vms"] if self.ks and cell["scenario"] in ("OC", "OC2") else 0
        t = cell["threads"] if self.threads else 0
        v = cell["variant"] if self.variants and variant else ""
        return (scenario_rank(cell["scenario"]), cell["scenario"], v, k, t)

    def label(self, key: tuple[Any, ...]) -> str:
        _, scenario, variant, k, t = key
        parts = [scenario] if scenario else []
        if variant:
            parts.append(variant)
        if k:
            parts.append(f"k={k}")
        if t:
            parts.append(f"{t} threads")
        return " ".join(parts) or "all"


_FIGURE_IDS = itertools.count(1)
"""Shared by every :class:`Figures`: sections drawn by different callers (the diagnosis) never
share an id prefix."""


class Figures:
    """Renders figures to inline SVG with page-unique id prefixes."""

    def svg(self, draw: Callable[[], Figure], label: str) -> str:
        from .figures import style, to_svg

        with style():
            fig = draw()
            return to_svg(fig, f"f{next(_FIGURE_IDS)}", label)

    def html(self, draw: Callable[[], Figure], label: str, caption: str = "") -> str:
        return figure(self.svg(draw, label), caption)


def what(text: str) -> str:
    """The one sentence that says what a figure shows (`code` spans allowed)."""
    return f'<p class="what">{inline(text)}</p>'


def how(text: str) -> str:
    """How it is computed (formulas, normalisation; `code` spans allowed)."""
    return f'<p class="how">{inline(text)}</p>'


def inline(text: str) -> str:
    """Plain text escaped for HTML, with `backquoted` spans as code."""
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))
