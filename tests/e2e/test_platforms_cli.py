"""`vcpulab platforms` and `[platform] preset` as a user meets them."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from conftest import RunCli, one_line_error

PRESETS = {"TPDS-4S", "TPDS-4S-k419", "S4U-2S", "BAS-OPT", "DIS-R720", "DIS-R420"}


def test_platforms_lists_every_testbed_with_the_default_marked(cli: RunCli) -> None:
    r = cli("platforms", "--json")
    assert r.code == 0, r.err
    items = r.json_lines()
    assert {p["name"] for p in items} == PRESETS
    assert [p["name"] for p in items if p["default"]] == ["TPDS-4S"]
    assert all(p["title"] and p["used_by"] for p in items)
    table = cli("platforms")
    assert table.code == 0 and "TPDS-4S (default)" in table.out and '[platform] preset = "NAME"' in table.out


def test_platforms_show_prints_the_preset_as_toml_with_sources(cli: RunCli) -> None:
    for name in PRESETS:
        r = cli("platforms", "show", name.lower())
        assert r.code == 0, r.err
        doc = tomllib.loads(r.out)
        assert doc["platform"]["name"] == name
        assert "# source:" in r.out


def test_an_unknown_preset_is_a_one_line_error_with_a_suggestion(cli: RunCli, tmp_path: Path) -> None:
    line = one_line_error(cli("platforms", "show", "DIS-R72"))
    assert "unknown platform preset 'DIS-R72'" in line and "did you mean 'DIS-R720'" in line
    spec = tmp_path / "s.toml"
    spec.write_text('[platform]\npreset = "TPDS-4"\n[experiment]\nworkloads = ["lock"]\n')
    line = one_line_error(cli("validate", str(spec)))
    assert f"{spec}: platform.preset: unknown platform preset 'TPDS-4'" in line and "did you mean 'TPDS-4S'" in line
    line = one_line_error(cli("validate", "--workload", "lock", "--set", 'platform.preset="S4U"'))
    assert "platform.preset: unknown platform preset 'S4U'" in line and line.count("--set") == 1


def test_a_preset_sets_the_machine_and_the_spec_overrides_it(cli: RunCli, tmp_path: Path) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text('[platform]\npreset = "DIS-R720"\n[experiment]\nworkloads = ["lock"]\nvcpus = [4]\n')
    r = cli("validate", str(spec), "--print-spec")
    assert r.code == 0, r.err
    doc = tomllib.loads(r.out)
    assert doc["platform"]["preset"] == "DIS-R720"
    assert (doc["machine"]["sockets"], doc["machine"]["cores_per_socket"]) == (2, 8)
    r = cli("validate", str(spec), "--print-spec", "--set", "machine.sockets=1")
    assert r.code == 0, r.err
    assert tomllib.loads(r.out)["machine"]["sockets"] == 1
    # Without [platform] the spec runs on the TPDS testbed, and says so.
    r = cli("validate", "--workload", "lock", "--print-spec")
    assert json.dumps(tomllib.loads(r.out)["platform"]) == '{"preset": "TPDS-4S"}'
