"""Every example spec runs as shipped (on a smaller machine shape, to keep the suite quick)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import REPO, RESULT_KEYS, RunCli

EXAMPLES = sorted((REPO / "examples").glob("*.toml"))


def test_quickstart_exists() -> None:
    assert (REPO / "examples" / "quickstart.toml").is_file(), "make demo runs examples/quickstart.toml"


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs(example: Path, cli: RunCli) -> None:
    cells = cli("validate", example, "--set", "experiment.vcpus=[2]", "--json")
    assert cells.code == 0, cells.err
    r = cli("run", example, "--set", "experiment.vcpus=[2]", "--json")
    assert r.code == 0, r.err
    results = r.json_lines()
    assert len(results) == len(cells.json_lines()) > 0
    for res in results:
        assert RESULT_KEYS <= res.keys()
        assert res["vcpus"] == 2
