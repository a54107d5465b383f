"""The reproduction suite: the files ``experiments/published/<ID>.toml``, found, checked and
loaded, and the ids a command line selects.

A file is one of two kinds (docs/reproduce.md):

- **not expressible**: only a ``[reproduce]`` table with ``id``, ``title``, ``status`` and
  ``not_expressible`` (the missing mechanism), checked here;
- **runnable**: a normal spec with a ``[reproduce]`` table (and ``[[published]]`` entries),
  checked by the simulator when its :class:`~vcpulab._vcpulab.Plan` is built.

Every problem is a :class:`SuiteError` whose message is one line naming the file and field.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._vcpulab import Plan, SpecError
from ..spec import InputFileError, read_text_input, toml_value

DEFAULT_SUITE = os.path.join("experiments", "published")
"""The suite, relative to the working directory (the repository's root)."""


def default_suite() -> Path:
    """:data:`DEFAULT_SUITE` under the working directory, else the one of the repository this
    package is installed from (an editable install, as ``make`` makes), so that `vcpulab
    reproduce` works from any directory."""
    here = Path(DEFAULT_SUITE)
    repo = Path(__file__).resolve().parents[3] / DEFAULT_SUITE
    return here if here.is_dir() or not repo.is_dir() else repo


STATUSES = ("visible", "withheld")
NOT_EXPRESSIBLE_KEYS = ("id", "title", "status", "not_expressible")


class SuiteError(ValueError):
    """A suite file or selection that cannot be used: one line naming the file and field."""


@dataclass(frozen=True)
class Experiment:
    """One file of the suite."""

    id: str
    title: str
    status: str
    path: Path
    not_expressible: str | None = None
    """The reason (the missing mechanism) for a file of kind (a); None for a runnable spec."""
    text: str = ""
    info: Mapping[str, Any] = field(default_factory=dict)
    """``Plan.info()`` of a runnable spec (without the quick overrides)."""

    @property
    def runnable(self) -> bool:
        return self.not_expressible is None

    @property
    def reproduce(self) -> Mapping[str, Any]:
        return self.info.get("reproduce") or {}

    @property
    def platform(self) -> str:
        return str(self.info.get("platform") or "")

    @property
    def published(self) -> list[Mapping[str, Any]]:
        return list(self.info.get("published") or ())

    @property
    def quick(self) -> Mapping[str, Any]:
        return self.reproduce.get("quick") or {}

    def quick_overrides(self) -> list[str]:
        """The ``quick`` table as ``--set`` overrides (``PATH=VALUE``)."""
        return [f"{path}={toml_value(value)}" for path, value in self.quick.items()]

    def kind_text(self) -> str:
        if self.not_expressible is not None:
            return f"not expressible: {self.not_expressible}"
        return "runnable spec"


@dataclass(frozen=True)
class Suite:
    """The experiments of a suite directory, in id order."""

    root: Path
    experiments: tuple[Experiment, ...]

    def ids(self) -> list[str]:
        return [e.id for e in self.experiments]

    def select(self, wanted: Sequence[str]) -> list[Experiment]:
        """The experiments of ``wanted`` ids (case-insensitive; all when empty), in suite order;
        an unknown id is a :class:`SuiteError` with the closest known ids."""
        if not wanted:
            return list(self.experiments)
        by_key = {e.id.casefold(): e for e in self.experiments}
        chosen: set[str] = set()
        for name in wanted:
            key = name.strip().casefold()
            if key not in by_key:
                raise SuiteError(unknown_id_message(name, self.ids(), self.root))
            chosen.add(key)
        return [e for e in self.experiments if e.id.casefold() in chosen]


def unknown_id_message(name: str, known: Sequence[str], root: Path) -> str:
    folded = {k.casefold(): k for k in known}
    close = [folded[m] for m in difflib.get_close_matches(name.strip().casefold(), list(folded), n=3, cutoff=0.6)]
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    return (
        f"unknown experiment id {name!r} in {root} ({hint}`vcpulab reproduce --list` shows every id"
        f"{'' if known else '; the suite is empty'})"
    )


_NUMBERS = re.compile(r"(\d+)")


def id_order(name: str) -> tuple[Any, ...]:
    """Natural order of ids: TPDS-F2 < TPDS-F10, DIS-3.8a < DIS-3.10a."""
    return tuple(int(p) if p.isdigit() else p.casefold() for p in _NUMBERS.split(name))


def load_suite(root: str | os.PathLike[str]) -> Suite:
    """Every ``*.toml`` of ``root``, checked (:class:`SuiteError` on the first problem)."""
    base = Path(root)
    if not base.is_dir():
        what = "is not a directory" if base.exists() else "does not exist"
        raise SuiteError(f"suite directory '{base}' {what} (choose one with --suite DIR)")
    files = sorted((p for p in base.iterdir() if p.suffix == ".toml" and not p.name.startswith(".")), key=_file_order)
    experiments = [load_experiment(p) for p in files]
    seen: dict[str, Path] = {}
    for e in experiments:
        other = seen.setdefault(e.id.casefold(), e.path)
        if other != e.path:
            raise SuiteError(f"{e.path}: reproduce.id {e.id!r} is also the id of {other} (ids ignore case)")
    return Suite(base, tuple(experiments))


def _file_order(path: Path) -> tuple[Any, ...]:
    return (id_order(path.stem), path.name)


def load_experiment(path: Path) -> Experiment:
    """One suite file, of either kind."""
    try:
        text = read_text_input(str(path), "suite file")
    except InputFileError as e:
        raise SuiteError(str(e)) from None
    except OSError as e:
        raise SuiteError(f"cannot read suite file '{path}': {e.strerror or e}") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SuiteError(f"{path}: invalid TOML: {e}") from None
    table = doc.get("reproduce")
    if not isinstance(table, dict):
        raise SuiteError(
            f"{path}: reproduce: missing [reproduce] table (every suite file has one, with id, title and status)"
        )
    if "not_expressible" in table:
        return _not_expressible(path, text, doc, table)
    try:
        plan = Plan(text, str(path), [])
    except SpecError as e:
        raise SuiteError(str(e)) from None
    info = json.loads(plan.info())
    rep = info.get("reproduce") or {}
    experiment = Experiment(
        id=str(rep["id"]), title=str(rep["title"]), status=str(rep["status"]), path=path, text=text, info=info
    )
    _check_id(path, experiment.id)
    return experiment


def _not_expressible(path: Path, text: str, doc: Mapping[str, Any], table: Mapping[str, Any]) -> Experiment:
    others = [k for k in doc if k != "reproduce"]
    if others:
        shown = ", ".join(f"[{k}]" if isinstance(doc[k], dict) else k for k in others)
        raise SuiteError(
            f"{path}: {others[0]}: a not-expressible experiment (reproduce.not_expressible) has only a [reproduce] "
            f"table, no spec (found {shown})"
        )
    for key in table:
        if key not in NOT_EXPRESSIBLE_KEYS:
            raise SuiteError(
                f"{path}: reproduce.{key}: not a field of a not-expressible experiment "
                f"(expected only {', '.join(NOT_EXPRESSIBLE_KEYS)})"
            )
    for key in NOT_EXPRESSIBLE_KEYS:
        value = table.get(key)
        if key not in table:
            raise SuiteError(f"{path}: reproduce.{key}: missing (a not-expressible experiment needs {_needs(key)})")
        if not isinstance(value, str) or not value.strip():
            raise SuiteError(f"{path}: reproduce.{key}: expected {_needs(key)} (got {toml_value(value)})")
    if table["status"] not in STATUSES:
        raise SuiteError(
            f'{path}: reproduce.status: expected "visible" or "withheld" (got {toml_value(table["status"])})'
        )
    _check_id(path, table["id"])
    return Experiment(
        id=table["id"],
        title=table["title"],
        status=table["status"],
        path=path,
        not_expressible=" ".join(table["not_expressible"].split()),
        text=text,
    )


def _needs(key: str) -> str:
    return {
        "id": 'the experiment id, a non-empty string equal to the file name ("BAS-F6")',
        "title": "a non-empty string (what the experiment asks)",
        "status": '"visible" or "withheld"',
        "not_expressible": 'a non-empty string: the missing mechanism ("MISSING MECHANISM: ...")',
    }[key]


def _check_id(path: Path, id_: str) -> None:
    if id_ != path.stem:
        raise SuiteError(f"{path}: reproduce.id: {id_!r} must equal the file name's stem {path.stem!r}")
