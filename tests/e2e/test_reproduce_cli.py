"""`vcpulab reproduce` end to end: --list, a run of the fixture suite (tests/reproduce_suite:
tiny specs of built-in micro workloads on 2 vCPUs), the scoreboard, HTML, Markdown and JSON,
resuming from the store; bad suite files and ids as one-line errors; and the real suite
(experiments/published) with --quick, the run CI relies on."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO, RunCli, one_line_error

FIXTURE = REPO / "tests" / "reproduce_suite"
REAL = REPO / "experiments" / "published"
EXPERIMENTS_MD = REPO.parent / "shared" / "docs" / "experiments.md"
VERDICTS = {"reproduced", "partly", "not reproduced", "not run", "no published value"}


def _suite(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "suite"
    root.mkdir()
    shutil.copy(FIXTURE / "NOPE-1.toml", root)
    for name, text in files.items():
        (root / name).write_text(text)
    return root


def _json(out: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(out)  # one document, nothing else on stdout
    return doc


def test_list_shows_every_id_without_running(cli: RunCli, tmp_path: Path) -> None:
    r = cli("reproduce", "--suite", FIXTURE, "--list", "--results", tmp_path / "store")
    assert r.code == 0, r.err
    for text in ("BAR-1", "LOCK-1", "NOPE-1", "withheld", "runnable spec", "not expressible", "MISSING MECHANISM"):
        assert text in r.out
    assert not (tmp_path / "store").exists()
    listed = json.loads(cli("reproduce", "--suite", FIXTURE, "--list", "--json").out)
    assert [e["id"] for e in listed] == ["BAR-1", "LOCK-1", "NOPE-1"]
    assert [e["published"] for e in listed] == [2, 4, 0]
    assert listed[1]["platform"] == "TPDS-4S" and listed[2]["kind"] == "not expressible"


def test_run_scoreboard_html_markdown_json_and_resume(cli: RunCli, tmp_path: Path) -> None:
    store, md, html = tmp_path / "store", tmp_path / "board.md", tmp_path / "board.html"
    r = cli("reproduce", "--suite", FIXTURE, "--results", store, "-j", "2", "--markdown", md)
    assert r.code == 0, r.err
    assert "reproduction scoreboard" in r.out
    assert re.search(r"^\d+ of 5 published values reproduced \(", r.out, re.M), r.out
    assert "NOPE-1: not expressible: MISSING MECHANISM" in r.out
    assert "16 cells run, 0 already stored" in r.err
    page = (store / "scoreboard.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page and "LOCK-1 — lock" in page
    assert "Not expressible" in page and "http" not in page.replace("http://www.w3.org", "")
    text = md.read_text()
    assert "| LOCK-1 |" in text and "Command: `vcpulab reproduce" in text and "published values reproduced" in text

    first = cli("reproduce", "--suite", FIXTURE, "--results", store, "--json", "--html", html)
    assert first.code == 0, first.err
    assert "0 cells run, 16 already stored" in first.err  # resumed from the store
    doc = _json(first.out)
    assert html.read_text().startswith("<!DOCTYPE html>")
    assert set(doc) == {"quick", "total", "totals", "rows", "ids"}
    assert doc["totals"]["published_values"] == 5 and doc["totals"]["no_published_value"] == 1
    assert [i["id"] for i in doc["ids"]] == ["BAR-1", "LOCK-1", "NOPE-1"]
    rows = {(row["id"], row["index"]): row for row in doc["rows"]}
    assert len(rows) == 6
    wide = rows[("LOCK-1", 0)]
    assert wide["verdict"] == "reproduced" and wide["n"] == 3 and wide["band"] == [-10.0, 10.0]
    assert wide["ci_low"] <= wide["mean"] <= wide["ci_high"]
    assert rows[("BAR-1", 0)]["verdict"] == "no published value"
    assert all(row["verdict"] in VERDICTS for row in doc["rows"])
    again = cli("reproduce", "--suite", FIXTURE, "--results", store, "--json", "--html", html)
    assert again.out == first.out  # deterministic


def test_selected_ids_are_case_insensitive_and_share_the_store(cli: RunCli, tmp_path: Path) -> None:
    store = tmp_path / "store"
    r = cli("reproduce", "lock-1", "--suite", FIXTURE, "--results", store, "--json", "-j", "1")
    assert r.code == 0, r.err
    doc = _json(r.out)
    assert {row["id"] for row in doc["rows"]} == {"LOCK-1"} and [i["id"] for i in doc["ids"]] == ["LOCK-1"]
    both = cli("reproduce", "LOCK-1", "bar-1", "--suite", FIXTURE, "--results", store, "--json", "-j", "1")
    assert "4 cells run, 12 already stored" in both.err


def test_quick_applies_the_quick_overrides(cli: RunCli, tmp_path: Path) -> None:
    r = cli("reproduce", "--suite", FIXTURE, "--quick", "--json", "-j", "1", "--results", tmp_path / "q")
    assert r.code == 0, r.err
    doc = _json(r.out)
    assert doc["quick"] is True and "not meaningful" in doc["total"] and "not meaningful" in r.err
    assert all(row["n"] <= 1 for row in doc["rows"])  # one seed
    assert all(row["verdict"] != "reproduced" for row in doc["rows"])


def _bad(tmp_path: Path, name: str, text: str) -> Path:
    return _suite(tmp_path, {name: text})


GOOD_HEAD = """[experiment]
workloads = ["lock"]
scenarios = ["UC"]
vcpus = [2]
"""


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("X-1.toml", "[reproduce\nid = 1", r"X-1\.toml: invalid TOML"),
        ("X-1.toml", GOOD_HEAD, r"X-1\.toml: reproduce: missing \[reproduce\] table"),
        (
            "X-1.toml",
            GOOD_HEAD + '[reproduce]\nid = "X-2"\ntitle = "t"\nstatus = "visible"\n',
            r"X-1\.toml: reproduce\.id: 'X-2' must equal the file name's stem 'X-1'",
        ),
        (
            "X-1.toml",
            GOOD_HEAD + '[reproduce]\nid = "X-1"\ntitle = "t"\nstatus = "visible"\nnot_expressible = "no"\n',
            r"X-1\.toml: experiment: a not-expressible experiment .* has only a \[reproduce\] table",
        ),
        (
            "X-1.toml",
            '[reproduce]\nid = "X-1"\ntitle = "t"\nstatus = "shown"\nnot_expressible = "MISSING MECHANISM: x"\n',
            r"X-1\.toml: reproduce\.status: expected \"visible\" or \"withheld\"",
        ),
        (
            "X-1.toml",
            '[reproduce]\nid = "X-1"\ntitle = "t"\nstatus = "visible"\nnot_expressible = ""\n',
            r"X-1\.toml: reproduce\.not_expressible: expected a non-empty string",
        ),
        (
            "X-1.toml",
            '[reproduce]\nid = "X-1"\nstatus = "visible"\nnot_expressible = "MISSING MECHANISM: x"\n',
            r"X-1\.toml: reproduce\.title: missing",
        ),
        (
            "X-1.toml",
            '[reproduce]\nid = "X-1"\ntitle = "t"\nstatus = "visible"\nnot_expressible = "x"\nsource = "s"\n',
            r"X-1\.toml: reproduce\.source: not a field of a not-expressible experiment",
        ),
        (
            "X-1.toml",
            GOOD_HEAD + '[reproduce]\nid = "X-1"\ntitle = "t"\nstatus = "visible"\n'
            '[[published]]\nmetric = "delta_eta_t"\nrule = "value"\nvalue = 1\ntolerance = "abc"\n',
            r"X-1\.toml: published\[0\]\.tolerance: expected a positive number",
        ),
        (
            "X-1.toml",
            GOOD_HEAD + '[reproduce]\nid = "X-1"\ntitle = "t"\nstatus = "visible"\nillustration = 3\n',
            r"X-1\.toml: reproduce\.illustration: integer `3`, expected a string",
        ),
        (
            "X-1.toml",
            GOOD_HEAD + '[platform]\npreset = "NOPE"\n[reproduce]\nid = "X-1"\ntitle = "t"\nstatus = "visible"\n',
            r"X-1\.toml: platform\.preset",
        ),
        (
            "nope-1.toml",
            '[reproduce]\nid = "nope-1"\ntitle = "t"\nstatus = "visible"\nnot_expressible = "x"\n',
            r"reproduce\.id 'nope-1' is also the id of .*NOPE-1\.toml \(ids ignore case\)",
        ),
    ],
)
def test_bad_suite_files_are_one_line_errors(cli: RunCli, tmp_path: Path, name: str, text: str, expected: str) -> None:
    root = _bad(tmp_path, name, text)
    line = one_line_error(cli("reproduce", "--suite", root, "--list"))
    assert re.search(expected, line), line


def test_bad_quick_override_names_the_file(cli: RunCli, tmp_path: Path) -> None:
    quick = 'quick = { "experiment.vcpuz" = [1] }\n'
    text = GOOD_HEAD + '[reproduce]\nid = "X-1"\ntitle = "t"\nstatus = "visible"\n' + quick
    root = _bad(tmp_path, "X-1.toml", text)
    assert cli("reproduce", "--suite", root, "--list").code == 0  # quick is only applied by --quick
    line = one_line_error(cli("reproduce", "--suite", root, "--quick", "--results", tmp_path / "s"))
    assert "X-1.toml" in line and "vcpuz" in line


def test_unknown_id_and_bad_flags(cli: RunCli, tmp_path: Path) -> None:
    line = one_line_error(cli("reproduce", "LOCK-2", "--suite", FIXTURE, "--list"))
    assert "unknown experiment id 'LOCK-2'" in line and "did you mean 'LOCK-1'" in line and "--list" in line
    line = one_line_error(cli("reproduce", "--suite", tmp_path / "missing", "--list"))
    assert "suite directory" in line and "does not exist" in line
    line = one_line_error(cli("reproduce", "--suite", FIXTURE, "-j", "0"))
    assert "--jobs: expected 1 to" in line
    line = one_line_error(cli("reproduce", "--suite", FIXTURE, "--markdown", tmp_path / "no" / "x.md"))
    assert "--markdown" in line and "does not exist" in line


def test_the_real_suite_quick_is_well_formed_and_deterministic(cli: RunCli, tmp_path: Path) -> None:
    """What CI runs: `vcpulab reproduce --quick` over experiments/published, whatever ids exist."""
    listed = cli("reproduce", "--suite", REAL, "--list", "--json")
    assert listed.code == 0, listed.err
    ids = [e["id"] for e in json.loads(listed.out)]
    store = tmp_path / "store"
    # The trace runs are left to the next test (a few experiments): over the whole suite they
    # would double this test's time.
    first = cli(
        "reproduce", "--suite", REAL, "--quick", "--no-traces", "--json", "-j", "2", "--results", store, timeout=1800
    )
    assert first.code == 0, first.err
    doc = _json(first.out)
    assert [i["id"] for i in doc["ids"]] == ids
    assert doc["quick"] is True
    for row in doc["rows"]:
        assert row["id"] in ids and row["verdict"] in VERDICTS, row
        assert isinstance(row["n"], int) and row["what"] and row["published"]
        if row["mean"] is not None and row["ci_low"] is not None:
            assert row["ci_low"] <= row["mean"] <= row["ci_high"]
    t = doc["totals"]
    assert t["reproduced"] + t["partly"] + t["not_reproduced"] + t["not_run"] == t["published_values"]
    assert t["experiments"] == len(ids)
    assert (store / "scoreboard.html").is_file()
    again = cli(
        "reproduce", "--suite", REAL, "--quick", "--no-traces", "--json", "-j", "2", "--results", store, timeout=1800
    )
    assert again.code == 0, again.err
    assert again.out == first.out


def test_real_experiments_run_with_the_committed_traces(cli: RunCli, tmp_path: Path) -> None:
    """dedup's committed traces (4 threads) replayed in DIS-2.4 and S4U-T1, quick: each row has
    a profile value and a trace value, and they differ (two workloads)."""
    r = cli(
        "reproduce", "--suite", REAL, "--quick", "--json", "-j", "2", "--results", tmp_path / "s", "DIS-2.4", "S4U-T1"
    )
    assert r.code == 0, r.err
    doc = _json(r.out)
    assert [i["trace"] for i in doc["ids"]] == [{"run": True}, {"run": True}], doc["ids"]
    valued = [row for row in doc["rows"] if row["mean"] is not None]
    assert valued and all(row["trace"] is not None and row["trace"]["mean"] is not None for row in valued)
    assert any(row["trace"]["mean"] != row["mean"] for row in valued)
    assert doc["totals"]["trace"]["experiments"] == 2


def _index_ids(text: str) -> list[str]:
    """The ids of experiments.md's Index table."""
    section = text.split("## Index", 1)[1].split("\n#", 1)[0]
    return re.findall(r"^\|\s*([A-Z][A-Z0-9]*-[^\s|]+)\s*\|", section, re.M)


