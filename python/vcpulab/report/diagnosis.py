"""The diagnosis section of the HTML report (``vcpulab report RESULTS --diagnose FILTER``): for
stored cells that a filter selects, the same diagnosis as ``vcpulab diagnose``, re-run from the
spec that produced them (``RESULTS/specs/<spec_hash>.toml``)."""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .. import diagnose
from ..store import ResultsStore
from .build import ReportError
from .page import Section, Table, paragraph

MAX_CELLS = 8
"""At most this many cells are diagnosed for one report (each re-runs several simulations)."""

KEY_FIELDS = ("workload", "scenario", "vcpus", "threads", "oc_vms", "seed", "variant")

TITLE, ANCHOR = "Diagnosis: causes, wait chains and mitigations", "diagnosis"


def stored_cells(store: ResultsStore, want: Mapping[str, set[str]]) -> list[dict[str, Any]]:
    """The stored VM cells (with their ``spec_hash``) matching ``want`` (``--only`` syntax)."""
    from ..sweep import select_cells

    con = store.connect()
    columns = ", ".join((*KEY_FIELDS, "spec_hash"))
    rows = con.execute(
        f"SELECT DISTINCT {columns} FROM runs ORDER BY workload, scenario, vcpus, seed, variant"
    ).fetchall()
    cells = [dict(zip((*KEY_FIELDS, "spec_hash"), r, strict=True)) for r in rows]
    cells = [c for c in cells if c["scenario"] in diagnose.VM_SCENARIOS]
    return [cells[i] for i in select_cells(cells, want)]


def diagnose_stored(
    store: ResultsStore,
    filters: Sequence[Mapping[str, set[str]]],
    on_step: Callable[[str], None] = lambda s: None,
) -> list[dict[str, Any]]:
    """The diagnoses (``Diagnosis.to_json()``) of the stored cells the filters select."""
    chosen: list[dict[str, Any]] = []
    for want in filters:
        found = stored_cells(store, want)
        if not found:
            shown = ",".join(f"{k}={'|'.join(sorted(v))}" for k, v in want.items())
            raise ReportError(f"--diagnose {shown}: no stored UC, OC or OC2 cell matches")
        chosen += [c for c in found if c not in chosen]
    if len(chosen) > MAX_CELLS:
        raise ReportError(
            f"--diagnose selects {len(chosen)} cells (at most {MAX_CELLS}): narrow it, e.g. with seed=1 or vcpus=N"
        )
    out = []
    for c in chosen:
        path = store.root / "specs" / f"{c['spec_hash']}.toml"
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise ReportError(f"cannot read the spec of a stored cell '{path}': {e.strerror or e}") from None
        exact = {k: {str(c[k])} for k in KEY_FIELDS}

        def selected(cells: Sequence[Mapping[str, Any]], exact: Mapping[str, set[str]] = exact) -> list[int]:
            return [i for i, x in enumerate(cells) if all(str(x[k]) in v for k, v in exact.items())]

        try:
            d = diagnose.run(text, str(path), [], selected, on_step=on_step)
        except diagnose.DiagnoseError as e:
            raise ReportError(f"{path}: {e}") from None
        out.append(d.to_json())
    return out


def section(diagnoses: Sequence[Mapping[str, Any]]) -> Section:
    """One section with, per diagnosed cell, its causes, wait chains and mitigations."""
    if not diagnoses:
        return Section.omit(
            TITLE, ANCHOR, "no cell diagnosed: add --diagnose FILTER, e.g. 'workload=W,scenario=OC,vcpus=N'"
        )
    parts = [
        paragraph(
            "For each diagnosed cell: the causes of its overhead ranked by the CPU time they add over the native "
            "run (per instance), the descheduled vCPUs that made busy-waiting vCPUs wait (wait chains), and the "
            "cell re-run with each applicable mitigation (TPDS §7, DIS), best first (docs/diagnose.md).",
            "what",
        )
    ]
    tables: list[Table] = []
    for n, d in enumerate(diagnoses, 1):
        r = d["result"]
        parts.append(f"<h3>{html.escape(diagnose.label(d['cell']))}</h3>")
        parts.append(
            paragraph(
                f"t_native {r['t_native_s']:.4g} s, t_virt {r['t_virt_s']:.4g} s, δη_t {r['delta_eta_t']:+.1%}, "
                f"δη_r {r['delta_eta_r']:+.1%}, ω {r['omega']:.3f}",
                "how",
            )
        )
        causes = [
            {
                "cause": c["cause"],
                "added_s": c["added_ns"] / 1e9,
                "of_native_cycles": c["of_native_cycles"],
                "waiting_on_descheduled_s": None if c["preempted_ns"] is None else c["preempted_ns"] / 1e9,
                "evidence": c["evidence"],
            }
            for c in d["causes"]
            if c["added_ns"] > 0
        ]
        t = Table.of(
            f"diagnosis_{n}_causes",
            causes,
            ("cause", "added_s", "of_native_cycles", "waiting_on_descheduled_s", "evidence"),
            caption="causes, by the CPU time they add over the native run (per instance)",
            shown=True,
            formats={"added_s": "s", "of_native_cycles": "pct", "waiting_on_descheduled_s": "s"},
            headers={
                "added_s": "added",
                "of_native_cycles": "of native cycles",
                "waiting_on_descheduled_s": "waiting on descheduled",
            },
        )
        tables.append(t)
        parts.append(t.html())
        culprits = [
            {
                "culprit": c["culprit"],
                "state": c["state"],
                "made_others_wait_s": c["ns"] / 1e9,
                "who_waited": "; ".join(f"{v['waiter']} {v['ns'] / 1e6:.3g} ms on {v['on']}" for v in c["victims"][:4]),
            }
            for c in d["wait_chains"]["culprits"]
        ]
        if culprits:
            t = Table.of(
                f"diagnosis_{n}_wait_chains",
                culprits,
                ("culprit", "state", "made_others_wait_s", "who_waited"),
                caption="wait chains: descheduled culprits and whom they made busy-wait (all VMs)",
                shown=True,
                formats={"made_others_wait_s": "s"},
                headers={"made_others_wait_s": "made others wait", "who_waited": "who waited, on what"},
            )
            tables.append(t)
            parts.append(t.html())
        if d["mitigations"]:
            t = Table.of(
                f"diagnosis_{n}_mitigations",
                d["mitigations"],
                ("name", "cause", "delta_eta_t", "change_delta_eta_t", "delta_eta_r", "change_delta_eta_r", "speedup"),
                caption="mitigations, re-run with each switched on, best first (VM speedup = t_virt before / after)",
                shown=True,
                formats={
                    "delta_eta_t": "pct",
                    "change_delta_eta_t": "pct",
                    "delta_eta_r": "pct",
                    "change_delta_eta_r": "pct",
                    "speedup": "ratio",
                },
                headers={
                    "name": "mitigation",
                    "delta_eta_t": "δη_t",
                    "change_delta_eta_t": "δη_t change (points)",
                    "delta_eta_r": "δη_r",
                    "change_delta_eta_r": "δη_r change (points)",
                    "speedup": "VM speedup",
                },
            )
            tables.append(t)
            parts.append(t.html())
    return Section(TITLE, ANCHOR, "".join(parts), tuple(tables))
