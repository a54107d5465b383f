"""Sections on where the overhead is: the distribution of δη_r, δη_t and ω (TPDS Fig. 3), the
per-workload average and maximum with the guest/host split (Fig. 4), host time by VM-exit
reason (Fig. 9) and busy time per vCPU normalised to native (Fig. 5)."""

from __future__ import annotations

import functools
import html
from collections.abc import Mapping, Sequence
from typing import Any

from . import figures as F
from .common import Figures, Namer, gamma_text, how, mean, what
from .data import VM_SCENARIOS, StoreData, load_busy, scenario_rank
from .page import Section, Table, paragraph

METRICS = ("delta_eta_r", "delta_eta_t", "omega")

HOST_REASON_NAMES = {
    "hlt": "HLT",
    "msr_write_icr": "ICR write (IPI)",
    "msr_write_tsc_deadline": "TSC_DEADLINE write (timer)",
    "msr_write_eoi": "EOI write",
    "preemption_timer": "preemption timer",
    "external_interrupt": "external interrupt",
    "pause_instruction": "PAUSE (PLE)",
    "vmcall": "VMCALL (hypercall)",
    "sched": "host scheduling",
    "halt_poll": "halt polling",
    "host_interrupt": "host interrupts",
    "host_timer": "host timer",
    "host_ipi": "host IPIs",
    "tlb_flush": "TLB flush (entry / Shoot4U)",
}


def vm_cells(data: StoreData) -> list[dict[str, Any]]:
    return [c for c in data.cells if c["scenario"] in VM_SCENARIOS]


def overview(data: StoreData) -> Section:
    """What the store holds, in one table."""
    cells = data.cells
    seeds = sorted({c["seed"] for c in cells})
    rows = [
        ("cells", len(cells)),
        ("workloads", len(data.workloads())),
        ("scenarios", ", ".join(data.scenarios())),
        ("vCPU counts", ", ".join(map(str, data.vcpu_counts()))),
        ("seeds (repetitions)", ", ".join(map(str, seeds))),
        ("variants", ", ".join(v or "(none)" for v in data.variants())),
        (
            "co-running VMs k (OC, OC2)",
            ", ".join(map(str, sorted({c["oc_vms"] for c in cells if c["scenario"] in ("OC", "OC2")}))) or "—",
        ),
    ]
    table = Table("overview", ("item", "value"), tuple(rows), shown=True, formats={"value": "text"})
    body = what("What the results directory holds; every figure below is drawn from these cells.") + table.html()
    return Section("Overview", "overview", body, (table,))


# --- (1) box plots --------------------------------------------------------------------------


def boxes(data: StoreData, figs: Figures) -> Section:
    title, anchor = "Overhead distribution per vCPU count", "distribution"
    cells = [c for c in vm_cells(data) if c.get("delta_eta_t") is not None]
    if not cells:
        return Section.omit(
            title,
            anchor,
            "no VM cells (UC, OC or OC2) with metrics: δη_r, δη_t and ω compare a VM run with its native baseline",
        )
    namer = Namer(cells)
    # The points of a box: each workload's mean over seeds.
    per: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for c in cells:
        per.setdefault((c["workload"], namer.key(c), c["vcpus"]), []).append(c)
    records = []
    for (workload, key, n), group in per.items():
        rec: dict[str, Any] = {
            "workload": workload,
            "series": namer.label(key),
            "scenario": key[1],
            "variant": group[0]["variant"],
            "oc_vms": group[0]["oc_vms"],
            "threads": group[0]["threads"],
            "vcpus": n,
            "seeds": len(group),
        }
        for m in METRICS:
            rec[m] = mean(g.get(m) for g in group)
        records.append((key, rec))
    keys = sorted({k for k, _ in records})
    series = [namer.label(k) for k in keys]
    vcpus = sorted({r["vcpus"] for _, r in records})
    values: dict[str, dict[tuple[int, str], list[float]]] = {m: {} for m in METRICS}
    for _, r in records:
        for m in METRICS:
            if r[m] is not None:
                values[m].setdefault((r["vcpus"], r["series"]), []).append(r[m])
    svg = figs.html(
        lambda: F.box_plots(values, vcpus, series, [k[1] for k in keys]),
        "box plots of δη_r, δη_t and ω per vCPU count and scenario",
    )
    columns = ("workload", "scenario", "variant", "oc_vms", "threads", "vcpus", "seeds", *METRICS)
    table = Table.of(
        "distribution",
        [r for _, r in sorted(records, key=lambda kr: (kr[0], kr[1]["vcpus"], kr[1]["workload"]))],
        columns,
    )
    body = (
        what(
            "The spread of the overhead over workloads: for each vCPU count one box per scenario, of δη_r (extra "
            "cycles), δη_t (lost time efficiency) and ω (their ratio)."
        )
        + svg
        + how(
            "Each point is one workload's mean over its seeds. δη_r = (C_v − C_p)/C_p, δη_t = (t_v·γ_v − "
            "t_p·γ_p)/(t_p·γ_p), ω = (1 + δη_t)/(1 + δη_r): ω > 1 puts the overhead on the critical path. Boxes: "
            "quartiles and median; whiskers: the furthest points within 1.5 × the inter-quartile range; dots: every "
            "workload. Dotted line: no overhead (0 %, ω = 1). " + gamma_text(cells)
        )
    )
    return Section(title, anchor, body, (table,))


