"""Memory and NUMA (TPDS §6.1 and §7.2): CPI per vCPU count natively and
in each VM series, remote memory accesses normalised to native per placement (NUMA hidden,
exposed, numad, ...) and a table of the memory model's metrics; and the compact summary that
``vcpulab run`` prints (:func:`console_wanted`, :func:`console_rows`).

Everything here reads the metrics the memory model adds to a result (``cpi``,
``mem_remote_fraction``, ``mem_local_accesses``, ``mem_remote_accesses``, ``mem_bw_util_max``,
``numad_*``) and the ``memory_stall`` cause of its breakdown; a store without ``cpi`` has no
memory section.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import figures as F
from .common import Figures, Namer, how, mean, what
from .data import StoreData, load_memory, scenario_rank
from .page import Section, Table, paragraph
from .published import metric_value

MAX_PANELS = 30

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">")
"""One hollow marker per series: series that coincide (a placement that changed nothing) stay
visible under each other."""

GROUP = ("workload", "scenario", "variant", "vcpus", "threads", "oc_vms")
"""A row of the memory table: a cell without its seed."""

NUMAD = ("numad_moves", "numad_migrated_mib", "numad_host_ms")

COLUMNS = (
    *GROUP,
    "seeds",
    "cpi",
    "remote_fraction",
    "local_accesses",
    "remote_accesses",
    "native_remote_accesses",
    "remote_vs_native",
    "bw_util_max",
    "memory_stall_share",
)

FORMATS = {
    "cpi": "ratio",
    "remote_fraction": "frac",
    "remote_vs_native": "ratio",
    "bw_util_max": "ratio",
    "memory_stall_share": "frac",
    "seeds": "int",
}


def memory_records(cells: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per cell without its seed (:data:`GROUP`), means over seeds of the memory metrics (rows of
    :func:`~vcpulab.report.data.load_memory`).

    ``remote_vs_native`` is the cell's remote accesses over those of the native cell with the same
    workload, vCPU count, threads and seed (same variant if stored, else any), per seed, then
    averaged; it is None where that native cell has no remote access (the ratio is undefined) and
    for native cells. ``memory_stall_share`` is ``ns_user_memory_stall`` / ``busy_ns``."""
    native: dict[tuple[Any, ...], Mapping[str, Any]] = {}
    native_any: dict[tuple[Any, ...], Mapping[str, Any]] = {}
    for c in cells:
        if c["scenario"] == "native":
            native[(c["workload"], c["variant"], c["vcpus"], c["threads"], c["seed"])] = c
            native_any.setdefault((c["workload"], c["vcpus"], c["threads"], c["seed"]), c)
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for c in cells:
        point: dict[str, Any] = {
            "cpi": c.get("cpi"),
            "remote_fraction": c.get("mem_remote_fraction"),
            "local_accesses": c.get("mem_local_accesses"),
            "remote_accesses": c.get("mem_remote_accesses"),
            "bw_util_max": c.get("mem_bw_util_max"),
            "memory_stall_share": (c.get("ns_user_memory_stall") or 0.0) / c["busy_ns"] if c.get("busy_ns") else None,
            **{k: c.get(k) for k in NUMAD},
        }
        if c["scenario"] != "native":
            ref = native.get((c["workload"], c["variant"], c["vcpus"], c["threads"], c["seed"])) or native_any.get(
                (c["workload"], c["vcpus"], c["threads"], c["seed"])
            )
            ref_remote = ref.get("mem_remote_accesses") if ref is not None else None
            point["native_remote_accesses"] = ref_remote
            if ref_remote and c.get("mem_remote_accesses") is not None:
                point["remote_vs_native"] = c["mem_remote_accesses"] / ref_remote
        groups.setdefault(tuple(c[k] for k in GROUP), []).append(point)
    out = []
    for key, points in groups.items():
        record: dict[str, Any] = dict(zip(GROUP, key, strict=True))
        record["seeds"] = len(points)
        for name in (*COLUMNS[len(GROUP) + 1 :], *NUMAD):
            record[name] = mean(p.get(name) for p in points)
        out.append(record)
    out.sort(key=lambda r: (r["workload"], scenario_rank(r["scenario"]), r["scenario"], r["variant"], *_rest(r)))
    return out


def _rest(r: Mapping[str, Any]) -> tuple[int, int, int]:
    return (r["oc_vms"], r["threads"], r["vcpus"])


