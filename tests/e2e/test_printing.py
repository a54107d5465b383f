"""What the CLI prints passes through one sanitiser (vcpulab.text): data from a spec or a
store shows as written (rich markup is not interpreted, escape sequences are escaped), JSON
is JSON (no NaN), and bytes that are not UTF-8 neither crash a command nor reach the screen
raw: a file name may hold them, and works; any other argument is refused in one line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import one_line_error, run_cli

# Workloads whose names are rich markup, a closing tag alone, an escape sequence, and TeX
# (which matplotlib would typeset, and fails on).
ODD_NAMES = ("[/x]", "[red]x[/red]", "e\x1b[31mvil", "$\\frac$")


def _odd_spec() -> str:
    def toml(name: str) -> str:
        return json.dumps(name)  # JSON's escapes are TOML's

    lines = [
        "[experiment]",
        f"workloads = [{', '.join(toml(n) for n in ODD_NAMES)}]",
        'scenarios = ["UC"]',
        "vcpus = [2]",
        "seeds = [1]",
    ]
    for name in ODD_NAMES:
        lines += [f"[workloads.{toml(name)}]", 'program = [{ compute = "1ms" }]']
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def odd_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("odd")
    (where / "odd.toml").write_text(_odd_spec())
    r = run_cli("run", "odd.toml", "--results", "store", cwd=where)
    assert r.code == 0, r.err
    for name in ("[/x]", "[red]x[/red]"):
        assert name in r.out  # the run's own table
    assert "e\\x1b[31mvil" in r.out and "\x1b" not in r.out
    return where


@pytest.mark.parametrize(
    "command",
    [
        ("query", "store", "SELECT workload FROM runs ORDER BY 1"),
        ("summary", "store"),
        ("categorize", "store"),
    ],
    ids=["query", "summary", "categorize"],
)
def test_data_prints_as_written(odd_store: Path, command: tuple[str, ...]) -> None:
    r = run_cli(*command, cwd=odd_store)
    assert r.code == 0, r.err
    assert r.err == ""
    assert "[/x]" in r.out and "[red]x[/red]" in r.out
    assert "e\\x1b[31mvil" in r.out and "\x1b" not in r.out


def test_query_json_has_no_nan(odd_store: Path) -> None:
    sql = (
        "SELECT workload, 'nan'::DOUBLE AS n, 'inf'::DOUBLE AS i, '-inf'::DOUBLE AS m, 1.5::DOUBLE AS x "
        "FROM runs ORDER BY 1"
    )
    r = run_cli("query", "store", sql, "--format", "json", cwd=odd_store)
    assert r.code == 0, r.err

    def strict(constant: str) -> None:
        raise AssertionError(f"not JSON: {constant}")

    rows = [json.loads(line, parse_constant=strict) for line in r.out.splitlines()]
    assert [row["workload"] for row in rows] == sorted(ODD_NAMES)
    assert all(row["n"] is None and row["i"] is None and row["m"] is None and row["x"] == 1.5 for row in rows)


NOT_UTF8 = os.fsdecode(b"x\xff")  # what Python makes of a command-line byte that is not UTF-8


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (("run", "--workload", NOT_UTF8, "--scenario", "UC"), "--workload"),
        (("run", "--workload", "lock", "--scenario", "UC", "--only", f"workload={NOT_UTF8}"), "--only"),
        (("validate", "--workload", "lock", "--set", f"experiment.vcpus={NOT_UTF8}"), "--set"),
        (("workloads", "show", NOT_UTF8), "NAME"),
        (("platforms", "show", NOT_UTF8), "NAME"),
        (("query", "store", f"SELECT '{NOT_UTF8}'"), "SQL"),
        (("report", "store", "--title", NOT_UTF8), "--title"),
        (("characterize-sim", NOT_UTF8), "NAME"),
    ],
    ids=["workload", "only", "set", "workloads-show", "platforms-show", "sql", "title", "characterize-sim"],
)
def test_text_arguments_must_be_utf8(tmp_path: Path, args: tuple[str, ...], option: str) -> None:
    line = one_line_error(run_cli(*args, cwd=tmp_path))
    assert f"argument {option}" in line and "expected UTF-8 text; " in line and "x\\xff" in line
    assert os.listdir(tmp_path) == []


def test_a_spec_and_a_report_may_have_file_names_that_are_not_utf8(tmp_path: Path) -> None:
    spec = os.fsdecode(b"sp\xffec.toml")
    (tmp_path / spec).write_text('[experiment]\nworkloads = ["lock"]\nscenarios = ["UC"]\nvcpus = [2]\nseeds = [1]\n')
    r = run_cli("validate", spec, cwd=tmp_path)
    assert r.code == 0 and "spec OK: 1 runs" in r.out, r.err
    r = run_cli("run", spec, "--results", "store", cwd=tmp_path)
    assert r.code == 0, r.err
    page = os.fsdecode(b"r\xffep.html")
    r = run_cli("report", "store", "-o", page, cwd=tmp_path)
    assert r.code == 0, r.err
    assert "wrote " in r.out and "r\\xffep.html" in r.out  # shown escaped
    assert (tmp_path / page).read_text().startswith("<!DOCTYPE html>")
    # A spec error names the file as it prints.
    bad = os.fsdecode(b"b\xffad.toml")
    (tmp_path / bad).write_text('[experiment]\nworkloads = ["lock"]\nscenarios = 3\n')
    line = one_line_error(run_cli("validate", bad, cwd=tmp_path))
    assert line.startswith("vcpulab: error: b\\xffad.toml: experiment.scenarios")


def test_report_shows_data_as_written(odd_store: Path) -> None:
    r = run_cli("report", "store", "-o", "odd.html", cwd=odd_store)
    assert r.code == 0, r.err
    assert r.err == ""  # no matplotlib warning of a glyph it lacks, no TeX error
    page = (odd_store / "odd.html").read_text()
    assert "\x1b" not in page and "e\\x1b[31mvil" in page
    assert "$\\frac$" in page and "[red]x[/red]" in page
