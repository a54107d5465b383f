from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from vcpulab import render
from vcpulab.report import CdfSummary, Comparison, Published


def test_number_formats() -> None:
    assert render.fmt_seconds(None) == "—"
    assert render.fmt_seconds(1.5) == "1.5 s"
    assert render.fmt_seconds(0.0123) == "12.3 ms"
    assert render.fmt_seconds(42e-6) == "42 µs"
    assert render.fmt_seconds(5e-9) == "5 ns"
    assert render.fmt_seconds(0.0) == "0 s"
    assert render.fmt_pct(0.123) == "+12.3%"
    assert render.fmt_pct(-0.05) == "-5.0%"
    assert render.fmt_rate(12345.0) == "12.3 k"
    assert render.fmt_rate(3.2e6) == "3.2 M"


def test_exit_summaries() -> None:
    virt = {
        "scenario": "UC",
        "t_virt_s": 2.0,
        "duration_s": 2.0,
        "exits": {"HLT": 30, "MSR_ICR": 10},
        "host_ns_by_reason": {"HLT": 300, "MSR_ICR": 700, "PLE": 0},
        "host_ns": 1000,
    }
    assert render.exits_per_second(virt) == 20.0
    assert render.top_host_reason(virt) == "MSR_ICR 70%"
    native = {"scenario": "native", "t_virt_s": None, "exits": {}, "host_ns_by_reason": {}, "host_ns": 0}
    assert render.exits_per_second(native) is None
    assert render.top_host_reason(native) == "—"


def _text(renderable: object) -> str:
    console = Console(file=io.StringIO(), width=400, record=True)
    console.print(renderable)
    return console.export_text()


def _result(variant: str, metrics: dict[str, float], seed: int = 1) -> dict[str, Any]:
    return {
        "workload": "ep",
        "scenario": "UC",
        "vcpus": 2,
        "threads": 2,
        "seed": seed,
        "variant": variant,
        "t_native_s": 1.0,
        "t_virt_s": 1.1,
        "delta_eta_t": 0.1,
        "delta_eta_r": 0.1,
        "omega": 1.0,
        "weighted_speedup": 1.0,
        "exits": {},
        "host_ns_by_reason": {},
        "duration_s": 1.1,
        "metrics": metrics,
    }


def test_metric_formats() -> None:
    assert render.fmt_metric("halt_poll_success_rate", 0.853) == "85.3%"
    assert render.fmt_metric("halt_poll_success_rate", 1.0) == "100.0%"
    assert render.fmt_metric("tlb_latency_mean_us", 5.2359) == "5.24"
    assert render.fmt_metric("tlb_shootdowns", 196.0) == "196"
    assert render.fmt_metric("tlb_shootdowns_per_s", 18357.6) == "18.4 k"
    assert render.fmt_metric("ple_exits", 0.0) == "0"
    assert render.fmt_metric("ple_exits", None) == "—"
    assert render.fmt_us(None) == "—"
    assert render.fmt_us(4.025) == "4.03"
    assert render.fmt_us(11467.2) == "11,467"


def test_results_table_variant_and_report_columns() -> None:
    results = [
        _result("vm.tlb=ipi", {"halt_poll_success_rate": 0.5, "tlb_shootdowns": 12.0}),
        _result("vm.tlb=pv", {"tlb_shootdowns": 3.0}),
    ]
    text = _text(render.results_table(results, ["halt_poll_success_rate", "tlb_shootdowns"]))
    header = next(line for line in text.splitlines() if "workload" in line)
    assert header.index("variant") < header.index("workload")
    assert "halt_poll_success_rate" in header and "tlb_shootdowns" in header
    ipi = next(line for line in text.splitlines() if "vm.tlb=ipi" in line)
    pv = next(line for line in text.splitlines() if "vm.tlb=pv" in line)
    assert "50.0%" in ipi and ipi.rstrip(" │").endswith("12")
    assert "—" in pv and pv.rstrip(" │").endswith("3")
    assert "2 scenario simulations" in text  # each variant is its own simulation
    plain = _text(render.results_table([_result("", {"tlb_shootdowns": 1.0})]))
    assert "variant" not in plain and "tlb_shootdowns" not in plain


def test_published_table() -> None:
    comparisons = [
        Comparison(Published("tlb_latency_mean_us", 2.0, "S4U §5", {"scenario": "UC", "vm.tlb": "pv"}), 2, 2, 3.0),
        Comparison(Published("halt_poll_success_rate", 0.8, "KVM docs", {}), 1, 1, 0.6),
        Comparison(Published("tlb_latency_mean_us", 1.0, "x", {"vm.tlb": "pv"}), 1, 0, None),
        Comparison(Published("omega", 1.0, "y", {"scenario": "OC2"}), 0, 0, None),
    ]
    lines = _text(render.published_table(comparisons)).splitlines()
    assert lines[0].startswith("Published comparison")
    row = next(line for line in lines if "S4U" in line)
    assert "scenario=UC, vm.tlb=pv" in row and "3" in row and "1.50×" in row and "2/2" in row
    rate = next(line for line in lines if "KVM docs" in line)
    assert "60.0%" in rate and "80.0%" in rate and "0.75×" in rate and "all cells" in rate
    assert "not measured" in next(line for line in lines if "│ x" in line)
    assert "not run" in next(line for line in lines if "│ y" in line)


def test_cdf_table() -> None:
    results = [_result("vm.tlb=ipi", {}), _result("vm.tlb=pv", {})]
    summaries = [
        CdfSummary(4, {"p10": 1.0, "p50": 2.0, "p90": 3.0, "p99": 4.0, "max": 4.0}),
        CdfSummary(0, {"p10": None, "p50": None, "p90": None, "p99": None, "max": None}),
    ]
    lines = _text(render.cdf_table(results, summaries)).splitlines()
    header = next(line for line in lines if "p50" in line)
    assert [h for h in ("variant", "samples", "p10", "p50", "p90", "p99", "max") if h not in header] == []
    assert "seed" not in header
    ipi = next(line for line in lines if "vm.tlb=ipi" in line)
    assert [c.strip() for c in ipi.split("│")][1:-1] == ["vm.tlb=ipi", "ep", "UC", "2", "4", "1", "2", "3", "4", "4"]
    pv = next(line for line in lines if "vm.tlb=pv" in line)
    assert [c.strip() for c in pv.split("│")][5:-1] == ["0"] + ["—"] * 5


def test_cells_table_and_label_show_the_variant() -> None:
    cell = {"workload": "ep", "scenario": "UC", "vcpus": 2, "threads": 2, "seed": 1, "variant": "vm.tlb=pv"}
    assert render.cell_label(cell) == "ep UC 2 vCPUs seed 1 [vm.tlb=pv]"
    assert render.cell_label({**cell, "variant": ""}) == "ep UC 2 vCPUs seed 1"
    assert "vm.tlb=pv" in _text(render.cells_table([cell]))
    assert "variant" not in _text(render.cells_table([{**cell, "variant": ""}]))