def unaffected(record: Mapping[str, Any]) -> bool:
    """Whether the memory model left a :func:`memory_records` row alone: CPI 1 (up to float
    noise) and nothing remote."""
    cpi, remote = record.get("cpi"), record.get("remote_fraction")
    return (cpi is None or abs(cpi - 1.0) < 1e-9) and not remote


def native_labels(values: Mapping[str, Mapping[Any, Any]], prefix: str = "native") -> dict[str, str]:
    """A label per variant for the native runs: variants whose native values (``values[variant]``,
    any comparable mapping) are all equal share one line, ``prefix`` alone when there is one such
    group, else ``prefix`` and the group's variants joined by ``/``. A placement that changes
    native runs too (``machine.placement``) keeps its own line."""
    groups: list[tuple[Mapping[Any, Any], list[str]]] = []
    for variant, v in values.items():
        for ref, members in groups:
            if ref == v:
                members.append(variant)
                break
        else:
            groups.append((v, [variant]))
    if len(groups) <= 1:
        return {v: prefix for v in values}
    return {v: f"{prefix} {'/'.join(m or '(none)' for m in members)}" for _, members in groups for v in members}


def _signature(records: Iterable[Mapping[str, Any]]) -> dict[str, dict[tuple[Any, ...], tuple[Any, ...]]]:
    """variant → its native records' values (rounded: equal up to float noise)."""
    out: dict[str, dict[tuple[Any, ...], tuple[Any, ...]]] = {}
    for r in records:
        values = tuple(None if r[k] is None else float(f"{r[k]:.9g}") for k in ("cpi", "remote_fraction"))
        out.setdefault(r["variant"], {})[(r["workload"], r["vcpus"], r["threads"])] = values
    return out


# --- the section ------------------------------------------------------------------------------


def memory(data: StoreData, figs: Figures) -> Section | None:
    """The section, or None when no cell has ``cpi`` (the memory model was off)."""
    title, anchor = "Memory and NUMA", "memory"
    records = memory_records(load_memory(data))
    if not records:
        return None
    numad = any(r.get("numad_moves") is not None for r in records)
    columns = (*COLUMNS, *NUMAD) if numad else COLUMNS
    body = what(
        "How the memory placement slows the computation down (CPI) and where memory is served from, natively and in "
        "each VM series, per vCPU count (TPDS §6.1 and §7.2: CPI and remote accesses rise once a VM spans sockets "
        "with NUMA hidden from the guest)."
    )
    if numad or not all(unaffected(r) for r in records):
        series = _Series(records)
        body += "<h3>CPI per vCPU count</h3>" + _cpi_figure(series, figs)
        body += "<h3>Memory locality</h3>" + _locality(series, figs)
    else:
        body += paragraph(
            "Every cell ran at CPI 1 with all memory accesses local (each run fits one node and no node's bandwidth "
            "saturated), so the figures, flat lines at CPI 1 and no remote access, are left out.",
            "note",
        )
    table = Table.of("memory", records, columns, shown=True, caption="Memory and NUMA per cell", formats=FORMATS)
    body += "<h3>Per cell</h3>"
    body += (
        f"<details><summary>The table ({len(records)} rows)</summary>{table.html()}</details>"
        if len(records) > 60
        else table.html()
    )
    body += how(
        "Means over seeds. cpi: metrics.cpi; remote_fraction: metrics.mem_remote_fraction (accesses served by "
        "another node or by a cross-socket cache transfer); local_accesses, remote_accesses: estimated counts; "
        "native_remote_accesses: those of the native cell the row is normalised to; remote_vs_native: remote_accesses "
        "/ native_remote_accesses per seed (empty where native has none); bw_util_max: the highest per-node mean "
        "bandwidth demand over the node's bandwidth (above 1: the node is saturated); memory_stall_share: breakdown "
        "cause memory_stall over the run's busy time (the sum of its breakdown, co-runners included)"
        + (
            "; numad_*: what the numad-like balancer did (moves, MiB migrated, host ms charged as numa_migrate)."
            if numad
            else "."
        )
    )
    return Section(title, anchor, body, (table,))