# --- (2) per workload: average and maximum, guest/host split --------------------------------


def split_parts(cell: Mapping[str, Any]) -> tuple[float | None, float | None]:
    """The guest and host parts of a VM cell's extra cycles, per measured instance:
    ((guest_ns/m − C_p)/C_p, (host_ns/m)/C_p) with m the number of measured instances."""
    cp = cell.get("c_native_ns")
    if not cp or cell.get("guest_ns") is None or cell.get("host_ns") is None:
        return None, None
    m = cell.get("measured") or 1
    return (cell["guest_ns"] / m - cp) / cp, (cell["host_ns"] / m) / cp


def overhead_records(cells: Sequence[Mapping[str, Any]], namer: Namer) -> list[dict[str, Any]]:
    """Per scenario (with k and threads when several), workload and variant: δη_t and δη_r
    averaged over vCPU counts and their maxima (with the vCPU count), and the guest/host parts
    on average and at δη_r's maximum. Each vCPU count's value is the mean over seeds."""
    per_n: dict[tuple[Any, ...], dict[int, list[Mapping[str, Any]]]] = {}
    for c in cells:
        if c.get("delta_eta_t") is None:
            continue
        per_n.setdefault((namer.key(c, variant=False), c["workload"], c["variant"]), {}).setdefault(
            c["vcpus"], []
        ).append(c)
    out = []
    for (key, workload, variant), by_n in sorted(per_n.items()):
        points: list[dict[str, Any]] = []
        for n, group in sorted(by_n.items()):
            parts = [split_parts(g) for g in group]
            points.append(
                {
                    "vcpus": n,
                    "dt": mean(g["delta_eta_t"] for g in group),
                    "dr": mean(g.get("delta_eta_r") for g in group),
                    "guest": mean(p[0] for p in parts),
                    "host": mean(p[1] for p in parts),
                }
            )
        dt_max = max((p for p in points if p["dt"] is not None), key=lambda p: p["dt"], default=None)
        dr_max = max((p for p in points if p["dr"] is not None), key=lambda p: p["dr"], default=None)
        out.append(
            {
                "scenario": key[1],
                "group": namer.label(key),
                "workload": workload,
                "variant": variant,
                "label": f"{workload} {variant}" if namer.variants else workload,
                "vcpu_counts": len(points),
                "dt_avg": mean(p["dt"] for p in points),
                "dt_max": dt_max and dt_max["dt"],
                "dt_max_vcpus": dt_max and dt_max["vcpus"],
                "dr_avg": mean(p["dr"] for p in points),
                "dr_max": dr_max and dr_max["dr"],
                "dr_max_vcpus": dr_max and dr_max["vcpus"],
                "guest_avg": mean(p["guest"] for p in points),
                "host_avg": mean(p["host"] for p in points),
                "guest_at_max": dr_max and dr_max["guest"],
                "host_at_max": dr_max and dr_max["host"],
            }
        )
    return out


