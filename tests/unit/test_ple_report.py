"""PLE policy comparisons (vcpulab.ple): normalised performance, inefficiency, the
spinlock-intensive classification, the window plot, and what `vcpulab run` prints of them."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import vcpulab
from conftest import RunCli, one_line_error
from vcpulab import ple, render
from vcpulab.report import parse_info

# 2 vCPUs or fewer iterations barely spin: no PLE exit, hence no window series to plot.
SPEC = """\
# The APPLES testbed (2.4 GHz: kspin's waits outlast the 4,096-cycle window; at TPDS-4S's
# 2.0 GHz the window is longer than most of them and APLE closes no epoch).
[platform]
preset = "DIS-R720"

[experiment]
workloads = ["kspin"]
scenarios = ["OC"]
vcpus = [4]

[workloads.kspin.params]
iterations = 2000

[[experiment.variants]]
name = "KVM"

[[experiment.variants]]
name = "fixed 512"
set = { "vm.ple.window_policy" = "fixed", "vm.ple.window_cycles" = 512 }

[[experiment.variants]]
name = "APLE"
# Short epochs (40 PLE exits), so that this small run closes several.
set = { "vm.ple.window_policy" = "aple", "vm.ple.aple.epoch_exits" = 40 }

[record]
ple_window = true

