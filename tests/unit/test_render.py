from __future__ import annotations

from vcpulab import render


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