def per_workload(data: StoreData, figs: Figures) -> Section:
    title, anchor = "Average and maximum overhead per workload", "per-workload"
    cells = vm_cells(data)
    if not any(c.get("delta_eta_t") is not None for c in cells):
        return Section.omit(title, anchor, "no VM cells (UC, OC or OC2) with metrics")
    namer = Namer(cells)
    records = overhead_records(cells, namer)
    body = what(
        "Per workload, δη_t and δη_r averaged over the vCPU counts and at their largest, with δη_r split into the "
        "extra cycles spent in the guest and those spent in the host (TPDS Fig. 4)."
    )
    for group in dict.fromkeys(r["group"] for r in records):
        rows = [r for r in records if r["group"] == group]
        bars = [
            F.OverheadBar(
                r["label"],
                r["dt_avg"],
                r["dt_max"],
                r["dr_avg"],
                r["dr_max"],
                r["guest_avg"],
                r["host_avg"],
                r["guest_at_max"],
                r["host_at_max"],
            )
            for r in rows
        ]
        body += f"<h3>{html.escape(group)}</h3>" + figs.html(
            functools.partial(F.overhead_bars, bars), f"overhead per workload, {group}"
        )
    body += how(
        "Per vCPU count the value is the mean over seeds; average: the mean over vCPU counts; maximum: the largest "
        "(the guest/host parts shown for the maximum are those at the vCPU count where δη_r is largest). Guest part = "
        "(G/m − C_p)/C_p, host part = (H/m)/C_p, with G the guest (user + kernel) busy time and H the host time "
        "charged to the VM(s), m the number of measured instances (k in OC/OC2 without a co-runner, else 1) and C_p "
        "the native cycles per instance; they add up to δη_r (black tick) except for host time charged to no VM (split "
        "evenly over the instances; usually tiny, host daemons when configured). The same parts decide the high guest "
        "/ high host categories below. " + gamma_text(cells)
    )
    columns = (
        "scenario",
        "variant",
        "workload",
        "vcpu_counts",
        "dt_avg",
        "dt_max",
        "dt_max_vcpus",
        "dr_avg",
        "dr_max",
        "dr_max_vcpus",
        "guest_avg",
        "host_avg",
        "guest_at_max",
        "host_at_max",
    )
    return Section(title, anchor, body, (Table.of("per_workload", records, columns),))


# --- (3) host time by exit reason -----------------------------------------------------------


def host_reason_label(reason: str) -> str:
    return HOST_REASON_NAMES.get(reason, reason.upper())


def host_exits(data: StoreData, figs: Figures) -> Section:
    title, anchor = "Host time by VM-exit reason", "host-exits"
    reasons = data.host_reasons
    cells = [c for c in vm_cells(data) if c.get("duration_s")]
    if not cells or not reasons:
        return Section.omit(title, anchor, "no VM cells with host time by exit reason (host_ns_* columns)")
    namer = Namer(cells)
    # % of the run's core time (cores = vCPUs) per reason; mean over seeds, then over workloads.
    per: dict[tuple[Any, ...], dict[int, dict[str, dict[str, list[float]]]]] = {}
    for c in cells:
        core_ns = c["duration_s"] * 1e9 * c["vcpus"]
        by_reason = per.setdefault(namer.key(c), {}).setdefault(c["vcpus"], {})
        for r in reasons:
            v = c.get(f"host_ns_{r}")
            by_reason.setdefault(r, {}).setdefault(c["workload"], []).append(100.0 * (v or 0) / core_ns)
    panels, rows = [], []
    for key in sorted(per):
        xs = sorted(per[key])
        stacks: dict[str, list[float]] = {}
        for r in reasons:
            col = []
            for n in xs:
                wl = per[key][n].get(r, {})
                col.append(mean(mean(v) for v in wl.values()) or 0.0)
            if any(col):
                stacks[host_reason_label(r)] = col
            for n, v in zip(xs, col, strict=True):
                if v:
                    rows.append(
                        {
                            "series": namer.label(key),
                            "scenario": key[1],
                            "variant": key[2],
                            "vcpus": n,
                            "reason": r,
                            "pct_core_time": v,
                        }
                    )
        panels.append(F.StackPanel(namer.label(key), xs, stacks))
    if not rows:
        return Section.omit(title, anchor, "the VM cells recorded no host time")
    body = (
        what(
            "Where the host spends its time for the VMs, by VM-exit reason and host activity, per vCPU count (TPDS "
            "Fig. 9)."
        )
        + figs.html(
            lambda: F.stacked_bars(panels, "host time (% of core time)"), "host time by exit reason per vCPU count"
        )
        + how(
            "Height: host time charged to the VMs' vCPUs for that reason (host_ns_<reason>, all VMs of the run, "
            "co-runners included) as a percentage of the run's core time (cores × run duration, cores = vCPUs); mean "
            "over seeds, then over workloads. Host scheduling includes switches to and from vCPU threads; halt polling "
            "counts successful and failed polls."
        )
    )
    columns = ("series", "scenario", "variant", "vcpus", "reason", "pct_core_time")
    return Section(title, anchor, body, (Table.of("host_exits", rows, columns),))


# --- (4) busy time per vCPU normalised to native ----------------------------------------------

MAX_RANK_PANELS = 30


