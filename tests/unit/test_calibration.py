"""Calibration and sensitivity (vcpulab.calibration): row names, narrowing, bounds, residuals and
the parameter scales, without simulating."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from vcpulab import _vcpulab
from vcpulab.calibration import fit, rows, sensitivity
from vcpulab.reproduce import load_suite
from vcpulab.reproduce.verdict import Estimate as Est
from vcpulab.reproduce.verdict import Judged, Point

SUITE = Path(__file__).resolve().parents[1] / "reproduce_suite"
PUBLISHED = Path(__file__).resolve().parents[2] / "experiments" / "published"


def test_a_row_is_named_id_colon_n_and_a_bad_name_lists_the_choices() -> None:
    suite = load_suite(SUITE)
    r = rows.find_row(suite, "LOCK-1:2")
    assert (r.name, r.rule, r.target()) == ("LOCK-1:2", "sign", 0.5)
    assert rows.find_row(suite, "lock-1:1").target() == 0.0
    with pytest.raises(rows.CalibrationError, match=r"LOCK-1: name one row as LOCK-1:N \(4 judged rows: LOCK-1:1"):
        rows.find_row(suite, "LOCK-1")
    with pytest.raises(rows.CalibrationError, match="N from 1 to 4"):
        rows.find_row(suite, "LOCK-1:9")
    with pytest.raises(rows.CalibrationError, match="did you mean"):
        rows.find_row(suite, "LOCK-2:1")


def test_a_shape_row_targets_zero_and_a_figure_only_row_has_no_target() -> None:
    suite = load_suite(SUITE)
    assert rows.find_row(suite, "LOCK-1:3").target() == 0.0
    assert rows.find_row(suite, "BAR-1:1").target() is None


def test_narrowing_keeps_every_cell_a_selector_can_match() -> None:
    entry = {"where": {"workload": "w", "scenario": "OC"}, "relative_to": {"scenario": "UC"}}
    assert rows.narrowing_overrides(entry) == ['experiment.workloads=["w"]', 'experiment.scenarios=["OC", "UC"]']
    order = {"where": {"vcpus": 4}, "order": [{"scenario": "UC"}, {"scenario": "OC"}]}
    assert rows.narrowing_overrides(order) == ['experiment.scenarios=["UC", "OC"]', "experiment.vcpus=[4]"]
    # A selector that leaves the field open keeps every value of it.
    assert rows.narrowing_overrides({"where": {"workload": ["a", "b"]}}) == ['experiment.workloads=["a", "b"]']
    vary = {"vm.tlb": ["ipi", "pv", "shoot4u"], "vm.apicv": [False, True]}
    assert rows.narrowing_overrides({"where": {"vm.tlb": "pv"}, "relative_to": {"vm.tlb": "shoot4u"}}, vary) == [
        'experiment.vary={ "vm.tlb" = ["pv", "shoot4u"], "vm.apicv" = [false, true] }'
    ]
    assert rows.narrowing_overrides({"where": {"vm.apicv": True}}, {"vm.apicv": [False, True]}) == [
        'experiment.vary={ "vm.apicv" = [true] }'
    ]
    assert rows.narrowing_overrides({"where": {"scenario": "UC"}, "order": [{"vcpus": 1}, {"vcpus": 2}]}) == [
        'experiment.scenarios=["UC"]',
        "experiment.vcpus=[1, 2]",
    ]


def test_every_preset_estimate_is_read_with_its_bounds() -> None:
    for p in _vcpulab.platforms():
        raw = json.loads(_vcpulab.platform_estimates(p["name"]))
        assert raw, p["name"]
        numeric = rows.preset_estimates(p["name"])
        for e in numeric:
            assert e.low <= e.value <= e.high and e.low < e.high, e
            assert e.key.rsplit(".", 1)[-1] != "hz"
        ints = [e for e in numeric if e.integer]
        assert all(e.override(e.value + 0.4).endswith(str(int(e.value))) for e in ints)


def test_an_unknown_or_fixed_parameter_is_one_line_naming_it() -> None:
    with pytest.raises(rows.CalibrationError, match="--param machine.costs.exit_hl: not an estimate of preset TPDS-4S"):
        rows.preset_estimates("TPDS-4S", ["machine.costs.exit_hl"])
    with pytest.raises(rows.CalibrationError, match="a choice in preset TPDS-4S"):
        rows.preset_estimates("TPDS-4S", ["host.cgroups"])
    (e,) = rows.preset_estimates("TPDS-4S", ["machine.costs.exit_hlt"])
    assert e.override(812.7) == "machine.costs.exit_hlt=813"


def _judged(mean: float | None, points: tuple[Point, ...] = ()) -> Judged:
    return Judged("x", Est(1, mean), points)


def test_residuals_are_in_units_of_the_rows_tolerance() -> None:
    suite = load_suite(PUBLISHED)
    t1 = rows.find_row(suite, "S4U-T1:1")  # 166 µs ± 25 %
    assert fit.residual(t1, _judged(166.0)) == 0.0
    assert fit.residual(t1, _judged(166.0 * 1.25)) == pytest.approx(1.0)
    # Relative bands: in log space, so 10x too small is as far as 10x too large.
    assert fit.residual(t1, _judged(16.6)) == pytest.approx(-fit.residual(t1, _judged(1660.0)))
    assert fit.residual(t1, _judged(10.0)) == pytest.approx(math.log(10 / 166) / math.log(1.25))
    f9 = rows.find_row(suite, "TPDS-F9:2")  # 0 ± 0.05 (absolute)
    assert fit.residual(f9, _judged(0.1)) == pytest.approx(2.0)
    assert fit.residual(t1, None) is None
    sign = rows.find_row(suite, "S4U-T1:15")  # max ratio above 3.16
    assert fit.residual(sign, _judged(5.0)) == 0.0
    assert fit.residual(sign, _judged(1.58)) == pytest.approx(0.5)


def test_the_unit_scale_maps_to_the_bounds_log_spaced_for_wide_ranges() -> None:
    wide = fit.Scale(rows.Estimate("k", 1000.0, 100.0, 10000.0, True, ""))
    assert wide.log and wide.value(0.0) == 100 and wide.value(1.0) == 10000 and wide.value(0.5) == 1000
    assert wide.unit(1000.0) == pytest.approx(0.5)
    narrow = fit.Scale(rows.Estimate("k", 1.0, 0.5, 1.5, False, ""))
    assert not narrow.log and narrow.value(0.25) == 0.75 and narrow.value(2.0) == 1.5


def test_elasticity_over_the_bounds() -> None:
    assert sensitivity.elasticity(10.0, 100.0, 50.0, 150.0, 5.0, 15.0) == pytest.approx(1.0)
    assert sensitivity.elasticity(None, 100.0, 50.0, 150.0, 5.0, 15.0) is None
    assert sensitivity.elasticity(0.0, 100.0, 50.0, 150.0, 5.0, 15.0) is None


def test_a_calibrated_preset_is_an_overlay_that_reproduce_reads_back(tmp_path: Path) -> None:
    f = fit.Fit("S4U-2S", ["S4U-T1:1"], "a rule")
    f.values = [
        fit.Fitted("machine.costs.exit_hlt", 700, 1042, 417, 1042, "upper", ""),
        fit.Fitted("machine.memory.local_latency_ns", 90.0, 95.5, 72.0, 108.0, None, ""),
    ]
    f.residuals = {"S4U-T1:1": (150.0, -0.4)}
    f.start_residuals = {"S4U-T1:1": (10.0, -3.8)}
    f.objective, f.start_objective, f.evaluations = 0.16, 14.4, 12
    text = fit.calibrated_toml(f, "S4U-2S-cal", "vcpulab calibrate S4U-2S")
    assert "machine.costs.exit_hlt at its upper bound 1042" in text
    assert "S4U-T1:1: 150; -0.4 (was 10; -3.8)" in text
    path = tmp_path / "cal.toml"
    path.write_text(text)
    preset, overrides = fit.overlay_overrides(path)
    assert preset == "S4U-2S"
    assert overrides == ["machine.costs.exit_hlt=1042", "machine.memory.local_latency_ns=95.5"]
    # It is a valid spec overlay of its preset.
    _vcpulab.Plan(text + '\n[experiment]\nworkloads = ["lock"]\n', str(path), [])


def test_calibration_sets_name_rows_of_their_testbed() -> None:
    sets = fit.load_sets(fit.calibration_path(PUBLISHED))
    assert {"s4u-2s", "tpds-4s", "dis-r720", "dis-r420"} <= set(sets)
    suite = load_suite(PUBLISHED)
    for s in sets.values():
        for name in s.rows:
            r = rows.find_row(suite, name)
            assert r.preset.casefold() == s.preset.casefold(), name
            assert r.rule in ("value", "sign") and r.experiment.status == "visible", name
            assert not math.isnan(r.target() or 0.0)


def test_a_malformed_calibration_set_is_one_line_naming_the_field(tmp_path: Path) -> None:
    path = tmp_path / "calibration.toml"
    path.write_text('[S4U-2S]\nrule = "r"\nrows = []\n')
    with pytest.raises(rows.CalibrationError, match=r"calibration.toml: S4U-2S.rows: expected a non-empty list"):
        fit.load_sets(path)
    path.write_text('[S4U-2S]\nrows = ["S4U-T1:1"]\n')
    with pytest.raises(rows.CalibrationError, match=r"S4U-2S.rule: expected the rule"):
        fit.load_sets(path)


def test_the_scoreboard_counts_validation_rows_and_shows_the_others_apart() -> None:
    from vcpulab.reproduce.scoreboard import Row, Scoreboard
    from vcpulab.reproduce.suite import Experiment

    e = Experiment("X-1", "t", "visible", Path("X-1.toml"))
    ok, bad = Judged("reproduced", Est(3, 1.0, 0.9, 1.1)), Judged("not reproduced", Est(3, 5.0, 4.0, 6.0))
    value = {"metric": "m", "rule": "value", "value": 1.0, "tolerance": {"absolute": 0.5}}
    check = {"metric": "parallelism", "rule": "sign", "value": 12.0, "where": {"scenario": "native"}}
    board = Scoreboard(
        (
            Row(e, 0, value, ok),
            Row(e, 1, value, bad),
            Row(e, 2, value, ok, calibration=True),
            Row(e, 3, check, ok),
        ),
        (e,),
    )
    assert [r.role for r in board.rows] == ["validation", "validation", "calibration", "profile check"]
    t = board.totals()
    assert (t["published_values"], t["reproduced"], t["not_reproduced"]) == (2, 1, 1)
    assert t["calibration"]["published_values"] == 1 and t["profile_checks"]["reproduced"] == 1
    line = board.total_line()
    assert line.startswith("1 of 2 published values reproduced")
    assert "1 calibration rows counted apart (1 within their band, never counted as reproduced)" in line
    assert "1 rows that check a profile's declared type shown apart (1 reproduced)" in line
    assert board.rows[2].what.endswith("[calibration row X-1:3]")
    assert board.to_json()["rows"][2]["role"] == "calibration" and board.to_json()["rows"][2]["row"] == "X-1:3"


def test_the_rows_of_an_illustration_are_counted_apart() -> None:
    from vcpulab.reproduce.scoreboard import Row, Scoreboard
    from vcpulab.reproduce.suite import Experiment

    info = {"reproduce": {"illustration": "ideal arithmetic"}}
    ill = Experiment("X-2", "t", "visible", Path("X-2.toml"), info=info)
    plain = Experiment("X-1", "t", "visible", Path("X-1.toml"))
    ok, bad = Judged("reproduced", Est(3, 1.0, 0.9, 1.1)), Judged("not reproduced", Est(3, 5.0, 4.0, 6.0))
    value = {"metric": "m", "rule": "value", "value": 1.0, "tolerance": {"absolute": 0.5}}
    board = Scoreboard((Row(plain, 0, value, ok), Row(ill, 0, value, ok), Row(ill, 1, value, bad)), (plain, ill))
    assert [r.role for r in board.rows] == ["validation", "illustration", "illustration"]
    t = board.totals()
    assert (t["published_values"], t["reproduced"]) == (1, 1)
    assert (t["illustrations"]["published_values"], t["illustrations"]["reproduced"]) == (2, 1)
    assert "2 rows of idealised illustrations shown apart (1 match the ideal arithmetic)" in board.total_line()
    assert board.rows[1].what.endswith("[illustration]")
