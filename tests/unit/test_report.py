"""Published comparisons, metric lookups and latency CDFs (vcpulab.report), without the simulator."""

from __future__ import annotations

import csv
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from vcpulab import report
from vcpulab.report import Published


def result(
    variant: str = "",
    scenario: str = "UC",
    workload: str = "ep",
    vcpus: int = 2,
    seed: int = 1,
    metrics: dict[str, float] | None = None,
    samples: list[int] | None = None,
) -> dict[str, Any]:
    tlb: dict[str, Any] = {"shootdowns": len(samples or [])}
    if samples is not None:
        tlb["samples_ns"] = samples
    instances = [{"name": "vm0", "background": False, "tlb": tlb}, {"name": "vm1", "background": True, "tlb": {}}]
    return {
        "workload": workload,
        "scenario": scenario,
        "vcpus": vcpus,
        "threads": vcpus,
        "seed": seed,
        "variant": variant,
        "omega": 1.25,
        "metrics": metrics or {},
        "run": {"instances": instances},
    }


def test_parse_info() -> None:
    text = json.dumps(
        {
            "published": [
                {"metric": "tlb_latency_mean_us", "value": 2, "source": "S4U", "where": {"vm.tlb": "pv"}},
            ],
            "report": {"columns": ["halt_poll_success_rate"], "cdf": "tlb_latency"},
            "variants": ["vm.tlb=ipi", "vm.tlb=pv"],
        }
    )
    info = report.parse_info(text)
    assert info.published == (Published("tlb_latency_mean_us", 2.0, "S4U", {"vm.tlb": "pv"}),)
    assert info.columns == ("halt_poll_success_rate",)
    assert info.cdf == "tlb_latency"
    assert info.variants == ("vm.tlb=ipi", "vm.tlb=pv")
    empty = report.parse_info('{"published": [], "report": {"columns": [], "cdf": null}, "variants": [""]}')
    assert empty.published == () and empty.columns == () and empty.cdf is None


def test_metric_value() -> None:
    r = result(metrics={"ple_exits": 3.0, "halt_poll_success_rate": 0.5})
    assert report.metric_value(r, "ple_exits") == 3.0
    assert report.metric_value(r, "omega") == 1.25  # a top-level result field
    assert report.metric_value(r, "tlb_latency_mean_us") is None
    assert report.metric_value(r, "workload") is None  # not a number
    assert report.metric_value({"workload": "ep"}, "ple_exits") is None  # no metrics at all
    # A dotted path reaches into the result's tables (exit counts, host time by reason).
    r = {"exits": {"HLT": 7}, "host_ns_by_reason": {"SCHED": 2.5}, "metrics": {"a.b": 1.0}}
    assert report.metric_value(r, "exits.HLT") == 7.0
    assert report.metric_value(r, "host_ns_by_reason.SCHED") == 2.5
    assert report.metric_value(r, "a.b") == 1.0  # a metric's own name comes first
    assert report.metric_value(r, "exits.PAUSE") is None and report.metric_value(r, "exits") is None


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ({}, True),
        ({"scenario": "UC"}, True),
        ({"scenario": "uc"}, True),  # case-insensitive
        ({"scenario": "OC"}, False),
        ({"workload": "ep"}, True),
        ({"workload": "lock"}, False),
        ({"vcpus": 8}, True),
        ({"vcpus": "8"}, True),
        ({"vcpus": 4}, False),
        ({"vm.tlb": "pv"}, True),
        ({"vm.tlb": "ipi"}, False),
        ({"vm.tlb": "p"}, False),  # a whole value, not a prefix
        ({"vm.halt_poll_ns": 200000}, True),  # a number, as the label shows it
        ({"vm.halt_poll_ns": 0}, False),
        ({"scenario": "UC", "vm.tlb": "pv", "vm.halt_poll_ns": 200000}, True),
        ({"scenario": "UC", "vm.tlb": "shoot4u"}, False),
        ({"host.ple_window": 4096}, False),  # neither varied nor in the spec
        ({"variant": "vm.tlb=pv;vm.halt_poll_ns=200000"}, True),
        ({"variant": "vm.tlb=pv"}, False),
        # a list matches any of its values
        ({"vm.tlb": ["ipi", "pv"]}, True),
        ({"vm.tlb": ["ipi", "shoot4u"]}, False),
        ({"workload": ["lock", "ep"], "vcpus": [4, 8]}, True),
        ({"workload": ["lock", "ep"], "vcpus": [4, 16]}, False),
        ({"variant": ["x", "vm.tlb=pv;vm.halt_poll_ns=200000"]}, True),
        ({"vm.tlb": []}, False),
    ],
)
def test_cell_matches(where: dict[str, Any], expected: bool) -> None:
    cell = {"workload": "ep", "scenario": "UC", "vcpus": 8, "threads": 8, "seed": 1}
    cell["variant"] = "vm.tlb=pv;vm.halt_poll_ns=200000"
    assert report.cell_matches(cell, where) is expected


