"""Spec assembly: values quoted as TOML, overrides checked for shape, flags turned into specs."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vcpulab.spec import (
    OverrideSyntaxError,
    Selection,
    load_spec,
    normalize_overrides,
    parse_override,
    toml_value,
)

scalars = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.text(),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=10,
)


@given(values)
def test_toml_value_round_trips(value: object) -> None:
    text = toml_value(value)
    assert "\n" not in text
    assert tomllib.loads(f"v = {text}")["v"] == value


@pytest.mark.parametrize("text", ["a=1", "experiment.vcpus=[2]", "a.b='x=y'", "x="])
def test_parse_override_accepts_path_equals_value(text: str) -> None:
    assert parse_override(text) == text


@pytest.mark.parametrize("text", ["novalue", "=1", " =1", ""])
def test_parse_override_rejects_other_shapes(text: str) -> None:
    with pytest.raises(OverrideSyntaxError):
        parse_override(text)


def test_normalize_overrides_from_mapping() -> None:
    assert normalize_overrides({"experiment.vcpus": [2, 4], "limits.max_virtual_time": "1s"}) == [
        "experiment.vcpus=[2, 4]",
        'limits.max_virtual_time="1s"',
    ]
    with pytest.raises(TypeError):
        normalize_overrides("a=1")  # a lone string is almost certainly a mistake


def test_load_spec_tells_paths_from_text(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text("[experiment]\n")
    assert load_spec(path).source == str(path)
    assert load_spec(str(path)).text == "[experiment]\n"
    assert load_spec("[experiment]\nworkloads = []\n").source == "<string>"
    assert tomllib.loads(load_spec({"experiment": {"vcpus": [2]}}).text) == {"experiment": {"vcpus": [2]}}
    assert load_spec("[experiment]\n", source="mine").source == "mine"
    with pytest.raises(FileNotFoundError):
        load_spec("missing.toml")


def test_selection_builds_a_spec_with_defaults() -> None:
    spec = tomllib.loads(Selection(workloads=["ep", "ep", "lock"]).spec().text)
    assert spec == {
        "experiment": {
            "workloads": ["ep", "lock"],
            "scenarios": ["native", "UC", "OC", "OC2"],
            "vcpus": [8],
            "seeds": [1],
        }
    }


def test_selection_overrides_only_what_was_given() -> None:
    assert Selection().overrides() == []
    assert Selection(workloads=["ep"], vcpus=[2, 4], threads=8).overrides() == [
        'experiment.workloads=["ep"]',
        "experiment.vcpus=[2, 4]",
        "experiment.threads=8",
    ]


def test_the_python_api_reads_spec_files_as_the_cli_does(tmp_path: Path) -> None:
    import os

    from vcpulab.spec import InputFileError, load_spec

    fifo = tmp_path / "spec.toml"
    os.mkfifo(fifo)  # would block a plain open() for ever
    with pytest.raises(InputFileError, match="not a regular file"):
        load_spec(fifo)
    big = tmp_path / "big.toml"
    big.write_bytes(b"#" * (16 * 1024 * 1024 + 1))
    with pytest.raises(InputFileError, match="larger than 16 MiB"):
        load_spec(big)


def _nested(levels: int, leaf: object = 1) -> object:
    value = leaf
    for i in range(levels):
        value = {"a": value} if i % 2 else [value]
    return value


def test_dict_specs_and_override_values_are_held_to_the_nesting_bound() -> None:
    """A dict spec or override value is written out as TOML by code that recurses once per
    level: past the spec's bound it is refused first, in the native side's words, whatever
    its depth (a RecursionError, or a stack overflow natively, was the alternative)."""
    from vcpulab import SpecError
    from vcpulab.spec import MAX_DEPTH

    spec: object = 1
    for _ in range(MAX_DEPTH):
        spec = {"a": spec}
    assert load_spec(spec).text.count("a") == MAX_DEPTH  # type: ignore[arg-type]
    for too_deep in ({"a": spec}, {"a": _nested(100_000)}):
        with pytest.raises(SpecError, match=f"<dict>: nested more than {MAX_DEPTH} levels deep"):
            load_spec(too_deep)  # type: ignore[arg-type]
    assert normalize_overrides({"vm.x": _nested(MAX_DEPTH - 1)})
    for value in (_nested(MAX_DEPTH), _nested(100_000)):
        with pytest.raises(SpecError, match=f"--set vm.x: nested more than {MAX_DEPTH} levels deep"):
            normalize_overrides({"vm.x": value})


def test_the_python_bound_is_the_native_one() -> None:
    """The same count on both sides: a spec at the bound reaches validation (and fails it on
    its made-up field), one level more is refused as too deep."""
    from vcpulab import Plan, SpecError
    from vcpulab.spec import MAX_DEPTH

    base = "[experiment]\nworkloads = ['lock']\n[vm]\n"
    keys = ".".join(["a"] * (MAX_DEPTH - 1))
    with pytest.raises(SpecError, match="unknown field"):
        Plan(base + f"{keys} = 1\n", "t.toml", [])
    with pytest.raises(SpecError, match=f"nested more than {MAX_DEPTH} levels deep"):
        Plan(base + f"{keys}.a = 1\n", "t.toml", [])
    with pytest.raises(SpecError, match="unknown field"):
        Plan(base, "t.toml", normalize_overrides({"vm.x": _nested(MAX_DEPTH - 2)}))
    with pytest.raises(SpecError, match=f"nested more than {MAX_DEPTH} levels deep"):
        Plan(base, "t.toml", normalize_overrides({"vm.x": _nested(MAX_DEPTH - 1)}))
