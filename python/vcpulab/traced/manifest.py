"""The traced real programs committed under ``traces/``: where they are, and their manifests.

Layout (docs/real-programs.md)::

    traces/
      programs/<suite>.<program>.toml     how the program is run: arguments, input, source path
      <suite>/<program>/manifest.toml     what was recorded: one [[trace]] per thread count
      <suite>/<program>/t<N>.vtrace.xz    the trace at N threads (xz-compressed vtrace)

A workload named ``traced.<suite>.<program>`` replays ``t<N>.vtrace.xz`` at N threads; the
simulator finds the directory through ``VCPULAB_TRACES`` (:func:`traces_root`, set by the
package to this repository's ``traces/`` unless the user set it).

Every problem is a :class:`ManifestError`: one line naming the file and the field.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENV = "VCPULAB_TRACES"
PREFIX = "traced."
SUITES = ("parsec", "splash2x", "system")
"""The suites of traced programs: PARSEC 3.0, SPLASH-2x, and the system benchmarks of DIS ch.3
(``system.ebizzy``), whose profiles have no suite prefix (``ebizzy``)."""
UNPREFIXED = frozenset({"system"})
"""The suites whose built-in profiles are named without the suite (``ebizzy``, not ``system.ebizzy``)."""
MANIFEST = "manifest.toml"
PROGRAMS = "programs"


class ManifestError(ValueError):
    """A manifest or program table that cannot be used: one line naming the file and field."""


def repo_traces() -> Path:
    """The ``traces/`` directory of the repository this package is installed from (editable)."""
    return Path(__file__).resolve().parents[3] / "traces"


def traces_root() -> Path:
    """The directory of traced programs: ``$VCPULAB_TRACES``, else the repository's."""
    env = os.environ.get(ENV)
    return Path(env) if env else repo_traces()


def set_default_root() -> None:
    """Point the simulator at the repository's traces unless the user chose a directory."""
    if not os.environ.get(ENV) and repo_traces().is_dir():
        os.environ[ENV] = str(repo_traces())


@dataclass(frozen=True)
class Trace:
    """One recorded trace: the ``[[trace]]`` entry of a manifest."""

    threads: int
    file: str
    sha256: str
    entry: Mapping[str, Any]
    """The whole entry as written: cpus, kernel, glibc, format, sizes, measured times and counts."""

    def path(self, program_dir: Path) -> Path:
        return program_dir / self.file


@dataclass(frozen=True)
class Program:
    """A traced program: its manifest."""

    name: str
    """``<suite>.<program>``; the workload is ``traced.<name>``."""
    directory: Path
    info: Mapping[str, Any]
    """The manifest's top-level fields (source, commit, path, compiler, cflags, input, args...)."""
    traces: tuple[Trace, ...] = field(default_factory=tuple)

    @property
    def workload(self) -> str:
        return PREFIX + self.name

    @property
    def profile(self) -> str:
        """The built-in profile of the same program: ``parsec.dedup``; ``ebizzy`` for ``system.ebizzy``."""
        suite, _, program = self.name.partition(".")
        return program if suite in UNPREFIXED else self.name

    @property
    def replayable(self) -> bool:
        """Whether its replay stands for the program (false, with the reason in
        ``not_replayable``, for an OpenMP program whose runtime makes its futex calls inline, out
        of the tracer's sight, and for a fixed-time benchmark whose replayed run time is its
        main thread's sleep): such a program is listed, shown and compared with its profile,
        but the reproduction suite does not run it."""
        return self.info.get("replayable", True) is not False

    @property
    def thread_counts(self) -> list[int]:
        return sorted(t.threads for t in self.traces)

    def trace(self, threads: int) -> Trace | None:
        return next((t for t in self.traces if t.threads == threads), None)


def _str(where: str, table: Mapping[str, Any], key: str) -> str:
    v = table.get(key)
    if not isinstance(v, str) or not v:
        raise ManifestError(f"{where}: field '{key}': expected a non-empty string (got {v!r})")
    return v