def test_the_suite_has_every_id_of_experiments_md(cli: RunCli) -> None:
    if not EXPERIMENTS_MD.is_file():
        pytest.skip(f"{EXPERIMENTS_MD} not found: the published experiments' index lives outside the repository")
    wanted = _index_ids(EXPERIMENTS_MD.read_text())
    assert wanted, "no id found in the Index table of experiments.md"
    r = cli("reproduce", "--suite", REAL, "--list", "--json")
    assert r.code == 0, r.err
    have = [e["id"] for e in json.loads(r.out)]
    missing = [i for i in wanted if i not in have]
    extra = [i for i in have if i not in wanted]
    assert not missing and not extra, (
        f"experiments/published lacks {len(missing)} of {len(wanted)} ids of experiments.md: {', '.join(missing)}"
        + (f"; and has ids experiments.md does not list: {', '.join(extra)}" if extra else "")
    )


def test_a_failed_simulation_fails_its_experiment_only(cli: RunCli, tmp_path: Path) -> None:
    # A run limit reached in one experiment (as a yield storm would) leaves its entries unjudged,
    # says why, and the other experiments are still run and judged.
    lock = (FIXTURE / "LOCK-1.toml").read_text()
    failing = lock.replace('id = "LOCK-1"', 'id = "FAIL-1"') + "\n[limits]\nmax_events = 50\n"
    suite = _suite(tmp_path, {"FAIL-1.toml": failing, "LOCK-1.toml": lock})
    r = cli("reproduce", "--suite", suite, "--results", tmp_path / "store", "--json", "-j", "2")
    assert r.code == 0, r.err
    rows = _json(r.out)["rows"]
    failed = [row for row in rows if row["id"] == "FAIL-1"]
    assert failed and all(row["verdict"] == "not run" for row in failed)
    assert all("simulation failed" in row["note"] and "limits.max_events" in row["note"] for row in failed), failed
    assert any(row["id"] == "LOCK-1" and row["verdict"] == "reproduced" for row in rows)


def test_the_default_suite_is_found_from_any_directory(cli: RunCli) -> None:
    # cli runs in a fresh directory: without experiments/published there, the repository's is used.
    r = cli("reproduce", "--list", "--json")
    assert r.code == 0, r.err
    assert {e["id"] for e in json.loads(r.out)} == {p.stem for p in REAL.glob("*.toml")}