[report]
baseline = "KVM"
ple = true
"""

TITLES = (
    "Performance relative to KVM (t_KVM / t; > 1 is faster)",
    "Average PLE inefficiency (wasted spin + switch time) / CPU time",
    "Spinlock-intensive? (fixed 512-cycle window, inefficiency > 5 %)",
)


def row(
    variant: str,
    t_virt: float | None,
    *,
    workload: str = "kspin",
    scenario: str = "OC",
    vcpus: int = 4,
    seed: int = 1,
    ineff: float | None = None,
    policy: str = "kvm",
    windows: tuple[int, ...] = (4096, 4096),
    series: list[list[float]] | None = None,
) -> dict[str, Any]:
    """A result dict with just the fields vcpulab.ple reads."""
    vm: dict[str, Any] = {
        "vm": 0,
        "window_policy": policy,
        "yield_policy": "kvm",
        "vcpus": [{"ple_window": w} for w in windows],
        "spin": {"inefficiency": ineff},
    }
    if series is not None:
        vm["ple_window_series"] = series
    native = scenario == "native"
    return {
        "variant": variant,
        "workload": workload,
        "scenario": scenario,
        "vcpus": vcpus,
        "threads": vcpus,
        "oc_vms": 2,
        "seed": seed,
        "t_virt_s": None if native else t_virt,
        "metrics": {} if native or ineff is None else {"ple_inefficiency": ineff, "ple_exits": 10.0},
        "run": {"vms": [] if native else [vm, {**vm, "vm": 1}]},
    }


def fixed(ineff: float, **kw: Any) -> dict[str, Any]:
    return row("fixed 512", 1.0, ineff=ineff, policy="fixed", windows=(512, 512), **kw)


# --- normalised performance -------------------------------------------------------------------


def test_normalized_divides_the_baselines_time_by_the_rows() -> None:
    rows = [
        row("KVM", 2.0),
        row("APLE", 1.0),
        row("fixed 512", 4.0),
        row("KVM", 1.0, scenario="native"),  # native rows are skipped
    ]
    norm = ple.normalized(rows, "KVM")
    assert [(n.variant, n.performance) for n in norm] == [("KVM", 1.0), ("APLE", 2.0), ("fixed 512", 0.5)]


def test_normalized_matches_on_the_whole_cell_and_leaves_a_missing_baseline_none() -> None:
    rows = [
        row("KVM", 2.0, seed=1),
        row("APLE", 1.0, seed=2),  # no KVM run of seed 2
        row("APLE", 1.0, vcpus=8),  # nor of 8 vCPUs
        row("APLE", None),  # no time
    ]
    assert [n.performance for n in ple.normalized(rows, "KVM")] == [1.0, None, None, None]
    assert all(n.performance is None for n in ple.normalized(rows, "nosuch"))


def test_performance_matrix_averages_seeds_and_adds_a_mean_row_per_scenario() -> None:
    rows = [
        row("KVM", 2.0, seed=1),
        row("APLE", 1.0, seed=1),  # 2.0
        row("KVM", 2.0, seed=2),
        row("APLE", 2.0, seed=2),  # 1.0
        row("KVM", 3.0, workload="ep"),
        row("APLE", 3.0, workload="ep"),
        row("KVM", 1.0, scenario="UC"),
        row("APLE", 2.0, scenario="UC"),
    ]
    m = ple.performance_matrix(rows, "KVM", ["KVM", "APLE"])
    assert m.variants == ("KVM", "APLE")
    keys = [(r.workload, r.scenario, r.vcpus) for r in m.rows]
    # The UC scenario has one row: no mean row of its own.
    assert keys == [("kspin", "OC", 4), ("ep", "OC", 4), ("kspin", "UC", 4), ("mean", "OC", None)]
    assert m.value("kspin", "OC", 4, "APLE") == pytest.approx(1.5)
    assert m.rows[0].runs == 2
    assert m.value("ep", "OC", 4, "APLE") == 1.0
    assert m.value("kspin", "UC", 4, "APLE") == 0.5
    assert m.value("mean", "OC", None, "APLE") == pytest.approx(1.25)
    assert m.value("mean", "OC", None, "KVM") == 1.0
    assert m.rows[-1].is_mean


def test_matrix_columns_follow_the_plan_then_unknown_variants() -> None:
    rows = [row("B", 1.0), row("A", 1.0), row("C", 1.0)]
    assert ple.performance_matrix(rows, "A", ["A", "B"]).variants == ("A", "B", "C")
    assert ple.performance_matrix(rows, "A").variants == ("B", "A", "C")
    # A planned variant without a row (left out by --only) is not a column.
    assert ple.performance_matrix(rows, "A", ["D", "C", "B", "A"]).variants == ("C", "B", "A")


def test_inefficiency_matrix_means_and_missing_cells() -> None:
    rows = [
        row("KVM", 1.0, ineff=0.02, seed=1),
        row("KVM", 1.0, ineff=0.04, seed=2),
        row("APLE", 1.0, ineff=None),  # not measured
    ]
    m = ple.inefficiency_matrix(rows, ["KVM", "APLE"])
    assert m.value("kspin", "OC", 4, "KVM") == pytest.approx(0.03)
    assert m.value("kspin", "OC", 4, "APLE") is None
    # Without metrics.ple_inefficiency, VM 0's spin.inefficiency counts.
    bare = row("KVM", 1.0, ineff=0.07)
    bare["metrics"] = {}
    assert ple.inefficiency(bare) == 0.07


# --- classification ---------------------------------------------------------------------------


def test_classify_averages_seeds_with_a_strict_five_percent_threshold() -> None:
    rows = [
        fixed(0.04, seed=1),
        fixed(0.08, seed=2),  # mean 6 %: spinlock-intensive
        fixed(0.05, workload="ep"),  # exactly 5 %: not above it
        fixed(0.0500001, workload="lock"),
        row("KVM", 1.0, ineff=0.5),  # not a fixed window
        row("fixed 1024", 1.0, ineff=0.5, policy="fixed", windows=(1024, 1024)),  # not 512 cycles
        row("mixed", 1.0, ineff=0.5, policy="fixed", windows=(512, 1024)),  # not every vCPU at 512
    ]
    classes = ple.classify(rows)
    assert [(c.workload, c.variant, c.seeds, c.spinlock_intensive) for c in classes] == [
        ("kspin", "fixed 512", 2, True),
        ("ep", "fixed 512", 1, False),
        ("lock", "fixed 512", 1, True),
    ]
    assert classes[0].inefficiency == pytest.approx(0.06)


def test_classify_without_a_fixed_512_cell_is_empty() -> None:
    assert ple.classify([row("KVM", 1.0, ineff=0.5), row("APLE", 1.0, ineff=0.5)]) == []
    assert ple.classify([]) == []


# --- tables -----------------------------------------------------------------------------------


def rendered(table: Any) -> str:
    buf = io.StringIO()
    Console(file=buf, width=200).print(table)
    return buf.getvalue()


def test_tables_show_their_titles_and_values() -> None:
    rows = [row("KVM", 2.0, ineff=0.01), row("APLE", 1.0, ineff=0.2), fixed(0.06)]
    perf = rendered(render.performance_table(ple.performance_matrix(rows, "KVM", ["KVM", "APLE"]), "KVM"))
    assert TITLES[0] in perf and "2.000" in perf
    assert "KVM" not in perf.splitlines()[2]  # the baseline's column (all 1) is left out
    ineff = rendered(render.inefficiency_table(ple.inefficiency_matrix(rows, ["KVM", "APLE"])))
    assert TITLES[1] in ineff and "20.0%" in ineff and "6.0%" in ineff
    classes = rendered(render.classification_table(ple.classify(rows)))
    assert TITLES[2] in classes and "yes" in classes


def test_parse_info_reads_baseline_and_ple() -> None:
    info = parse_info(json.dumps({"report": {"baseline": "KVM", "ple": True}, "variants": ["KVM", "APLE"]}))
    assert info.baseline == "KVM" and info.ple is True
    plain = parse_info('{"published": [], "report": {"columns": [], "cdf": null}, "variants": [""]}')
    assert plain.baseline is None and plain.ple is False


# --- window plot ------------------------------------------------------------------------------


def test_write_window_plot_without_series_writes_nothing(tmp_path: Path) -> None:
    png = tmp_path / "w.png"
    assert ple.write_window_plot(png, [row("KVM", 1.0)]) is False
    assert list(tmp_path.iterdir()) == []


def test_write_window_plot_from_a_simulation(tmp_path: Path) -> None:
    results = vcpulab.simulate(SPEC)
    assert [r["variant"] for r in results] == ["KVM", "fixed 512", "APLE"]
    assert all(ple.window_series(r) for r in results)
    assert results[2]["run"]["vms"][0]["ple_epochs"]  # APLE's thresholds are drawn too
    png = tmp_path / "window.png"
    assert ple.write_window_plot(png, results) is True
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with open(tmp_path / "window.csv", newline="") as f:
        lines = list(csv.DictReader(f))
    assert list(lines[0]) == list(ple.WINDOW_CSV_COLUMNS)
    # The CSV has every recorded series, the fixed window's too.
    assert {line["variant"] for line in lines} == {"KVM", "fixed 512", "APLE"}
    assert {line["window_cycles"] for line in lines if line["variant"] == "fixed 512"} == {"512"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["window.csv", "window.png"]


# --- vcpulab run ------------------------------------------------------------------------------


def test_run_prints_the_ple_tables_and_writes_the_window_plot(cli: RunCli, tmp_path: Path) -> None:
    spec = tmp_path / "ple.toml"
    spec.write_text(SPEC)
    r = cli("run", spec, "--no-store", "--window-out", tmp_path / "w.png")
    assert r.code == 0, r.err
    for title in TITLES:
        assert title in r.out
    assert "wrote" in r.out and "w.png" in r.out and "w.csv" in r.out
    assert (tmp_path / "w.png").exists() and (tmp_path / "w.csv").exists()


def test_run_json_prints_only_results_but_writes_the_window_plot(cli: RunCli, tmp_path: Path) -> None:
    spec = tmp_path / "ple.toml"
    spec.write_text(SPEC)
    r = cli("run", spec, "--no-store", "--json", "--window-out", tmp_path / "w.png")
    assert r.code == 0, r.err
    assert len(r.json_lines()) == 3
    assert (tmp_path / "w.png").exists() and (tmp_path / "w.csv").exists()


def test_run_without_series_notes_it_and_writes_nothing(cli: RunCli, tmp_path: Path) -> None:
    spec = tmp_path / "ple.toml"
    spec.write_text(SPEC.replace("ple_window = true", "ple_window = false"))
    r = cli("run", spec, "--no-store", "--window-out", tmp_path / "w.png")
    assert r.code == 0, r.err
    assert "no PLE window series: set [record] ple_window = true" in r.err
    assert not (tmp_path / "w.png").exists() and not (tmp_path / "w.csv").exists()


def test_run_without_a_fixed_512_variant_says_how_to_classify(cli: RunCli, tmp_path: Path) -> None:
    spec = tmp_path / "ple.toml"
    spec.write_text(SPEC.replace('vm.ple.window_cycles" = 512', 'vm.ple.window_cycles" = 1024'))
    r = cli("run", spec, "--no-store")
    assert r.code == 0, r.err
    assert TITLES[1] in r.out and TITLES[2] not in r.out
    assert "no cell with a fixed 512-cycle window" in r.out


@pytest.mark.parametrize("command", ["run", "validate"])
def test_unknown_baseline_is_a_one_line_error(cli: RunCli, tmp_path: Path, command: str) -> None:
    spec = tmp_path / "bad.toml"
    spec.write_text(SPEC.replace('baseline = "KVM"', 'baseline = "nosuch"'))
    r = cli(command, spec, "--no-store") if command == "run" else cli(command, spec)
    line = one_line_error(r)
    assert r.out == ""
    assert "report.baseline" in line and '"nosuch"' in line
    assert '"KVM", "fixed 512", "APLE"' in line


def test_window_out_must_name_a_png(cli: RunCli, tmp_path: Path) -> None:
    spec = tmp_path / "ple.toml"
    spec.write_text(SPEC)
    r = cli("run", spec, "--no-store", "--window-out", tmp_path / "w.csv")
    line = one_line_error(r)
    assert "--window-out" in line and "PNG" in line


# --- named variants crossed with experiment.vary ----------------------------------------------


def test_named_variants_crossed_with_a_vary_key_are_columns_with_one_row_per_value() -> None:
    key = "experiment.corunner"
    rows = [
        row(f"sym;{key}=hog", 2.0),
        row(f"asym;{key}=hog", 1.0),  # 2.0
        row(f"sym;{key}=none", 3.0),
        row(f"asym;{key}=none", 3.0),  # 1.0
        row(f"sym;{key}=hog", 2.0, workload="ep"),
        row(f"asym;{key}=hog", 4.0, workload="ep"),  # 0.5
    ]
    m = ple.performance_matrix(rows, "sym", ["sym", "asym"])
    assert m.variants == ("sym", "asym") and m.setting_keys == (key,)
    hog, none = ((key, "hog"),), ((key, "none"),)
    # Rows grouped by setting, then the means per setting (only over more than one row), then over all.
    keys = [(r.workload, r.setting) for r in m.rows]
    assert keys == [("kspin", hog), ("ep", hog), ("kspin", none), ("mean", hog), ("mean", ())]
    assert m.value("kspin", "OC", 4, "asym", hog) == 2.0
    assert m.value("kspin", "OC", 4, "asym", none) == 1.0
    assert m.value("mean", "OC", None, "asym", hog) == pytest.approx(1.25)
    assert m.value("mean", "OC", None, "asym") == pytest.approx(3.5 / 3)
    assert m.without("sym").variants == ("asym",) and m.without("sym").rows[0].values == (2.0,)
    # Labels without a named variant stay whole columns.
    plain = ple.performance_matrix([row(f"{key}=hog", 2.0), row(f"{key}=none", 1.0)], f"{key}=hog")
    assert plain.variants == (f"{key}=hog", f"{key}=none") and plain.setting_keys == ()


def test_performance_table_leaves_out_the_baseline_column_and_shows_the_setting() -> None:
    key = "experiment.corunner"
    rows = [row(f"sym;{key}=hog", 2.0), row(f"asym;{key}=hog", 1.0), row(f"sym;{key}=none", 3.0)]
    text = rendered(render.performance_table(ple.performance_matrix(rows, "sym", ["sym", "asym"]), "sym"))
    header = " ".join(text.splitlines()[2:4])
    assert "asym" in header and "sym" not in header.replace("asym", "")
    assert "hog" in text and "none" in text and "2.000" in text
    assert "—" in text  # asym has no run with none