def _int(where: str, table: Mapping[str, Any], key: str) -> int:
    v = table.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ManifestError(f"{where}: field '{key}': expected a positive integer (got {v!r})")
    return v


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ManifestError(f"{path}: not valid TOML: {e}") from None
    except UnicodeDecodeError:
        raise ManifestError(f"{path}: not UTF-8 text") from None
    except OSError as e:
        raise ManifestError(f"{path}: cannot read: {e.strerror or e}") from None


def load_program(directory: Path) -> Program:
    """The manifest of the program whose traces are in ``directory``."""
    path = directory / MANIFEST
    data = read_toml(path)
    name = _str(str(path), data, "program")
    if name != f"{directory.parent.name}.{directory.name}":
        raise ManifestError(
            f"{path}: field 'program': expected '{directory.parent.name}.{directory.name}' (the directory) (got '{name}')"  # noqa: E501
        )
    entries = data.get("trace", [])
    if not isinstance(entries, list):
        raise ManifestError(f"{path}: field 'trace': expected an array of tables ([[trace]])")
    traces: list[Trace] = []
    for i, e in enumerate(entries):
        where = f"{path}: trace[{i}]"
        if not isinstance(e, dict):
            raise ManifestError(f"{where}: expected a table")
        t = Trace(
            threads=_int(where, e, "threads"), file=_str(where, e, "file"), sha256=_str(where, e, "sha256"), entry=e
        )
        if any(o.threads == t.threads for o in traces):
            raise ManifestError(f"{where}: field 'threads': {t.threads} threads is recorded twice")
        traces.append(t)
    info = {k: v for k, v in data.items() if k != "trace"}
    return Program(name=name, directory=directory, info=info, traces=tuple(sorted(traces, key=lambda t: t.threads)))


def catalogue(root: Path | None = None) -> list[Program]:
    """Every traced program under ``root`` (default :func:`traces_root`), by name."""
    root = traces_root() if root is None else root
    found: list[Program] = []
    for suite in SUITES:
        base = root / suite
        if not base.is_dir():
            continue
        for d in sorted(base.iterdir()):
            if (d / MANIFEST).is_file():
                found.append(load_program(d))
    return found


def resolve(name: str, programs: Sequence[Program]) -> Program:
    """The program a name denotes: ``traced.parsec.dedup``, ``parsec.dedup`` or a unique suffix
    (``dedup``), as the simulator resolves workload names."""
    bare = name[len(PREFIX) :] if name.startswith(PREFIX) else name
    exact = [p for p in programs if p.name == bare]
    if exact:
        return exact[0]
    matches = [p for p in programs if p.name.endswith("." + bare)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise ManifestError(f"traced program '{name}' is ambiguous: {', '.join(p.workload for p in matches)}")
    known = ", ".join(p.workload for p in programs) or "none (no traces/ directory?)"
    raise ManifestError(f"no traced program '{name}' (known: {known})")


def unreplayable_notes(workloads: Iterable[str], root: Path | None = None) -> list[str]:
    """A note for each traced program among ``workloads`` whose manifest says its replay does
    not stand for the program (``replayable = false``), with the manifest's reason. Names that
    do not resolve are left to the simulator's own error."""
    traced = sorted({w for w in workloads if w.startswith(PREFIX)})
    if not traced:
        return []
    try:
        programs = catalogue(root)
    except ManifestError:
        return []
    notes = []
    for name in traced:
        try:
            program = resolve(name, programs)
        except ManifestError:
            continue
        if not program.replayable:
            why = program.info.get("not_replayable", "see its manifest")
            notes.append(
                f"{program.workload} is marked not replayable ({why}); its results do not stand for the "
                f"program: use its profile, {program.profile}"
            )
    return notes


def program_table(name: str, root: Path | None = None) -> tuple[Path, dict[str, Any]]:
    """``traces/programs/<name>.toml``: how the program is run (for ``workloads record``)."""
    root = traces_root() if root is None else root
    path = root / PROGRAMS / f"{name}.toml"
    return path, read_toml(path)


def program_tables(root: Path | None = None) -> list[str]:
    """The names of every program table under ``traces/programs``."""
    root = traces_root() if root is None else root
    d = root / PROGRAMS
    return sorted(p.name[: -len(".toml")] for p in d.glob("*.toml")) if d.is_dir() else []
