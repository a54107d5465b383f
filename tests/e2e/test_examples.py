"""Every example spec runs as shipped, and yields one result per cell it declares."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import REPO, RESULT_KEYS, RunCli

EXAMPLES = sorted((REPO / "examples").glob("*.toml"))


def test_quickstart_exists() -> None:
    assert (REPO / "examples" / "quickstart.toml").is_file(), "make demo runs examples/quickstart.toml"


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs(example: Path, cli: RunCli) -> None:
    cells = cli("validate", example, "--json")
    assert cells.code == 0, cells.err
    r = cli("run", example, "--json")
    assert r.code == 0, r.err
    results = r.json_lines()
    expected = [(c["workload"], c["scenario"], c["vcpus"], c["seed"]) for c in cells.json_lines()]
    assert [(x["workload"], x["scenario"], x["vcpus"], x["seed"]) for x in results] == expected
    assert expected
    for res in results:
        assert RESULT_KEYS <= res.keys()
