"""Sections on mechanisms and scaling: TLB-shootdown latency CDFs per policy (S4U Fig. 5), the
PLE window over time (APPLES) and speedup curves with the scalability types (DIS ch. 4)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from .. import scaling
from . import figures as F
from .common import Figures, Namer, how, mean, what
from .data import CELL_KEY, StoreData, _query, load_ple_series, load_tlb, scenario_rank
from .page import Section, Table, paragraph
from .published import quantile

MAX_PANELS = 24


def _panel_key(r: Mapping[str, Any]) -> tuple[Any, ...]:
    return (r["workload"], scenario_rank(r["scenario"]), r["scenario"], r["vcpus"], r["threads"], r["oc_vms"])


def _panel_title(key: tuple[Any, ...], namer: Namer) -> str:
    workload, _, scenario, vcpus, threads, k = key
    title = f"{workload}, {scenario}, {vcpus} vCPUs"
    if namer.ks and scenario in ("OC", "OC2"):
        title += f", k={k}"
    if namer.threads:
        title += f", {threads} threads"
    return title


def _limit(panels: list[tuple[Any, ...]], weight: Mapping[tuple[Any, ...], float]) -> list[tuple[Any, ...]]:
    """At most MAX_PANELS panel keys: the largest vCPU count of each workload first, then the
    heaviest (``weight``), in their natural order."""
    if len(panels) <= MAX_PANELS:
        return panels
    top: dict[Any, int] = {}
    for p in panels:
        if p[0] not in top or p[3] > top[p[0]]:
            top[p[0]] = p[3]
    kept = [p for p in panels if p[3] == top[p[0]]]
    if len(kept) > MAX_PANELS:
        kept = sorted(sorted(kept, key=lambda p: -weight.get(p, 0.0))[:MAX_PANELS])
    return kept


# --- (5) TLB-shootdown latency CDFs -----------------------------------------------------------


QCOLS = (
    "workload",
    "scenario",
    "variant",
    "vcpus",
    "threads",
    "oc_vms",
    "seeds",
    "source",
    "count",
    "mean_us",
    "p10_us",
    "p50_us",
    "p90_us",
    "p99_us",
    "max_us",
)


def _quantile_table(summary: Sequence[Mapping[str, Any]]) -> tuple[Table, str]:
    table = Table.of(
        "tlb_latency",
        summary,
        QCOLS,
        shown=True,
        caption="TLB-shootdown latency (µs)",
        formats={c: "us" for c in QCOLS if c.endswith("_us")} | {"count": "int"},
    )
    if len(summary) > 60:
        return table, f"<details><summary>Quantiles ({len(summary)} rows)</summary>{table.html()}</details>"
    return table, table.html()


def tlb_cdfs(data: StoreData, figs: Figures) -> Section:
    title, anchor = "TLB-shootdown latency", "tlb"
    rows = load_tlb(data)
    if not rows:
        return Section.omit(title, anchor, "no TLB shootdowns recorded: the workloads' measured instances sent none")
    if any(r["samples_ns"] for r in rows):
        section = _tlb_samples(title, anchor, [r for r in rows if r["samples_ns"]], figs)
    else:
        section = _tlb_summaries(title, anchor, rows, figs)
    return _with_decomposition(section, rows)


def _with_decomposition(section: Section, rows: list[dict[str, Any]]) -> Section:
    """Adds the latency's decomposition by the targets' states (seeds summed) to the section."""
    sums: dict[tuple[Any, ...], dict[str, list[float]]] = {}
    for r in rows:
        key = (r["workload"], r["scenario"], r["variant"] or "", r["vcpus"], r["threads"], r["oc_vms"])
        for state, s in (r.get("by_state") or {}).items():
            acc = sums.setdefault(key, {}).setdefault(state, [0.0, 0.0, 0.0])
            acc[0] += float(s.get("targets") or 0)
            acc[1] += float(s.get("wait_ns") or 0)
            acc[2] += float(s.get("critical_ns") or 0)
    if section.omitted or not sums:
        return section
    out = []
    for key, states in sorted(sums.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
        targets = sum(v[0] for v in states.values()) or 1.0
        latency = sum(v[2] for v in states.values()) or 1.0
        for state, (n, wait, crit) in sorted(states.items()):
            out.append(
                {
                    **dict(zip(("workload", "scenario", "variant", "vcpus", "threads", "oc_vms"), key, strict=True)),
                    "state": state,
                    "targets_share": n / targets,
                    "mean_wait_us": wait / n / 1000.0 if n and wait else None,
                    "latency_share": crit / latency,
                }
            )
    cols = ("workload", "scenario", "variant", "vcpus", "threads", "oc_vms", "state", "targets_share")
    table = Table.of("tlb_decomposition", out, (*cols, "mean_wait_us", "latency_share"))
    table = dataclasses.replace(
        table,
        shown=True,
        caption="Where the latency comes from: per cell, the shootdown targets by their state when the shootdown "
        "reached them (running, in the host, halt-polling, halted, preempted, idle, deferred, or the Shoot4U "
        "hypervisor), their mean time to acknowledge, and the share of the summed latency whose last "
        "acknowledgement came from a target in that state (metrics tlb_critical_share_<state>).",
    )
    shown = table.html()
    if len(out) > 60:
        shown = f"<details><summary>Decomposition ({len(out)} rows)</summary>{shown}</details>"
    return dataclasses.replace(section, html=section.html + shown, tables=(*section.tables, table))


def _tlb_samples(title: str, anchor: str, rows: list[dict[str, Any]], figs: Figures) -> Section:
    namer = Namer(rows)
    groups: dict[tuple[Any, ...], dict[str, list[dict[str, Any]]]] = {}
    for r in rows:
        groups.setdefault(_panel_key(r), {}).setdefault(r["variant"] or r["scenario"], []).append(r)
    summary, points = [], []
    weight: dict[tuple[Any, ...], float] = {}
    panels_by_key: dict[tuple[Any, ...], F.LinePanel] = {}
    for key in sorted(groups):
        lines = []
        for label, members in groups[key].items():
            base = {
                "workload": key[0],
                "scenario": key[2],
                "vcpus": key[3],
                "threads": key[4],
                "oc_vms": key[5],
                "variant": members[0]["variant"],
                "seeds": len(members),
            }
            samples = sorted(s for m in members for s in m["samples_ns"])  # seeds pooled
            n = len(samples)
            xs = [s / 1000.0 for s in samples]
            ys = [(i + 1) / n for i in range(n)]
            drawn_x, drawn_y = F.thin(xs, ys)
            pos = [(x, y) for x, y in zip(drawn_x, drawn_y, strict=True) if x > 0]
            if pos:
                px, py = zip(*pos, strict=True)
                lines.append(F.Line(label, [px[0], *px], [0.0, *py], step=True))
            q = {name: quantile(samples, p) for name, p in (("p10", 0.1), ("p50", 0.5), ("p90", 0.9), ("p99", 0.99))}
            summary.append(
                {
                    **base,
                    "source": "samples",
                    "count": n,
                    "mean_us": sum(samples) / n / 1000.0,
                    **{f"{k}_us": (v / 1000.0 if v is not None else None) for k, v in q.items()},
                    "max_us": samples[-1] / 1000.0,
                }
            )
            points += [{**base, "latency_us": x, "cdf": y} for x, y in zip(drawn_x, drawn_y, strict=True)]
            weight[key] = max(weight.get(key, 0.0), float(n))
        if lines:
            panels_by_key[key] = F.LinePanel(_panel_title(key, namer), lines, "latency (µs)", "CDF", logx=True)
    keys = _limit(list(panels_by_key), weight)
    shown = [panels_by_key[k] for k in keys]
    body = what(
        "The distribution of TLB-shootdown latency seen by the sender, one line per policy (variant), as in S4U Fig. 5."
    )
    body += figs.html(lambda: F.line_panels(shown, ncols=2), "TLB-shootdown latency CDFs")
    if len(shown) < len(panels_by_key):
        body += paragraph(
            f"Showing {len(shown)} of {len(panels_by_key)} panels (largest vCPU count first); the CSV has all.", "note"
        )
    body += how(
        "Latency from the decision to flush remote CPUs until the sender sees the last acknowledgement, of the "
        "measured instance (run.instances[0].tlb.samples_ns, recorded with [record] tlb_samples = true); seeds "
        f"pooled; quantiles nearest-rank. At most {F.MAX_POINTS} points per line are drawn (evenly spaced ranks); "
        "tlb_cdf.csv has the drawn points."
    )
    table, shown_html = _quantile_table(summary)
    pcols = ("workload", "scenario", "variant", "vcpus", "threads", "oc_vms", "latency_us", "cdf")
    return Section(title, anchor, body + shown_html, (table, Table.of("tlb_cdf", points, pcols)))


def _tlb_summaries(title: str, anchor: str, rows: list[dict[str, Any]], figs: Figures) -> Section:
    namer = Namer(rows)
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        if r["latency"].get("count"):
            groups.setdefault((*namer.key(r), r["workload"], r["variant"], r["vcpus"]), []).append(r)
    summary = []
    for (*key, workload, variant, n), members in sorted(groups.items()):
        lat = [m["latency"] for m in members]
        count = sum(int(x["count"]) for x in lat)
        summary.append(
            {
                "workload": workload,
                "scenario": key[1],
                "variant": variant,
                "vcpus": n,
                "threads": members[0]["threads"],
                "oc_vms": members[0]["oc_vms"],
                "seeds": len(members),
                "source": "log2 summary",
                "count": count,
                "mean_us": sum(float(x.get("mean_ns") or 0) * int(x["count"]) for x in lat) / count / 1000.0,
                "p50_us": (mean(x.get("p50_ns") for x in lat) or 0.0) / 1000.0,
                "p99_us": (mean(x.get("p99_ns") for x in lat) or 0.0) / 1000.0,
                "max_us": max(float(x.get("max_ns") or 0) for x in lat) / 1000.0,
                "_series": namer.label(tuple(key)),
            }
        )
    if not summary:
        return Section.omit(title, anchor, "no TLB-shootdown latencies recorded")
    panels = []
    for series in dict.fromkeys(r["_series"] for r in summary):
        mine = [r for r in summary if r["_series"] == series]
        workloads = list(dict.fromkeys(r["workload"] for r in mine))
        counts = sorted({r["vcpus"] for r in mine})
        by = {(r["workload"], r["vcpus"]): r for r in mine}
        ranges = {
            f"{n} vCPUs": [
                (by[(w, n)]["p50_us"], by[(w, n)]["mean_us"], by[(w, n)]["max_us"]) if (w, n) in by else None
                for w in workloads
            ]
            for n in counts
        }
        panels.append(F.RangePanel(series, workloads, ranges, "TLB-shootdown latency (µs)"))
    body = what(
        "TLB-shootdown latency of each workload's measured instance, per scenario and vCPU count, from the runs' "
        "latency summaries (they did not record samples, so there are no CDFs)."
    )
    body += figs.html(lambda: F.range_dots(panels), "TLB-shootdown latency ranges")
    body += how(
        "Line: from the p50 log2-bucket upper bound (not an exact quantile) to the maximum; dot: the mean; means over "
        "seeds (the maximum: the largest). Set [record] tlb_samples = true for exact CDFs per policy."
    )
    for r in summary:
        del r["_series"]
    table, shown_html = _quantile_table(summary)
    return Section(title, anchor, body + shown_html, (table,))


# --- (6) PLE window over time ---------------------------------------------------------------


def ple_window(data: StoreData, figs: Figures) -> Section:
    title, anchor = "PLE window over time", "ple-window"
    rows = load_ple_series(data)
    if not rows:
        return Section.omit(title, anchor, "no PLE window series recorded: set [record] ple_window = true in the spec")
    namer = Namer(rows)
    first_seed: dict[tuple[Any, ...], int] = {}
    for r in rows:
        k = (*_panel_key(r), r["variant"])
        first_seed[k] = min(first_seed.get(k, r["seed"]), r["seed"])
    points = []
    panels_by_key: dict[tuple[Any, ...], list[F.Line]] = {}
    weight: dict[tuple[Any, ...], float] = {}
    for r in rows:
        key = _panel_key(r)
        for vm, series in enumerate(r["series"]):
            for t, w in series:
                points.append(
                    {
                        "workload": r["workload"],
                        "scenario": r["scenario"],
                        "variant": r["variant"],
                        "vcpus": r["vcpus"],
                        "threads": r["threads"],
                        "oc_vms": r["oc_vms"],
                        "seed": r["seed"],
                        "vm": vm,
                        "t_ns": t,
                        "window_cycles": w,
                    }
                )
            if r["seed"] != first_seed[(*key, r["variant"])] or not series:
                continue
            label = " ".join(x for x in (r["variant"], f"VM {vm}" if len(r["series"]) > 1 else "") if x) or "VM 0"
            ts = [t / 1e9 for t, _ in series]
            ws = [w for _, w in series]
            panels_by_key.setdefault(key, []).append(F.Line(label, [*ts], [*ws], step=True))
            weight[key] = weight.get(key, 0.0) + len(series)
    keys = _limit(sorted(panels_by_key), weight)
    shown = [F.LinePanel(_panel_title(k, namer), panels_by_key[k], "time (s)", "PLE window (cycles)") for k in keys]
    body = what(
        "How the pause-loop-exiting window of each VM evolves during the run, one line per policy (variant) and VM, as "
        "in the APPLES study (DIS ch. 3)."
    )
    body += figs.html(lambda: F.line_panels(shown, ncols=2), "PLE window over time")
    if len(shown) < len(panels_by_key):
        body += paragraph(f"Showing {len(shown)} of {len(panels_by_key)} panels; the CSV has all.", "note")
    body += how(
        "run.vms[i].ple_window_series: [t_ns, window_cycles] recorded at every window change ([record] ple_window = "
        f"true); the first seed of each cell is drawn (at most {F.MAX_POINTS} points per line, evenly spaced), the CSV "
        "has every seed and point."
    )
    cols = ("workload", "scenario", "variant", "vcpus", "threads", "oc_vms", "seed", "vm", "t_ns", "window_cycles")
    return Section(title, anchor, body, (Table.of("ple_window", points, cols),))


# --- (7) speedup curves -----------------------------------------------------------------------


def speedup_records(cells: Sequence[Mapping[str, Any]], namer: Namer) -> list[dict[str, Any]]:
    """Per workload, series and vCPU count: the mean time over seeds, the measured speedup
    ``t(n₀) / t(n)`` relative to the smallest count (the one of ``vcpulab run``:
    :func:`vcpulab.scaling.speedup_series`), the same scaled to one vCPU assuming linear scaling
    up to n₀ (:func:`vcpulab.scaling.speedup_linear_to_n0`) and the mean efficiency-based speedup
    the simulator computed (``eff_speedup``). ``cells`` are stored runs (with their
    ``eff_speedup`` column when the store has one)."""
    groups: dict[tuple[Any, ...], dict[int, list[Mapping[str, Any]]]] = {}
    variant: dict[tuple[Any, ...], str] = {}
    for c in cells:
        if scaling.run_time(c) is not None:
            key = (c["workload"], namer.key(c))
            groups.setdefault(key, {}).setdefault(c["vcpus"], []).append(c)
            variant[key] = c["variant"]
    out = []
    for (workload, key), by_n in sorted(groups.items()):
        times = {n: [t for c in group if (t := scaling.run_time(c)) is not None] for n, group in by_n.items()}
        n0, series = scaling.speedup_series(times)
        t0 = series[0].t_s
        for p in series:
            out.append(
                {
                    "workload": workload,
                    "series": namer.label(key),
                    "scenario": key[1],
                    "variant": variant[(workload, key)],
                    "vcpus": p.vcpus,
                    "seeds": p.runs,
                    "t_s": p.t_s,
                    "speedup": p.speedup,
                    "speedup_linear_to_n0": scaling.speedup_linear_to_n0(n0, t0, p.t_s),
                    "efficiency_speedup": scaling.mean_eff_speedup(by_n[p.vcpus]),
                }
            )
    return out


def _with_eff_speedup(data: StoreData) -> list[dict[str, Any]]:
    """The store's cells with their ``eff_speedup`` column (the simulator's efficiency-based
    speedup) when the store has it."""
    if not data.has("eff_speedup"):
        return data.cells
    key = tuple(CELL_KEY)
    eff = {tuple(r[k] for k in key): r["eff_speedup"] for r in _query(data, "eff_speedup")}
    return [{**c, "eff_speedup": eff.get(tuple(c[k] for k in key))} for c in data.cells]


def speedup(data: StoreData, figs: Figures, categories: Sequence[Mapping[str, Any]]) -> Section:
    title, anchor = "Speedup and scalability types", "speedup"
    counts = data.vcpu_counts()
    if len(counts) < 2:
        return Section.omit(
            title, anchor, f"one vCPU count only ({counts[0] if counts else 'none'}): speedup curves need at least two"
        )
    namer = Namer(data.cells)
    records = speedup_records(_with_eff_speedup(data), namer)
    types: dict[str, dict[int, int]] = {}
    for c in categories:
        if c.get("scalability_type") is not None:
            types.setdefault(c["workload"], {})[c["vcpus"]] = c["scalability_type"]
    all_series = list(dict.fromkeys(r["series"] for r in records))
    colors = F.colors_for(all_series, [next(r["scenario"] for r in records if r["series"] == s) for s in all_series])
    panels = []
    for workload in dict.fromkeys(r["workload"] for r in records):
        mine = [r for r in records if r["workload"] == workload]
        lines = []
        for s in dict.fromkeys(r["series"] for r in mine):
            pts = [r for r in mine if r["series"] == s]
            if len(pts) < 2:
                continue
            s1 = [r["speedup_linear_to_n0"] for r in pts]
            lines.append(F.Line(f"{s} S₁", [r["vcpus"] for r in pts], s1, marker="o", color=colors[s]))
            e = [r for r in pts if r["efficiency_speedup"] is not None]
            if len(e) >= 2:
                lines.append(
                    F.Line(
                        f"{s} E",
                        [r["vcpus"] for r in e],
                        [r["efficiency_speedup"] for r in e],
                        style="--",
                        color=colors[s],
                    )
                )
        if not lines:
            continue
        t = types.get(workload, {})
        kinds = sorted(set(t.values()))
        label = (
            ""
            if not kinds
            else (
                f", type {kinds[0]}"
                if len(kinds) == 1
                else ", types " + ", ".join(f"{v} at {n}" for n, v in sorted(t.items()))
            )
        )
        panels.append(F.LinePanel(f"{workload}{label}", lines, "vCPUs (n)", "speedup", ideal=True))
    legend = [(s, colors[s], "-") for s in all_series] + [
        ("S₁: time-based, per vCPU", "#333", "-"),
        ("E: efficiency-based", "#333", "--"),
        ("ideal (S₁ = n)", "#999", ":"),
    ]
    if not panels:
        return Section.omit(title, anchor, "no series with two or more vCPU counts")
    shown = panels[:30]
    body = what(
        "How each workload scales with the vCPU count, natively and in each VM scenario: the time-based speedup per "
        "vCPU S₁ (solid) and the efficiency-based speedup E (dashed), with the workload's scalability type."
    )
    body += figs.html(
        lambda: F.line_panels(shown, ncols=3, width=3.8, height=2.9, shared_legend=legend), "speedup curves"
    )
    if len(shown) < len(panels):
        body += paragraph(f"Showing {len(shown)} of {len(panels)} workloads; the CSV has all.", "note")
    body += how(
        "speedup (CSV) = t(n₀) / t(n), the measured speedup relative to the smallest vCPU count n₀ of the series, as "
        "`vcpulab run` shows it; t is t_native for native and t_virt (the measured instances' mean completion time) in "
        "VMs; mean over seeds. S₁ (plotted; CSV speedup_linear_to_n0) = n₀ · t(n₀) / t(n): the same normalised to one "
        "vCPU on the assumption that the series scaled linearly up to n₀ (S₁(n₀) = n₀; S₁ = speedup when n₀ = 1), so "
        "that it reads against the ideal S₁ = n and against E. E(n) = eff_speedup, the simulator's efficiency-based "
        "speedup (DIS ch.4) N × useful / available: natively N − (idle + busy-waiting time) / run time, in a VM N − N "
        "× (busy-waiting + switch-out overhead + unused slice − borrowed) / allocated slice; mean over seeds. "
        "Dotted: ideal (S₁ = n). "
        "Series that share a simulation draw on top of each other (OC and OC2 share their VM run). Scalability type "
        "(DIS ch.4, from the native cell): 1 high parallelism / low synchronization, 2 low/high, 3 high/high, 4 "
        "low/low."
    )
    cols = (
        "workload",
        "scenario",
        "variant",
        "vcpus",
        "seeds",
        "t_s",
        "speedup",
        "speedup_linear_to_n0",
        "efficiency_speedup",
    )
    return Section(title, anchor, body, (Table.of("speedup", records, cols),))
