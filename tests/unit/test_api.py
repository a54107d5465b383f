"""The Python API returns the same data as the command line."""

from __future__ import annotations

from pathlib import Path

import pytest

import vcpulab
from conftest import RESULT_KEYS, run_cli, without_wall

SPEC = {"experiment": {"workloads": ["ep"], "scenarios": ["native", "UC"], "vcpus": [2], "seeds": [1]}}
SPEC_TOML = '[experiment]\nworkloads = ["ep"]\nscenarios = ["native", "UC"]\nvcpus = [2]\nseeds = [1]\n'


def test_simulate_dict_text_and_path_agree(tmp_path: Path) -> None:
    path = tmp_path / "spec.toml"
    path.write_text(SPEC_TOML)
    from_dict = vcpulab.simulate(SPEC)
    assert [r["scenario"] for r in from_dict] == ["native", "UC"]
    assert all(RESULT_KEYS <= r.keys() for r in from_dict)
    expected = [without_wall(r) for r in from_dict]
    for spec in (SPEC_TOML, path, str(path)):
        assert [without_wall(r) for r in vcpulab.simulate(spec)] == expected


def test_simulate_matches_the_cli(tmp_path: Path) -> None:
    path = tmp_path / "spec.toml"
    path.write_text(SPEC_TOML)
    cli = run_cli("run", path, "--json")
    assert cli.code == 0, cli.err
    assert [without_wall(r) for r in cli.json_lines()] == [without_wall(r) for r in vcpulab.simulate(path)]


def test_simulate_overrides_as_list_or_mapping() -> None:
    by_list = vcpulab.simulate(SPEC, overrides=["experiment.vcpus=[4]", 'experiment.scenarios=["UC"]'])
    by_map = vcpulab.simulate(SPEC, overrides={"experiment.vcpus": [4], "experiment.scenarios": ["UC"]})
    assert [r["vcpus"] for r in by_list] == [4]
    assert [without_wall(r) for r in by_list] == [without_wall(r) for r in by_map]


def test_simulate_raises_spec_error_naming_the_source() -> None:
    with pytest.raises(vcpulab.SpecError, match="mine.toml"):
        vcpulab.simulate("[experiment\n", source="mine.toml")
    with pytest.raises(vcpulab.SpecError):
        vcpulab.simulate({"experiment": {"workloads": ["nosuchwl"]}})
    assert issubclass(vcpulab.SpecError, vcpulab.VcpulabError)
    assert issubclass(vcpulab.SimulationError, vcpulab.VcpulabError)


def test_simulate_missing_file() -> None:
    with pytest.raises(FileNotFoundError):
        vcpulab.simulate("no/such/spec.toml")


def test_plan_exposes_cells_and_spec() -> None:
    plan = vcpulab.plan(SPEC)
    assert [(c["workload"], c["scenario"], c["vcpus"], c["threads"], c["seed"]) for c in plan.cells()] == [
        ("ep", "native", 2, 2, 1),
        ("ep", "UC", 2, 2, 1),
    ]
    assert "experiment" in plan.spec_toml()


def test_builtin_workloads_have_toml() -> None:
    for w in vcpulab.workloads():
        assert vcpulab.workload_toml(w["name"]).strip()
    with pytest.raises(vcpulab.SpecError):
        vcpulab.workload_toml("nosuchwl")
