"""Scalability, performance spread and asymmetric vCPUs (vcpulab.scaling): speedup curves, the
efficiency decomposition, the spread over a varied key, variant labels and baselines with extra
parts, and what `vcpulab run` prints of them."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from conftest import RunCli, one_line_error
from vcpulab import ple, render, scaling

# Two named variants × two co-runners: labels "symmetric;experiment.corunner=cpuhog", ...
SPEC = """\
[experiment]
workloads = ["forkjoin_imbalanced"]
scenarios = ["native", "OC"]
vcpus = [1, 2]
oc_vms = 2
vary = { "experiment.corunner" = ["cpuhog", "hackbench"] }

[[experiment.variants]]
name = "symmetric"

[[experiment.variants]]
name = "asym"
set = { "host.asymmetric.allocation" = true, "host.asymmetric.latency" = true }

[workloads.forkjoin_imbalanced.params]
iterations = 10

[report]
baseline = "symmetric"
scalability = true
spread = "experiment.corunner"
"""

TITLES = (
    "Speedup over vCPU counts: measured / efficiency-based",
    "Efficiency decomposition (% of available time",
    "Performance spread over experiment.corunner (σ: population standard deviation over its values and seeds)",
    "Asymmetric vCPUs ([host.asymmetric]; mean per cell)",
)


def row(
    t: float | None,
    *,
    variant: str = "",
    workload: str = "fj",
    scenario: str = "OC",
    vcpus: int = 1,
    seed: int = 1,
    eff: dict[str, float] | None = None,
    asym: dict[str, Any] | None = None,
    migrations: tuple[int, ...] = (),
) -> dict[str, Any]:
    """A result dict with the fields vcpulab.scaling reads; ``t`` is t_virt (t_native natively)."""
    native = scenario == "native"
    run: dict[str, Any] = {"vms": [] if native else [{"vm": 0, "vcpus": [{"migrations": m} for m in migrations]}]}
    if asym is not None:
        run["asymmetric"] = asym
    return {
        "variant": variant,
        "workload": workload,
        "scenario": scenario,
        "vcpus": vcpus,
        "threads": vcpus,
        "oc_vms": 2,
        "seed": seed,
        "t_native_s": t if native else 1.0,
        "t_virt_s": None if native else t,
        "metrics": dict(eff or {}),
        "run": run,
    }


def rendered(table: Any) -> str:
    buf = io.StringIO()
    Console(file=buf, width=250).print(table)
    return buf.getvalue()


# --- variant labels ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("label", "name", "parts"),
    [
        ("", None, ()),
        ("KVM", "KVM", ()),
        ("vm.tlb=pv", None, (("vm.tlb", "pv"),)),
        ("asym;experiment.corunner=matmul", "asym", (("experiment.corunner", "matmul"),)),
        ("vm.tlb=pv;vm.x=1", None, (("vm.tlb", "pv"), ("vm.x", "1"))),
        ("fixed 512;k=a=b", "fixed 512", (("k", "a=b"),)),  # a value with '='
        ("n;k=a;b;j=2", "n", (("k", "a;b"), ("j", "2"))),  # a string value with ';'
    ],
)
def test_parse_label_takes_a_label_apart_and_back(label: str, name: str | None, parts: tuple[Any, ...]) -> None:
    parsed = scaling.parse_label(label)
    assert (parsed.name, parsed.parts) == (name, parts)
    assert str(parsed) == label


def test_label_values_and_the_label_without_a_key() -> None:
    label = scaling.parse_label("asym;experiment.corunner=matmul;vm.tlb=pv")
    assert label.value("experiment.corunner") == "matmul" and label.value("nosuch") is None
    assert str(label.without("experiment.corunner")) == "asym;vm.tlb=pv"
    assert str(scaling.parse_label("experiment.corunner=matmul").without("experiment.corunner")) == ""


def test_variant_keys_and_names_in_order_of_appearance() -> None:
    labels = ["a;k=1;j=x", "b;k=1;j=y", "a;k=2;j=x", "", None]
    assert scaling.variant_keys(labels) == ["k", "j"]
    assert scaling.variant_names(labels) == ["a", "b"]
    assert scaling.variant_keys(["KVM", "APLE"]) == []


def test_baseline_label_swaps_the_name_and_keeps_the_other_parts() -> None:
    key = "experiment.corunner"
    assert scaling.baseline_label(f"asym;{key}=matmul", "symmetric") == f"symmetric;{key}=matmul"
    assert scaling.baseline_label("APLE", "KVM") == "KVM"  # named variants only: as before
    assert scaling.baseline_label("vm.tlb=ipi", "vm.tlb=pv") == "vm.tlb=pv"  # a vary label: as it is
    assert scaling.baseline_label("a;k=1", "b;k=2") == "b;k=2"  # a whole label: as it is
    assert scaling.is_baseline("symmetric;k=1", "symmetric")
    assert not scaling.is_baseline("asym;k=1", "symmetric")
    assert scaling.is_baseline("vm.tlb=pv", "vm.tlb=pv")


def test_a_baseline_names_a_variant_by_its_label_or_its_name() -> None:
    labels = ["symmetric;k=1", "asym;k=1"]
    assert scaling.names_variant(labels, "symmetric")
    assert scaling.names_variant(labels, "asym;k=1")
    assert not scaling.names_variant(labels, "k=1")
    assert not scaling.names_variant(labels, "nosuch")
    assert scaling.names_variant(["vm.tlb=pv", "vm.tlb=ipi"], "vm.tlb=pv")


def test_ple_normalized_matches_the_baseline_with_the_rows_other_parts() -> None:
    rows = [
        row(2.0, variant="symmetric;experiment.corunner=cpuhog"),
        row(4.0, variant="symmetric;experiment.corunner=matmul"),
        row(1.0, variant="asym;experiment.corunner=cpuhog"),  # 2.0 / 1.0
        row(2.0, variant="asym;experiment.corunner=matmul"),  # 4.0 / 2.0
        row(8.0, variant="asym;experiment.corunner=other"),  # no baseline run with this co-runner
    ]
    norm = ple.normalized(rows, "symmetric")
    assert [n.performance for n in norm] == [1.0, 1.0, 2.0, 2.0, None]
    # A whole label as the baseline compares every row with that one run, as before.
    whole = ple.normalized(rows, "asym;experiment.corunner=cpuhog")
    assert [n.performance for n in whole] == [0.5, 0.25, 1, 0.5, 0.125]


# --- speedup curves and efficiency --------------------------------------------------------------


def test_speedup_curves_divide_the_mean_time_at_the_smallest_count() -> None:
    rows = [
        row(4.0, vcpus=1, seed=1, eff={"eff_speedup": 1.0}),
        row(6.0, vcpus=1, seed=2, eff={"eff_speedup": 0.8}),  # mean t 5.0
        row(2.0, vcpus=2, seed=1, eff={"eff_speedup": 1.9}),
        row(3.0, vcpus=2, seed=2, eff={"eff_speedup": 1.7}),  # mean t 2.5: speedup 2
        row(1.0, vcpus=4, seed=1),  # speedup 5, no eff_speedup
        row(3.0, scenario="native", vcpus=2),
        row(1.0, scenario="native", vcpus=4),  # natively t_native, relative to 2 vCPUs
    ]
    native, oc = scaling.speedup_curves(rows)  # native first: the scenarios' order
    assert (oc.workload, oc.scenario, oc.variant, oc.base_vcpus) == ("fj", "OC", "", 1)
    points = [(p.vcpus, p.runs, p.t_s, p.speedup) for p in oc.points]
    assert points == [(1, 2, 5.0, 1.0), (2, 2, 2.5, 2.0), (4, 1, 1.0, 5.0)]
    assert [p.eff_speedup for p in oc.points] == [pytest.approx(0.9), pytest.approx(1.8), None]
    assert native.base_vcpus == 2 and [p.speedup for p in native.points] == [1.0, 3.0]
    assert oc.point(4) is not None and oc.point(8) is None
    assert scaling.vcpu_counts([native, oc]) == [1, 2, 4]
    assert scaling.has_curve([native, oc])


def test_speedup_curves_start_at_the_smallest_count_with_a_time_and_keep_groups_apart() -> None:
    rows = [
        row(None, vcpus=1),  # failed: no time
        row(4.0, vcpus=2),
        row(2.0, vcpus=4),
        row(3.0, vcpus=1, variant="b"),
        row(3.0, vcpus=1, workload="ep"),
    ]
    fj, fj_b, ep = scaling.speedup_curves(rows)
    assert fj.base_vcpus == 2
    assert [(p.vcpus, p.runs, p.speedup) for p in fj.points] == [(1, 0, None), (2, 1, 1.0), (4, 1, 2.0)]
    assert (fj_b.variant, ep.workload) == ("b", "ep")
    assert not scaling.has_curve([fj_b, ep])  # one vCPU count each


def test_efficiency_means_the_decomposition_over_seeds() -> None:
    names = ("eff_speedup", *scaling.EFFICIENCY_FIELDS)  # useful, busy_wait, overhead, unused, borrowed
    a = dict(zip(names, (1.5, 0.75, 0.1, 0.05, 0.2, 0.1), strict=True))
    b = dict(zip(names, (1.7, 0.85, 0.0, 0.05, 0.1, 0.0), strict=True))
    rows = [row(1.0, vcpus=2, seed=1, eff=a), row(1.0, vcpus=2, seed=2, eff=b)]
    (e,) = scaling.efficiency(rows)
    assert (e.workload, e.scenario, e.variant, e.vcpus, e.runs) == ("fj", "OC", "", 2, 2)
    assert e.speedup == pytest.approx(1.6) and e.useful == pytest.approx(0.8) and e.busy_wait == pytest.approx(0.05)
    assert e.overhead == pytest.approx(0.05) and e.unused == pytest.approx(0.15) and e.borrowed == pytest.approx(0.05)
    assert e.useful + e.busy_wait + e.overhead + e.unused - e.borrowed == pytest.approx(1.0)
    (missing,) = scaling.efficiency([row(1.0)])
    assert missing.speedup is None and missing.runs == 1


def test_speedup_csv_rows_have_a_point_per_line() -> None:
    rows = [row(4.0, vcpus=1, eff={"eff_speedup": 1.0}), row(2.0, vcpus=2, eff={"eff_speedup": 1.8})]
    lines = scaling.speedup_csv_rows(scaling.speedup_curves(rows))
    assert lines == [["fj", "OC", "", 1, 1, 4.0, 1.0, 1.0], ["fj", "OC", "", 2, 1, 2.0, 2.0, 1.8]]
    assert len(scaling.SPEEDUP_CSV_COLUMNS) == len(lines[0])
    assert scaling.speedup_csv_path("out/s.png") == Path("out/s.csv")


def test_speedup_png_draws_a_figure() -> None:
    rows = [row(4.0, vcpus=1), row(2.0, vcpus=2), row(4.0, vcpus=1, workload="ep"), row(3.0, vcpus=2, workload="ep")]
    png = scaling.speedup_png(scaling.speedup_curves(rows))
    assert png is not None and png[:8] == b"\x89PNG\r\n\x1a\n"


# --- performance spread -------------------------------------------------------------------------


def test_spread_over_a_key_groups_the_other_parts_and_gives_the_population_std() -> None:
    key = "experiment.corunner"
    rows = [
        row(2.0, variant=f"symmetric;{key}=cpuhog", seed=1),
        row(4.0, variant=f"symmetric;{key}=matmul", seed=1),
        row(2.0, variant=f"symmetric;{key}=cpuhog", seed=2),
        row(4.0, variant=f"symmetric;{key}=matmul", seed=2),  # mean 3, σ 1 (population)
        row(1.0, variant=f"asym;{key}=cpuhog", seed=1),  # 2 / 1
        row(4.0, variant=f"asym;{key}=matmul", seed=1),  # 4 / 4
        row(5.0, variant=f"asym;{key}=cpuhog", vcpus=2),  # no symmetric run of 2 vCPUs
        row(9.0, variant="other"),  # does not vary the key: not in any group
    ]
    sym, asym, asym2 = scaling.spread(rows, key, "symmetric")
    assert (sym.workload, sym.scenario, sym.vcpus, sym.variant) == ("fj", "OC", 1, "symmetric")
    assert sym.values == ("cpuhog", "matmul") and sym.runs == 4
    assert sym.mean_s == 3.0 and sym.std_s == 1.0 and sym.cv == pytest.approx(1 / 3)
    assert sym.performance == 1.0
    assert (asym.variant, asym.mean_s, asym.std_s) == ("asym", 2.5, 1.5)
    assert asym.performance == pytest.approx(1.5)  # mean of 2.0 and 1.0
    assert (asym2.vcpus, asym2.runs, asym2.std_s, asym2.cv, asym2.performance) == (2, 1, 0.0, 0.0, None)
    # Without a baseline there is no performance; a key no label varies gives no group.
    assert all(s.performance is None for s in scaling.spread(rows, key))
    assert scaling.spread(rows, "vm.tlb") == []


def test_spread_of_native_cells_uses_t_native_and_a_vary_only_label() -> None:
    rows = [
        row(1.0, scenario="native", variant="k=a"),
        row(3.0, scenario="native", variant="k=b"),
        row(None, variant="k=a"),  # no time: not counted
    ]
    native, oc = scaling.spread(rows, "k")
    assert (native.scenario, native.variant, native.runs, native.mean_s, native.std_s) == ("native", "", 2, 2.0, 1.0)
    assert (oc.runs, oc.mean_s, oc.std_s, oc.cv) == (0, None, None, None)


# --- asymmetric vCPUs ---------------------------------------------------------------------------


def test_asymmetric_means_the_counters_and_migrations_per_variant() -> None:
    on = {"allocation": True, "latency": False, "resolver": True}
    rows = [
        row(1.0, variant="asym", asym={**on, "periods": 10, "grown": 4, "balance_swaps": 1}, migrations=(1, 2)),
        row(1.0, variant="asym", seed=2, asym={**on, "periods": 20, "grown": 0, "balance_swaps": 0}, migrations=(0, 1)),
        row(1.0, variant="symmetric", migrations=(5,)),  # no run.asymmetric: not shown
        row(1.0, variant="lat", asym={"allocation": False, "latency": True, "resolver": False, "periods": 3}),
    ]
    assert scaling.has_asymmetric(rows) and not scaling.has_asymmetric(rows[2:3])
    asym, lat = scaling.asymmetric(rows)
    assert (asym.variant, asym.cells, asym.components) == ("asym", 2, ("allocation", "resolver"))
    assert asym.count("periods") == 15 and asym.count("grown") == 2 and asym.count("balance_swaps") == 0.5
    assert asym.count("urgency_swaps") is None  # not recorded
    assert asym.migrations == 2.0  # (3 + 1) / 2
    assert (lat.components, lat.count("periods"), lat.migrations) == (("latency",), 3.0, None)
    assert scaling.migrations(rows[0]) == 3 and scaling.migrations(row(1.0, scenario="native")) is None


# --- settings, tables ---------------------------------------------------------------------------


def test_parse_settings_reads_scalability_and_spread() -> None:
    info = {"report": {"scalability": True, "spread": "experiment.corunner"}, "variants": [""]}
    assert scaling.parse_settings(json.dumps(info)) == scaling.Settings(True, "experiment.corunner")
    assert scaling.parse_settings('{"report": {"columns": [], "cdf": null}}') == scaling.Settings()


def test_tables_show_their_titles_and_values() -> None:
    key = "experiment.corunner"
    rows = [
        row(4.0, vcpus=1, variant=f"a;{key}=x", eff={"eff_speedup": 0.97, "eff_useful": 0.97, "eff_unused": 0.03}),
        row(2.0, vcpus=2, variant=f"a;{key}=x", eff={"eff_speedup": 1.61, "eff_useful": 0.805}),
        row(3.0, vcpus=1, variant=f"a;{key}=y"),
        row(1.0, vcpus=1, variant=f"b;{key}=x", asym={"allocation": True, "periods": 7}, migrations=(2,)),
    ]
    speed = rendered(render.speedup_table(scaling.speedup_curves(rows)))
    assert TITLES[0] in speed and "1.00 / 0.97" in speed and "2.00 / 1.61" in speed and "2 vCPUs" in speed
    assert "n₀ = 1" in " ".join(speed.split())  # the caption wraps at the table's width
    eff = rendered(render.efficiency_table(scaling.efficiency(rows)))
    assert TITLES[1] in eff and "80.5%" in eff and "3.0%" in eff
    spread = rendered(render.spread_table(scaling.spread(rows, key, "a"), key, "a"))
    assert TITLES[2] in spread and "x, y" in spread and "3.5 s" in spread and "500 ms" in spread and "14.3%" in spread
    assert "vs a" in spread and "4.000" in spread  # b's x: t_a 4.0 / 1.0
    asym = rendered(render.asymmetric_table(scaling.asymmetric(rows)))
    assert TITLES[3] in asym and "allocation" in asym and "7" in asym


# --- vcpulab run / validate ---------------------------------------------------------------------


def test_run_prints_the_sections_and_writes_the_scaling_plot(cli: RunCli, tmp_path: Path) -> None:
    spec = tmp_path / "scaling.toml"
    spec.write_text(SPEC)
    r = cli("run", spec, "--no-store", "--scaling-out", tmp_path / "s.png")
    assert r.code == 0, r.err
    for title in TITLES:
        assert title in r.out, r.out
    assert "Performance relative to symmetric" in r.out  # the baseline is matched by its name
    assert "vs symmetric" in r.out
    assert "wrote" in r.out and "s.png" in r.out and "s.csv" in r.out
    assert (tmp_path / "s.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with open(tmp_path / "s.csv", newline="") as f:
        lines = list(csv.DictReader(f))
    assert list(lines[0]) == list(scaling.SPEEDUP_CSV_COLUMNS)
    assert len(lines) == 2 * 4 * 2  # (native, OC) × 4 variants × 2 vCPU counts
    assert {line["speedup"] for line in lines if line["vcpus"] == "1"} == {"1"}


def test_run_json_prints_only_results(cli: RunCli, tmp_path: Path) -> None:
    spec = tmp_path / "scaling.toml"
    spec.write_text(SPEC)
    r = cli("run", spec, "--no-store", "--json", "--scaling-out", tmp_path / "s.png")
    assert r.code == 0, r.err
    results = r.json_lines()
    assert len(results) == 16
    assert all("eff_speedup" in x["metrics"] for x in results)
    assert (tmp_path / "s.png").exists() and (tmp_path / "s.csv").exists()


def test_run_with_one_vcpu_count_notes_it_and_writes_nothing(cli: RunCli, tmp_path: Path) -> None:
    spec = tmp_path / "scaling.toml"
    spec.write_text(SPEC)
    r = cli("run", spec, "--no-store", "--vcpus", "2", "--scaling-out", tmp_path / "s.png")
    assert r.code == 0, r.err
    assert "no speedup curve" in r.err
    assert not (tmp_path / "s.png").exists() and not (tmp_path / "s.csv").exists()


@pytest.mark.parametrize("command", ["run", "validate"])
def test_unknown_spread_key_is_a_one_line_error(cli: RunCli, tmp_path: Path, command: str) -> None:
    spec = tmp_path / "bad.toml"
    spec.write_text(SPEC.replace('spread = "experiment.corunner"', 'spread = "vm.tlb"'))
    r = cli(command, spec, "--no-store") if command == "run" else cli(command, spec)
    line = one_line_error(r)
    assert r.out == ""
    assert "report.spread" in line and '"vm.tlb"' in line
    assert '(variant keys: "experiment.corunner")' in line


def test_spread_without_vary_says_so(cli: RunCli, tmp_path: Path) -> None:
    spec = tmp_path / "bad.toml"
    spec.write_text(SPEC.replace('vary = { "experiment.corunner" = ["cpuhog", "hackbench"] }', ""))
    line = one_line_error(cli("validate", spec))
    assert "report.spread" in line and "varies no key" in line


def test_a_baseline_that_is_no_variant_name_lists_the_names(cli: RunCli, tmp_path: Path) -> None:
    spec = tmp_path / "bad.toml"
    spec.write_text(SPEC.replace('baseline = "symmetric"', 'baseline = "nosuch"'))
    r = cli("validate", spec)
    assert r.code == 2
    assert "report.baseline" in r.err and '(variants: "symmetric", "asym")' in r.err


def test_scaling_out_must_name_a_png(cli: RunCli, tmp_path: Path) -> None:
    spec = tmp_path / "scaling.toml"
    spec.write_text(SPEC)
    r = cli("run", spec, "--no-store", "--scaling-out", tmp_path / "s.csv")
    line = one_line_error(r)
    assert "--scaling-out" in line and "PNG" in line
