"""`vcpulab sensitivity` and `vcpulab calibrate` end to end on the fixture suite
(tests/reproduce_suite, 1- and 2-vCPU cells): tables, the stored analysis and its tornado in
the report, the calibrated preset and `reproduce --calibrated`, resuming from the store, and
bad input as one-line errors."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from conftest import REPO, RunCli, one_line_error

FIXTURE = REPO / "tests" / "reproduce_suite"
PARAMS = ("--param", "machine.costs.context_switch", "--param", "machine.costs.syscall_futex")


def test_sensitivity_prints_stores_draws_and_the_report_shows_it(cli: RunCli, tmp_path: Path) -> None:
    store, png = tmp_path / "store", tmp_path / "tornado.png"
    args = ("sensitivity", "LOCK-1:1", "--suite", FIXTURE, "--quick", "--results", store, *PARAMS)
    r = cli(*args, "--figure", png, "-j", "2")
    assert r.code == 0, r.err
    assert "LOCK-1:1" in r.out and "machine.costs.context_switch" in r.out and "elasticity" in r.out
    stored = json.loads((store / "sensitivity" / "LOCK-1_1.json").read_text())
    assert stored["row"] == "LOCK-1:1" and stored["preset"] == "TPDS-4S" and stored["target"] == 0.0
    assert [e["key"] for e in stored["effects"]] and {e["low"] for e in stored["effects"]} == {1000, 150}
    assert png.read_bytes().startswith(b"\x89PNG")
    assert "cells run" in r.err
    # Again: every evaluation is read from the store, and the analysis is the same.
    again = cli(*args, "--json")
    assert again.code == 0, again.err
    assert "vcpulab: 0 cells run" in again.err
    assert json.loads(again.out) == stored
    report = cli("report", store, "-o", tmp_path / "report.html")
    assert report.code == 0, report.err
    page = (tmp_path / "report.html").read_text()
    assert "Sensitivity of published rows" in page and "Sensitivity of LOCK-1:1" in page


def test_calibrate_writes_a_preset_that_reproduce_applies(cli: RunCli, tmp_path: Path) -> None:
    store, out = tmp_path / "store", tmp_path / "cal" / "TPDS-4S-cal.toml"
    (tmp_path / "cal").mkdir()
    r = cli(
        "calibrate",
        "TPDS-4S",
        "--suite",
        FIXTURE,
        "--rows",
        "LOCK-1:2",
        "--quick",
        "--results",
        store,
        *PARAMS,
        "--max-evals",
        "6",
        "-o",
        out,
    )
    assert r.code == 0, r.err
    assert "LOCK-1:2" in r.out and "objective" in r.out
    text = out.read_text()
    assert text.startswith("# Calibrated preset TPDS-4S-cal: TPDS-4S") and "LOCK-1:2" in text
    doc = tomllib.loads(text)
    assert doc["platform"]["preset"] == "TPDS-4S"
    assert set(doc["machine"]["costs"]) == {"context_switch", "syscall_futex"}
    rep = cli("reproduce", "LOCK-1", "--suite", FIXTURE, "--quick", "--results", store, "--calibrated", out)
    assert rep.code == 0, rep.err


def test_bad_rows_parameters_and_presets_are_one_line_errors(cli: RunCli, tmp_path: Path) -> None:
    cases = [
        (("sensitivity", "LOCK-1"), "name one row as LOCK-1:N"),
        (("sensitivity", "LOCK-1:7"), "N from 1 to 4"),
        (("sensitivity", "NOPE-1:1"), "not expressible"),
        (("sensitivity", "LOCK-1:1", "--param", "machine.costs.nope"), "--param machine.costs.nope: not an estimate"),
        (("calibrate", "TPDS-9"), "unknown preset 'TPDS-9'"),
        (("calibrate", "S4U-2S", "--rows", "LOCK-1:1"), "LOCK-1:1: runs on preset TPDS-4S, not S4U-2S"),
        (("calibrate", "TPDS-4S"), "no calibration set for TPDS-4S"),
    ]
    for args, message in cases:
        r = cli(*args, "--suite", FIXTURE, "--results", tmp_path / "store")
        assert message in one_line_error(r), (args, r.err)
    assert not (tmp_path / "store" / "sensitivity").exists()
