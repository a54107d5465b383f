"""Every example spec runs as shipped, and yields one result per cell it declares (the full TPDS
matrix: per cell of its first seed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import REPO, RESULT_KEYS, RunCli

EXAMPLES = sorted((REPO / "examples").glob("*.toml"))


def test_quickstart_exists() -> None:
    assert (REPO / "examples" / "quickstart.toml").is_file(), "make demo runs examples/quickstart.toml"


# Each example runs its first seed: every workload, scenario and vCPU count of it. The other
# seeds run the same code on other random draws (determinism across seeds and executors is
# tested in test_cli.py and test_sweep.py); running them here tripled the slowest examples
# (apples.toml 156 s, tpds-small.toml 93 s on 2 busy cores).


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs(example: Path, cli: RunCli) -> None:
    cells = cli("validate", example, "--json")
    assert cells.code == 0, cells.err
    declared = cells.json_lines()
    seed = declared[0]["seed"]
    declared = [c for c in declared if c["seed"] == seed]
    r = cli("run", example, "--json", "--only", f"seed={seed}")
    assert r.code == 0, r.err
    results = r.json_lines()
    expected = [(c["workload"], c["scenario"], c["vcpus"], c["seed"]) for c in declared]
    assert [(x["workload"], x["scenario"], x["vcpus"], x["seed"]) for x in results] == expected
    assert expected
    for res in results:
        assert RESULT_KEYS <= res.keys()