class _Series:
    """The lines of the memory figures: the native runs (one per group of variants whose native
    runs are identical, grey) then each VM series (:class:`Namer`), each with its colour, line
    style and hollow marker; ``label[i]`` is the line of ``records[i]``."""

    def __init__(self, records: Sequence[Mapping[str, Any]]) -> None:
        self.records = records
        nat = [r for r in records if r["scenario"] == "native"]
        namer = Namer(records)
        groups = native_labels(_signature(nat))
        self.label = [
            groups[r["variant"]] + (f" {r['threads']} threads" if namer.threads else "")
            if r["scenario"] == "native"
            else namer.label(namer.key(r))
            for r in records
        ]
        self.natives = list(
            dict.fromkeys(s for s, r in zip(self.label, records, strict=True) if r["scenario"] == "native")
        )
        keys = sorted({namer.key(r) for r in records if r["scenario"] != "native"})
        vms = [namer.label(k) for k in keys]
        self.order = self.natives + vms
        self.colors = {s: F.SCENARIO_COLORS["native"] for s in self.natives} | F.colors_for(vms, [k[1] for k in keys])
        self.styles = {s: ("-", "--", "-.", ":")[i % 4] for i, s in enumerate(self.natives)} | {s: "-" for s in vms}
        self.markers = {s: MARKERS[i % len(MARKERS)] for i, s in enumerate(self.order)}
        self.workloads = list(dict.fromkeys(r["workload"] for r in records))

    def panels(
        self, field: str, ylabel: str, reference: float | None, native: bool = True, cpi: bool = False
    ) -> list[F.LinePanel]:
        """One panel per workload of ``field`` over the vCPU counts, a line per series (without
        the native ones unless ``native``), a dotted line at ``reference``; ``cpi``: the y axis
        spans at least 1 to 1.1, so that a compute-bound workload looks flat."""
        panels = []
        for workload in self.workloads:
            lines = []
            for s in self.order:
                if not native and s in self.natives:
                    continue
                pts = sorted(
                    (r["vcpus"], r[field])
                    for r, label in zip(self.records, self.label, strict=True)
                    if r["workload"] == workload and label == s and r[field] is not None
                )
                if pts:
                    xs, ys = [x for x, _ in pts], [y for _, y in pts]
                    look = self.styles[s], self.markers[s], self.colors[s]
                    lines.append(F.Line(s, xs, ys, style=look[0], marker=look[1], color=look[2], hollow=True))
            if not lines:
                continue
            counts = sorted({x for ln in lines for x in ln.xs})
            ylim = None
            if cpi:
                ys = [y for ln in lines for y in ln.ys]
                lo, hi = min([1.0, *ys]), max([1.1, *ys])
                ylim = (lo - 0.04 * (hi - lo), hi + 0.04 * (hi - lo))
            if reference is not None:
                lines.append(F.Line("", [counts[0], counts[-1]], [reference, reference], style=":", color="#999"))
            panels.append(
                F.LinePanel(workload, lines, "vCPUs", ylabel, logx=True, logx_base=2, xticks=counts, ylim=ylim)
            )
        return panels

    def draw(self, panels: Sequence[F.LinePanel], figs: Figures, label: str) -> str:
        """The panels (at most :data:`MAX_PANELS`) with a legend of the series they show."""
        shown = panels[:MAX_PANELS]
        used = {ln.label for p in shown for ln in p.lines}
        legend = [(s, self.colors[s], self.styles[s], self.markers[s]) for s in self.order if s in used]
        out = figs.html(lambda: F.line_panels(shown, ncols=3, width=3.8, height=2.9, shared_legend=legend), label)
        if len(shown) < len(panels):
            out += paragraph(f"Showing {len(shown)} of {len(panels)} workloads; the CSV has all.", "note")
        return out


def _cpi_figure(series: _Series, figs: Figures) -> str:
    panels = series.panels("cpi", "CPI", 1.0, cpi=True)
    return series.draw(panels, figs, "CPI per vCPU count") + how(
        "CPI: cycles per instruction of the measured instance's computation (metrics.cpi), mean over seeds; 1 (dotted) "
        "is native speed with all memory local and unloaded; higher is time lost to remote memory, saturated node "
        "bandwidth or data shared across sockets (the memory_stall cause). Grey lines: the native runs (one line per "
        "group of variants whose native runs are identical); vCPUs on a log2 axis; the y axis spans at least 1 to 1.1."
    )