def test_cell_matches_falls_back_to_the_spec_for_settings_not_varied() -> None:
    cell = {"workload": "ep", "scenario": "UC", "vcpus": 2, "threads": 2, "seed": 1, "variant": ""}
    settings = {"vm": {"tlb": "pv", "pv_spinlocks": True}}
    assert report.cell_matches(cell, {"vm.tlb": "pv"}, settings)
    assert not report.cell_matches(cell, {"vm.tlb": "ipi"}, settings)
    assert report.cell_matches(cell, {"vm.pv_spinlocks": True}, settings)
    assert not report.cell_matches(cell, {"vm.tlb": "pv"})
    # A varied key is decided by the label, whatever the spec's base value.
    assert not report.cell_matches({**cell, "variant": "vm.tlb=ipi"}, {"vm.tlb": "pv"}, settings)


def test_where_text() -> None:
    assert report.where_text({"scenario": "UC", "vm.tlb": "pv", "vcpus": 8, "x": True}) == (
        "scenario=UC, vm.tlb=pv, vcpus=8, x=true"
    )
    assert report.where_text({}) == ""
    assert report.where_text({"variant": ["fixed 512", "fixed 1024"], "vcpus": [4, 8]}) == (
        "variant=(fixed 512 | fixed 1024), vcpus=(4 | 8)"
    )


def test_compare_published_means_over_seeds() -> None:
    results = [
        result("vm.tlb=ipi", seed=1, metrics={"tlb_latency_mean_us": 10.0}),
        result("vm.tlb=pv", seed=1, metrics={"tlb_latency_mean_us": 2.0}),
        result("vm.tlb=pv", seed=2, metrics={"tlb_latency_mean_us": 4.0}),
        result("vm.tlb=pv", seed=3, scenario="OC", metrics={"tlb_latency_mean_us": 100.0}),
    ]
    published = [
        Published("tlb_latency_mean_us", 1.5, "S4U", {"scenario": "UC", "vm.tlb": "pv"}),
        Published("tlb_latency_mean_us", 1.0, "S4U", {"scenario": "OC2"}),
        Published("halt_poll_success_rate", 0.9, "paper", {"vm.tlb": "ipi"}),
        Published("tlb_latency_mean_us", 0.0, "zero", {"vm.tlb": "ipi"}),
    ]
    ok, not_run, not_measured, zero = report.compare_published(published, results)
    assert (ok.matched, ok.measured, ok.simulated, ok.status) == (2, 2, 3.0, "ok")
    assert ok.ratio == pytest.approx(2.0)
    assert (not_run.matched, not_run.simulated, not_run.ratio, not_run.status) == (0, None, None, "not run")
    assert (not_measured.matched, not_measured.simulated, not_measured.status) == (1, None, "not measured")
    assert zero.simulated == 10.0 and zero.ratio is None  # no ratio to a published zero


