"""The memory and NUMA section of the HTML report and the memory table of `vcpulab run`
(vcpulab.report.memory), on synthetic stores with known numbers: the section appears only when
the rows carry `cpi`, remote accesses are normalised to the matching native cell per seed, the
memory_stall share and the numad columns, and the console's gating and native grouping."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from vcpulab import render, report
from vcpulab.report import figures, memory
from vcpulab.report.data import load, load_memory
from vcpulab.store import ResultsStore, run_row

SPEC = '[experiment]\nworkloads = ["w"]\n'


def result(
    workload: str,
    scenario: str,
    vcpus: int,
    seed: int = 1,
    variant: str = "",
    *,
    mem: dict[str, float] | None = None,
    stall: int = 0,
    sockets: int = 1,
) -> dict[str, Any]:
    """A result object with what the report reads; ``mem`` the memory metrics (without it the
    memory model was off), ``stall`` the memory_stall ns of a busy time of 1000 ns (compute 900 −
    stall, kernel 100)."""
    native = scenario == "native"
    t = 1.0 / vcpus
    c = t * vcpus * 1e9
    metrics: dict[str, Any] = {"parallelism": float(vcpus)}
    metrics.update(mem or {})
    user = {"compute": 900 - stall} | ({"memory_stall": stall} if stall else {})
    return {
        "workload": workload,
        "scenario": scenario,
        "vcpus": vcpus,
        "threads": vcpus,
        "oc_vms": 2,
        "seed": seed,
        "variant": variant,
        "workload_version": 1,
        "workload_hash": "h",
        "t_native_s": t,
        "t_virt_s": None if native else t * 1.1,
        "delta_eta_r": None if native else 0.05,
        "delta_eta_t": None if native else 0.1,
        "omega": None if native else 1.1 / 1.05,
        "weighted_speedup": None if native else 1.0,
        "c_native_ns": c,
        "c_virt_ns": None if native else c * 1.05,
        "guest_ns": int(c),
        "host_ns": 0 if native else int(c * 0.05),
        "events": 10,
        "duration_s": t,
        "wall_s": 0.01,
        "exits": {} if native else {"HLT": 1},
        "host_ns_by_reason": {} if native else {"HLT": int(c * 0.05)},
        "breakdown": {"user": user, "kernel": {"syscall": 100}},
        "metrics": metrics,
        "instances": [{"name": "i0", "finish_s": t}],
        "run": {
            "core_busy_ns": [int(c / vcpus)] * vcpus,
            "sockets_used": sockets,
            "vms": [] if native else [{"vm": 0, "vcpus": [{"busy_ns": int(c / vcpus)}] * vcpus}],
            "instances": [{"name": "i0", "compute_ns": int(c * 0.8), "finish_ns": int(t * 1e9), "tlb": {}}],
        },
    }


def mem(cpi: float, remote: float, local: float = 1000.0, bw: float = 0.5, **numad: float) -> dict[str, float]:
    total = local + remote
    return {
        "cpi": cpi,
        "mem_remote_fraction": remote / total if total else 0.0,
        "mem_local_accesses": local,
        "mem_remote_accesses": remote,
        "mem_bw_util_max": bw,
        **numad,
    }


def make_store(root: Path, results: list[dict[str, Any]]) -> ResultsStore:
    store = ResultsStore(root)
    with store.writer() as w:
        w.save_spec("abc123", SPEC)
        w.append(
            "runs",
            [
                run_row(r, key=f"k{i}", config_key=f"c{i}", spec_hash="abc123", version="0.1.0+test")
                for i, r in enumerate(results)
            ],
        )
    return store


def numa_results() -> list[dict[str, Any]]:
    """Workload w at 8 and 32 vCPUs, seeds 1 and 2, variants hidden and exposed (identical native
    runs) and spread (its own native runs). At 8 vCPUs nothing is remote; at 32, native has 100
    (seed 1) or 50 (seed 2) remote accesses, hidden 300 and 100, exposed as native."""
    rs = []
    for v in ("hidden", "exposed", "spread"):
        for seed, nat_remote, hid_remote in ((1, 100.0, 300.0), (2, 50.0, 100.0)):
            spread = v == "spread"
            rs.append(result("w", "native", 8, seed, v, mem=mem(1.4 if spread else 1.0, 200.0 if spread else 0.0)))
            rs.append(result("w", "UC", 8, seed, v, mem=mem(1.5 if spread else 1.0, 400.0 if spread else 0.0)))
            n32 = 400.0 if spread else nat_remote
            rs.append(result("w", "native", 32, seed, v, mem=mem(1.2, n32), stall=100, sockets=2))
            uc_remote = {"hidden": hid_remote, "exposed": nat_remote, "spread": 800.0}[v]
            rs.append(result("w", "UC", 32, seed, v, mem=mem(1.3, uc_remote), stall=200, sockets=2))
    return rs


def rows_of(table: report.Table) -> list[dict[str, Any]]:
    return [dict(zip(table.columns, r, strict=True)) for r in table.rows]


@pytest.fixture(scope="module")
def numa_report(tmp_path_factory: pytest.TempPathFactory) -> report.Report:
    return report.build_report(make_store(tmp_path_factory.mktemp("numa") / "res", numa_results()))


def section(rep: report.Report) -> report.Section:
    return next(s for s in rep.sections if s.anchor == "memory")


# --- the HTML section -------------------------------------------------------------------------


def test_no_section_without_cpi(tmp_path: Path) -> None:
    store = make_store(tmp_path / "res", [result("w", s, n) for s in ("native", "UC") for n in (8, 32)])
    assert load_memory(load(store)) == []
    rep = report.build_report(store)
    assert "memory" not in {s.anchor for s in rep.sections}
    assert "memory.csv" not in rep.tables()
    assert "Memory and NUMA" not in rep.html()


def test_section_has_both_figures_and_the_table(numa_report: report.Report, tmp_path: Path) -> None:
    s = section(numa_report)
    assert not s.omitted and s.title == "Memory and NUMA"
    assert [t.name for t in s.tables] == ["memory"]
    for label in (
        "CPI per vCPU count",
        "remote memory accesses normalised to native",
        "fraction of memory accesses served remotely",
    ):
        assert f'aria-label="{label}"' in s.html
    assert s.html.count('<svg class="plot"') == 3
    order = [x.anchor for x in numa_report.sections]
    assert order.index("ple-window") < order.index("memory") < order.index("speedup")
    report.write_report(numa_report, tmp_path / "r.html")
    text = (tmp_path / "r_csv" / "memory.csv").read_text()
    header = next(csv.reader(io.StringIO(text)))
    assert header == list(memory.COLUMNS)  # no numad columns: numad was never on
    assert "numad" not in header


def test_remote_accesses_normalised_to_native_per_seed(numa_report: report.Report) -> None:
    rows = rows_of(section(numa_report).tables[0])
    by = {(r["scenario"], r["variant"], r["vcpus"]): r for r in rows}
    # hidden at 32: 300/100 (seed 1) and 100/50 (seed 2): the mean of the ratios, 2.5 (not 200/75).
    hidden = by[("UC", "hidden", 32)]
    assert hidden["remote_vs_native"] == pytest.approx(2.5)
    assert hidden["native_remote_accesses"] == pytest.approx(75.0)
    assert hidden["seeds"] == 2 and hidden["remote_accesses"] == pytest.approx(200.0)
    assert by[("UC", "exposed", 32)]["remote_vs_native"] == pytest.approx(1.0)
    # spread is normalised to its own native runs (400), not to hidden's.
    assert by[("UC", "spread", 32)]["remote_vs_native"] == pytest.approx(2.0)
    assert by[("UC", "spread", 8)]["remote_vs_native"] == pytest.approx(2.0)
    # Native without remote accesses: undefined, and native rows are never normalised.
    assert by[("UC", "hidden", 8)]["remote_vs_native"] is None
    assert by[("UC", "hidden", 8)]["native_remote_accesses"] == 0
    assert by[("native", "hidden", 32)]["remote_vs_native"] is None
    # The fraction and the memory_stall share of the breakdown's busy time (stall / 1000 ns).
    assert hidden["remote_fraction"] == pytest.approx((300 / 1300 + 100 / 1100) / 2)
    assert hidden["memory_stall_share"] == pytest.approx(0.2)
    assert by[("native", "hidden", 32)]["memory_stall_share"] == pytest.approx(0.1)
    assert by[("UC", "hidden", 8)]["memory_stall_share"] == 0.0
    assert hidden["cpi"] == pytest.approx(1.3) and hidden["bw_util_max"] == pytest.approx(0.5)
    html = section(numa_report).html
    assert "undefined" in html and "remote fraction below shows those vCPU counts" in html


def test_native_lines_group_identical_variants(numa_report: report.Report) -> None:
    html = section(numa_report).html
    labels = memory.native_labels({"hidden": {1: 1.0}, "exposed": {1: 1.0}, "spread": {1: 2.0}})
    assert labels == {"hidden": "native hidden/exposed", "exposed": "native hidden/exposed", "spread": "native spread"}
    assert memory.native_labels({"a": {1: 1.0}, "b": {1: 1.0}}) == {"a": "native", "b": "native"}
    assert memory.native_labels({"": {}}) == {"": "native"}
    assert "Grey lines: the native runs" in html


def test_numad_columns_when_numad_was_on(tmp_path: Path) -> None:
    numad = {"numad_moves": 1.0, "numad_migrated_mib": 500.0, "numad_host_ms": 125.0}
    rs = [
        result("w", "native", 32, mem=mem(1.2, 100.0), sockets=2),
        result("w", "UC", 32, mem=mem(1.0, 10.0, **numad), sockets=2),
    ]
    (table,) = section(report.build_report(make_store(tmp_path / "res", rs))).tables
    assert table.columns[-3:] == memory.NUMAD
    uc = next(r for r in rows_of(table) if r["scenario"] == "UC")
    assert (uc["numad_moves"], uc["numad_migrated_mib"], uc["numad_host_ms"]) == (1.0, 500.0, 125.0)
    assert uc["remote_vs_native"] == pytest.approx(0.1)


def test_locality_without_native_or_without_native_remote_accesses(tmp_path: Path) -> None:
    vm_only = [result("w", "UC", n, mem=mem(1.0, 10.0)) for n in (8, 32)]
    s = section(report.build_report(make_store(tmp_path / "vm", vm_only)))
    assert "No native cells" in s.html and s.html.count('<svg class="plot"') == 2
    local = [
        result("w", sc, n, mem=mem(1.0, 0.0 if sc == "native" else 5.0)) for sc in ("native", "UC") for n in (8, 32)
    ]
    s = section(report.build_report(make_store(tmp_path / "local", local)))
    assert "No native cell has remote accesses" in s.html and s.html.count('<svg class="plot"') == 2
    assert all(r["remote_vs_native"] is None for r in rows_of(s.tables[0]))


def test_no_figures_when_the_memory_model_changed_nothing(tmp_path: Path) -> None:
    flat = [result("w", sc, n, mem=mem(1.0, 0.0)) for sc in ("native", "UC") for n in (2, 4)]
    s = section(report.build_report(make_store(tmp_path / "flat", flat)))
    assert not s.omitted and "Every cell ran at CPI 1" in s.html
    assert '<svg class="plot"' not in s.html and len(s.tables[0].rows) == 4
    # numad on is worth showing even if it changed nothing.
    numad = [*flat, result("w", "UC", 8, mem=mem(1.0, 0.0, numad_moves=0.0, numad_host_ms=0.0))]
    s = section(report.build_report(make_store(tmp_path / "numad", numad)))
    assert "Every cell ran at CPI 1" not in s.html and '<svg class="plot"' in s.html
    assert memory.unaffected({"cpi": 1.0 + 1e-12, "remote_fraction": 0.0})
    assert not memory.unaffected({"cpi": 1.01, "remote_fraction": 0.0})
    assert not memory.unaffected({"cpi": 1.0, "remote_fraction": 0.01})


def test_log2_axis_ticks_and_hollow_markers_draw() -> None:
    line = figures.Line("UC", [4, 8, 64], [1.0, 1.2, 1.5], marker="s", hollow=True)
    panel = figures.LinePanel("w", [line], "vCPUs", "CPI", logx=True, logx_base=2, xticks=[4, 8, 64], ylim=(1, 2))
    with figures.style():
        fig = figures.line_panels([panel], shared_legend=[("UC", "#123456", "-", "s")])
        ax = fig.axes[0]
        assert [t.get_text() for t in ax.get_xticklabels()] == ["4", "8", "64"]
        assert ax.get_xscale() == "log" and ax.get_ylim() == (1, 2)
        assert "<path" in figures.to_svg(fig, "m")


# --- what `vcpulab run` prints ----------------------------------------------------------------


def test_console_table_only_for_multi_socket_runs_or_numad() -> None:
    one_socket = [result("w", "UC", 8, mem=mem(1.0, 0.0))]
    assert not memory.console_wanted(one_socket)
    assert memory.console_wanted([*one_socket, result("w", "UC", 32, mem=mem(1.2, 9.0), sockets=2)])
    assert memory.console_wanted([result("w", "UC", 8, mem=mem(1.0, 0.0, numad_host_ms=0.0, numad_moves=0.0))])
    assert not memory.console_wanted([result("w", "UC", 32, sockets=2)])  # no cpi: the memory model was off
    # Stored rows (a large sweep's overview) carry the metrics as columns and run as JSON text.
    stored = run_row(
        result("w", "UC", 32, mem=mem(1.2, 9.0), sockets=2), key="k", config_key="c", spec_hash="h", version="v"
    )
    assert memory.console_wanted([stored])
    assert json.loads(stored["run_json"])["sockets_used"] == 2


def test_console_rows_group_native_variants_and_average_seeds() -> None:
    rs = numa_results()
    rows = memory.console_rows(rs)
    assert [(r.scenario, r.variant) for r in rows] == [
        ("native", "hidden/exposed"),
        ("native", "spread"),
        ("UC", "hidden"),
        ("UC", "exposed"),
        ("UC", "spread"),
    ]
    hidden = rows[2].points[32]
    assert hidden.cpi == pytest.approx(1.3)
    assert hidden.remote_fraction == pytest.approx((300 / 1300 + 100 / 1100) / 2)
    assert hidden.numad_host_ms is None
    flat = [run_row(r, key=f"k{i}", config_key="c", spec_hash="h", version="v") for i, r in enumerate(rs)]
    assert memory.console_rows(flat) == rows
    same = [r for r in rs if r["variant"] != "spread"]
    assert [r.variant for r in memory.console_rows(same) if r.scenario == "native"] == ["all"]


def test_console_table_text() -> None:
    rs = [
        result("w", "native", 32, mem=mem(1.21, 23.0, 77.0, bw=0.15), sockets=2),
        result("w", "UC", 32, variant="hidden", mem=mem(1.274, 43.0, 57.0, bw=0.13), sockets=2),
        result(
            "w", "UC", 32, variant="numad", mem=mem(1.007, 2.0, 98.0, bw=0.16, numad_host_ms=125.0, numad_moves=1.0)
        ),
    ]
    console = Console(record=True, width=160)
    console.print(render.memory_table(memory.console_rows(rs)))
    text = console.export_text()
    assert "Memory and NUMA: CPI / remote / bandwidth / numad host time (mean over seeds)" in text
    assert "1.210 / 23% / 0.15 " in text  # native: no numad part
    assert "1.274 / 43% / 0.13 " in text  # numad off in this row
    assert "1.007 / 2% / 0.16 / 125 ms" in text
    assert "32 vCPUs" in text and "numad host time (rows with numad on)" in text