def vcpu_cycles(data: StoreData, figs: Figures) -> Section:
    title, anchor = "Cycles per vCPU normalised to native", "per-vcpu"
    if "native" not in data.scenarios():
        return Section.omit(
            title, anchor, "no native cells: cycles per vCPU normalised to native needs scenario native"
        )
    if not vm_cells(data):
        return Section.omit(title, anchor, "no VM cells (UC, OC or OC2) to compare with native")
    busy = load_busy(data)
    native: dict[tuple[Any, ...], list[int]] = {}
    native_any: dict[tuple[Any, ...], list[int]] = {}
    for b in busy:
        if b["scenario"] == "native":
            native[(b["workload"], b["variant"], b["vcpus"], b["threads"], b["seed"])] = b["busy"]
            native_any.setdefault((b["workload"], b["vcpus"], b["threads"], b["seed"]), b["busy"])
    vm = [b for b in busy if b["scenario"] in VM_SCENARIOS]
    namer = Namer(vm)
    rows: list[dict[str, Any]] = []
    for b in vm:
        ref = native.get((b["workload"], b["variant"], b["vcpus"], b["threads"], b["seed"])) or native_any.get(
            (b["workload"], b["vcpus"], b["threads"], b["seed"])
        )
        if not ref:
            continue
        core_mean = sum(ref) / len(ref)
        if core_mean <= 0:
            continue
        ranked = sorted(range(len(b["busy"])), key=lambda i: -b["busy"][i])
        for rank, i in enumerate(ranked, 1):
            rows.append(
                {
                    "workload": b["workload"],
                    "series": namer.label(namer.key(b)),
                    "scenario": b["scenario"],
                    "variant": b["variant"],
                    "vcpus": b["vcpus"],
                    "threads": b["threads"],
                    "oc_vms": b["oc_vms"],
                    "seed": b["seed"],
                    "rank": rank,
                    "vcpu": i,
                    "busy_ns": b["busy"][i],
                    "native_core_mean_ns": core_mean,
                    "normalised": b["busy"][i] / core_mean,
                    "native_normalised": sorted(ref, reverse=True)[rank - 1] / core_mean if rank <= len(ref) else None,
                }
            )
    if not rows:
        return Section.omit(
            title, anchor, "no VM cell has a native cell with the same workload, vCPU count, threads and seed"
        )
    # The figure: the largest vCPU count of each workload; bars averaged over seeds by rank.
    panels = []
    for workload in sorted({r["workload"] for r in rows}):
        mine = [r for r in rows if r["workload"] == workload]
        n = max(r["vcpus"] for r in mine)
        mine = [r for r in mine if r["vcpus"] == n]
        series: dict[str, list[float]] = {}
        scen: dict[str, str] = {}
        keyed = sorted({(scenario_rank(r["scenario"]), r["series"]) for r in mine})
        for _, s in keyed:
            ranks = sorted({r["rank"] for r in mine if r["series"] == s})
            series[s] = [
                mean(r["normalised"] for r in mine if r["series"] == s and r["rank"] == k) or 0.0 for k in ranks
            ]
            scen[s] = next(r["scenario"] for r in mine if r["series"] == s)
        nat_ranks = sorted({r["rank"] for r in mine})
        nat = [mean(r["native_normalised"] for r in mine if r["rank"] == k) or 0.0 for k in nat_ranks]
        panels.append(F.RankPanel(f"{workload}, {n} vCPUs", series, nat, [scen[s] for s in series]))
    shown = panels[:MAX_RANK_PANELS]
    body = what(
        "Busy time of each vCPU of the measured VM, busiest first, relative to the average core of the native run: "
        "whether the overhead lands on one critical vCPU or spreads over all (TPDS Fig. 5)."
    ) + figs.html(lambda: F.rank_bars(shown, "busy time / native core mean"), "cycles per vCPU normalised to native")
    if len(panels) > len(shown):
        body += paragraph(f"Showing {len(shown)} of {len(panels)} workloads; the CSV has all.", "note")
    body += how(
        "normalised = busy_ns of the vCPU (guest user + guest kernel + host time charged to it; "
        "run.vms[0].vcpus[i].busy_ns) / the mean per-core busy time of the native cell with the same workload, vCPU "
        "count, threads and seed (run.core_busy_ns). vCPUs are ranked by busy time within each run; bars are means "
        "over seeds per rank, at each workload's largest vCPU count (the CSV has every count). Black line: the native "
        "cores ranked the same way (their mean is 1)."
    )
    columns = (
        "workload",
        "scenario",
        "variant",
        "vcpus",
        "threads",
        "oc_vms",
        "seed",
        "rank",
        "vcpu",
        "busy_ns",
        "native_core_mean_ns",
        "normalised",
        "native_normalised",
    )
    return Section(title, anchor, body, (Table.of("per_vcpu", rows, columns),))