def _locality(series: _Series, figs: Figures) -> str:
    out = what(
        "Remote memory accesses of each VM series relative to native at the same workload and vCPU count, so that "
        "the placements (variants: NUMA hidden, exposed, numad, ...) can be compared; and the share of accesses "
        "served remotely, which is defined where the ratio is not."
    )
    if not series.natives:
        out += paragraph(
            "No native cells: remote accesses normalised to native need scenario native; the remote fraction is shown.",
            "note",
        )
    else:
        ratio = series.panels("remote_vs_native", "remote accesses / native", 1.0, native=False)
        if ratio:
            out += series.draw(ratio, figs, "remote memory accesses normalised to native")
            out += how(
                "Remote accesses of the VM cell (metrics.mem_remote_accesses) over those of the native cell with the "
                "same workload, vCPU count, threads and seed (same variant if stored, else any), per seed, then the "
                "mean. Where the native run has no remote access (it fits one node) the ratio is undefined and not "
                "drawn: the remote fraction below shows those vCPU counts instead. Dotted: as many as native (1)."
            )
        else:
            out += paragraph(
                "No native cell has remote accesses (every native run fits one node): the ratio to native is "
                "undefined, so the remote fraction is shown instead.",
                "note",
            )
    fraction = series.panels("remote_fraction", "remote fraction", None)
    out += series.draw(fraction, figs, "fraction of memory accesses served remotely")
    out += how(
        "metrics.mem_remote_fraction: remote accesses (another node, or a cross-socket cache transfer) over all "
        "accesses of the measured instance, mean over seeds; native runs in grey; vCPUs on a log2 axis."
    )
    return out


# --- what `vcpulab run` prints ----------------------------------------------------------------


POINT_METRICS = ("cpi", "mem_remote_fraction", "mem_bw_util_max", "numad_host_ms")
"""The metrics of a :class:`MemoryPoint`, in its fields' order."""


@dataclass(frozen=True)
class MemoryPoint:
    """Means over seeds of one (workload, scenario, variant, vCPU count)."""

    cpi: float | None
    remote_fraction: float | None
    bw_util_max: float | None
    numad_host_ms: float | None


@dataclass(frozen=True)
class MemoryRow:
    """One line of the console table: a workload, scenario and variant (native rows: the variants
    whose native runs are identical, joined by ``/``) over its vCPU counts."""

    workload: str
    scenario: str
    variant: str
    points: Mapping[int, MemoryPoint]


def _run(row: Mapping[str, Any]) -> Mapping[str, Any]:
    """``run`` of a result object, or parsed from a stored row's ``run_json``."""
    run = row.get("run")
    if isinstance(run, Mapping):
        return run
    text = row.get("run_json")
    parsed = json.loads(text) if isinstance(text, str) else None
    return parsed if isinstance(parsed, Mapping) else {}


def console_wanted(rows: Sequence[Mapping[str, Any]]) -> bool:
    """Whether ``vcpulab run`` prints the memory table: some row has ``cpi`` and either numad was
    on (``numad_*`` metrics) or some run spans more than one socket (``run.sockets_used``)."""
    have = [r for r in rows if metric_value(r, "cpi") is not None]
    if not have:
        return False
    if any(metric_value(r, "numad_moves") is not None for r in have):
        return True
    return any((_run(r).get("sockets_used") or 0) > 1 for r in have)


def console_rows(rows: Sequence[Mapping[str, Any]]) -> list[MemoryRow]:
    """The rows with ``cpi`` (result objects or stored rows), one :class:`MemoryRow` per workload,
    scenario and variant, in the order of the workloads' first appearance."""
    groups: dict[tuple[str, str, str], dict[int, list[Mapping[str, Any]]]] = {}
    for r in rows:
        if metric_value(r, "cpi") is None:
            continue
        key = (str(r["workload"]), str(r["scenario"]), str(r.get("variant") or ""))
        groups.setdefault(key, {}).setdefault(int(r["vcpus"]), []).append(r)
    points: dict[tuple[str, str, str], dict[int, MemoryPoint]] = {}
    for key, by_n in groups.items():
        points[key] = {
            n: MemoryPoint(*(mean(metric_value(r, m) for r in rs) for m in POINT_METRICS))
            for n, rs in sorted(by_n.items())
        }
    out: list[MemoryRow] = []
    for workload in dict.fromkeys(k[0] for k in points):
        mine = sorted(((k, v) for k, v in points.items() if k[0] == workload), key=lambda kv: scenario_rank(kv[0][1]))
        native = {k[2]: v for k, v in mine if k[1] == "native"}
        labels = native_labels(native, prefix="")
        if len(native) > 1 and len(set(labels.values())) == 1:
            labels = dict.fromkeys(native, "all")
        seen: set[str] = set()
        for (_, scenario, variant), pts in mine:
            if scenario == "native":
                variant = labels[variant].strip()
                if variant in seen:
                    continue
                seen.add(variant)
            out.append(MemoryRow(workload, scenario, variant, pts))
    return out