def test_compare_published_relates_to_the_baseline_seed_by_seed() -> None:
    # What `vcpulab run` shows for a ratio entry is the scoreboard's statistic, not a plain mean.
    results = [
        result("vm.tlb=ipi", seed=1, metrics={"tlb_latency_mean_us": 10.0}),
        result("vm.tlb=pv", seed=1, metrics={"tlb_latency_mean_us": 5.0}),
        result("vm.tlb=ipi", seed=2, metrics={"tlb_latency_mean_us": 40.0}),
        result("vm.tlb=pv", seed=2, metrics={"tlb_latency_mean_us": 10.0}),
    ]
    entry = Published("tlb_latency_mean_us", 0.5, "x", {"vm.tlb": "pv"}, relative_to={"vm.tlb": "ipi"})
    (c,) = report.compare_published([entry], results)
    assert c.simulated == pytest.approx((0.5 + 0.25) / 2)


def test_compare_published_skips_runs_without_the_metric() -> None:
    results = [result(seed=1, metrics={"ple_exits": 4.0}), result(seed=2)]
    (c,) = report.compare_published([Published("ple_exits", 2.0, "x", {})], results)
    assert (c.matched, c.measured, c.simulated, c.ratio) == (2, 1, 4.0, 2.0)


def test_quantile_is_nearest_rank() -> None:
    values = list(range(1, 101))
    assert report.quantile(values, 0.10) == 10
    assert report.quantile(values, 0.50) == 50
    assert report.quantile(values, 0.99) == 99
    assert report.quantile(values, 1.0) == 100
    assert report.quantile([7], 0.5) == 7
    assert report.quantile([], 0.5) is None


def test_tlb_samples_come_from_instance_0_sorted() -> None:
    assert report.tlb_samples_ns(result(samples=[3000, 1000, 2000])) == [1000, 2000, 3000]
    assert report.tlb_samples_ns(result()) == []  # not recorded / no shootdowns
    assert report.tlb_samples_ns({"workload": "ep"}) == []


def test_cdf_summary() -> None:
    s = report.cdf_summary(result(samples=[1000 * i for i in range(100, 0, -1)]))
    assert s.count == 100
    assert s.quantiles_us == {"p10": 10.0, "p50": 50.0, "p90": 90.0, "p99": 99.0, "max": 100.0}
    empty = report.cdf_summary(result())
    assert empty.count == 0 and set(empty.quantiles_us.values()) == {None}


def test_cdf_csv(tmp_path: Path) -> None:
    results = [
        result("vm.tlb=ipi", samples=[4000, 1000, 2000, 3000]),
        result("vm.tlb=pv", samples=[]),
        result("vm.tlb=pv", seed=2, samples=[500]),
    ]
    path = tmp_path / "cdf.csv"
    report.write_cdf_csv(path, results)
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == list(report.CDF_CSV_COLUMNS)
    assert [(r["variant"], r["seed"], r["latency_us"], r["cdf"]) for r in rows] == [
        ("vm.tlb=ipi", "1", "1", "0.25"),
        ("vm.tlb=ipi", "1", "2", "0.5"),
        ("vm.tlb=ipi", "1", "3", "0.75"),
        ("vm.tlb=ipi", "1", "4", "1"),
        ("vm.tlb=pv", "2", "0.5", "1"),
    ]
    assert {(r["scenario"], r["workload"], r["vcpus"]) for r in rows} == {("UC", "ep", "2")}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cdf.csv"]  # no temporary file left


def test_cdf_png_path() -> None:
    assert report.cdf_png_path("out/cdf.csv") == Path("out/cdf.png")
    assert report.cdf_png_path("cdf") == Path("cdf.png")


def test_cdf_png_without_matplotlib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib…` raise ImportError
    assert report.write_cdf_png(tmp_path / "cdf.png", [result(samples=[1000])]) is False
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="matplotlib not installed")
def test_cdf_png(tmp_path: Path) -> None:
    path = tmp_path / "cdf.png"
    results = [result("vm.tlb=ipi", samples=[4000, 1000, 30000]), result("vm.tlb=pv", samples=[])]
    assert report.write_cdf_png(path, results) is True
    assert path.read_bytes().startswith(b"\x89PNG")
    empty = tmp_path / "empty.png"
    assert report.write_cdf_png(empty, [result()]) is True  # a plot saying there is nothing to plot
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cdf.png", "empty.png"]
