"""The trace runs of the reproduction suite: an experiment whose PARSEC 3.0 / SPLASH-2x
benchmarks were all traced (``traces/``, :mod:`vcpulab.traced.manifest`) runs a second time with
every ``parsec.X`` / ``splash2x.X`` workload replaced by the traced program ``traced.parsec.X``.

The replacement is one transformation of the experiment's spec document (:func:`traced_document`):
every string equal to a benchmark's name in the ``[experiment]`` table (``workloads``,
``corunner``, ``vary`` lists, variants' ``set`` tables) and in the selectors of its
``[[published]]`` entries (``where``, ``relative_to``, ``order``, ``at``) becomes the traced
name; the document is written back as TOML (:func:`toml_document`) and planned like the profile
run, with the ``[reproduce] quick`` overrides transformed the same way. The results carry the
workload ``traced.parsec.X``, so they are stored beside the profile run's under their own keys.

An experiment gets no trace run when (the reason is shown on the scoreboard):

- it names no PARSEC/SPLASH-2x workload;
- it changes a benchmark's profile (``[workloads.parsec.X]``, or a ``vary``, variant or quick
  key ``workloads.parsec.X...``): a trace has no profile parameters to change;
- no benchmark has a trace at every thread count the experiment's cells use: the measured
  workload at each cell's ``threads``; a co-runner at ``corunner_threads``, else at the vCPU
  count of each co-running VM (``[vms.N] vcpus`` or the cell's), in the OC and OC2 cells.

A benchmark without such traces is left out of the trace run's workload lists (its published
values get no trace value), and its name is kept in the run's ``partial`` note; an untraced
co-runner runs as its profile.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from .._vcpulab import Plan, SpecError
from ..spec import toml_value
from ..sweep import SpecPayload
from ..traced.manifest import PREFIX, ManifestError, Program, catalogue
from .run import Prepared

PROFILE = "profile"
TRACE = "trace"
SOURCES = (PROFILE, TRACE)

BENCHMARK_SUITES = ("parsec", "splash2x")
"""The suites whose profiles a trace run replaces. The traced system benchmarks (``system.ebizzy``)
are not among them: the experiments that name them change their profiles' run lengths, which a
trace cannot follow (docs/real-programs.md)."""

NO_BENCHMARK = "no PARSEC/SPLASH-2x workload"
"""The reason of an experiment that never had a trace run in question."""

CORUNNER_SCENARIOS = frozenset({"oc", "oc2"})
"""The scenarios whose cells run co-runners (VMs 1..k; OC2's baseline instances 1..k)."""

SELECTOR_FIELDS = ("where", "relative_to", "order", "at")
"""The fields of a ``[[published]]`` entry that name cells (and so may name a workload)."""


def is_benchmark(name: Any) -> TypeGuard[str]:
    """A PARSEC 3.0 / SPLASH-2x workload name (``parsec.dedup``), the kind that gets traced."""
    return isinstance(name, str) and any(name.startswith(f"{s}.") and len(name) > len(s) + 1 for s in BENCHMARK_SUITES)


def traced_name(name: str) -> str:
    return PREFIX + name


# --- the transformation ---------------------------------------------------------------------


def swap(value: Any, names: Mapping[str, str]) -> Any:
    """``value`` with every string equal to a key of ``names`` replaced by its value, at any
    depth of lists and tables (keys are left alone)."""
    if isinstance(value, str):
        return names.get(value, value)
    if isinstance(value, Mapping):
        return {k: swap(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [swap(v, names) for v in value]
    return value


def traced_document(doc: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    """The spec document with the benchmarks of ``names`` replaced by their traced programs in
    ``[experiment]`` and in the published entries' selectors; everything else as it was."""
    out = dict(doc)
    if isinstance(doc.get("experiment"), Mapping):
        out["experiment"] = swap(doc["experiment"], names)
    published = doc.get("published")
    if isinstance(published, list):
        out["published"] = [
            {k: swap(v, names) if k in SELECTOR_FIELDS else v for k, v in e.items()} if isinstance(e, Mapping) else e
            for e in published
        ]
    return out


def traced_overrides(quick: Mapping[str, Any], names: Mapping[str, str]) -> list[str]:
    """The ``[reproduce] quick`` overrides (``PATH=VALUE``), their ``experiment.*`` values
    transformed as :func:`traced_document` transforms the table."""
    return [
        f"{path}={toml_value(swap(value, names) if str(path).startswith('experiment.') else value)}"
        for path, value in quick.items()
    ]


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(key: str) -> str:
    return key if _BARE_KEY.match(key) else toml_value(key)


def _table_array(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, Mapping) for v in value)


def toml_document(doc: Mapping[str, Any]) -> str:
    """A parsed TOML document (``tomllib``'s dicts and lists) written back as TOML: tables as
    ``[a.b]`` sections, arrays of tables as ``[[a]]`` entries (their contents inline), values
    by :func:`vcpulab.spec.toml_value`. ``tomllib.loads(toml_document(d)) == d``."""
    lines: list[str] = []

    def table(path: list[str], t: Mapping[str, Any]) -> None:
        plain = [(k, v) for k, v in t.items() if not isinstance(v, Mapping) and not _table_array(v)]
        tables = [(k, v) for k, v in t.items() if isinstance(v, Mapping)]
        arrays = [(k, v) for k, v in t.items() if _table_array(v)]
        if path and (plain or not (tables or arrays)):
            lines.append(f"\n[{'.'.join(_key(p) for p in path)}]")
        lines.extend(f"{_key(k)} = {toml_value(v)}" for k, v in plain)
        for k, v in tables:
            table([*path, k], v)
        for k, items in arrays:
            for item in items:
                lines.append(f"\n[[{'.'.join(_key(p) for p in [*path, k])}]]")
                lines.extend(f"{_key(ik)} = {toml_value(iv)}" for ik, iv in item.items())

    table([], doc)
    return "\n".join(lines).lstrip("\n") + "\n"


# --- which benchmarks, at which thread counts -----------------------------------------------


def _label_settings(label: str, variants: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The settings a cell's variant label stands for: a named variant's ``set`` table, then
    each ``key=value`` part (values as TOML where they parse, else as text)."""
    out: dict[str, Any] = {}
    for part in label.split(";") if label else ():
        key, sep, text = part.partition("=")
        if not sep:
            out.update(variants.get(part) or {})
            continue
        try:
            out[key] = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            out[key] = text
    return out


def needed_threads(settings: Mapping[str, Any], cells: Iterable[Mapping[str, Any]]) -> dict[str, set[int]]:
    """Benchmark → the thread counts its traces must cover for these cells of the spec
    ``settings`` (the materialised spec): the measured workload at each cell's ``threads``, a
    co-runner in OC/OC2 cells at ``corunner_threads``, else at each co-running VM's vCPUs."""
    experiment = settings.get("experiment") or {}
    variants = {str(v.get("name")): dict(v.get("set") or {}) for v in experiment.get("variants") or ()}
    vms = settings.get("vms") or {}
    need: dict[str, set[int]] = {}
    for cell in cells:
        workload = cell.get("workload")
        if is_benchmark(workload):
            need.setdefault(workload, set()).add(int(cell["threads"]))
        if str(cell.get("scenario", "")).casefold() not in CORUNNER_SCENARIOS:
            continue
        own = _label_settings(str(cell.get("variant") or ""), variants)
        corunner = own.get("experiment.corunner", experiment.get("corunner"))
        if not is_benchmark(corunner):
            continue
        fixed = own.get("experiment.corunner_threads", experiment.get("corunner_threads"))
        if fixed is not None:
            need.setdefault(corunner, set()).add(int(fixed))
            continue
        for n in range(1, max(int(cell.get("oc_vms") or 2), 2)):
            vm = vms.get(str(n)) or {}
            need.setdefault(corunner, set()).add(int(vm.get("vcpus") or cell["vcpus"]))
    return need


def named_benchmarks(settings: Mapping[str, Any]) -> list[str]:
    """Every PARSEC/SPLASH-2x name in the materialised ``[experiment]`` table (workloads,
    co-runner, vary lists, variants), in order of appearance."""
    found: list[str] = []

    def walk(value: Any) -> None:
        if is_benchmark(value) and value not in found:
            found.append(value)
        elif isinstance(value, Mapping):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(settings.get("experiment") or {})
    return found


def changed_profiles(doc: Mapping[str, Any], quick: Mapping[str, Any], benchmarks: Sequence[str]) -> list[str]:
    """Where the spec changes a benchmark's profile: a ``[workloads.parsec.X]`` table, or a
    ``vary``, variant ``set`` or quick key under ``workloads.parsec.X``."""
    where: list[str] = []
    defined = doc.get("workloads") or {}
    for name in benchmarks:
        suite, _, program = name.partition(".")
        if name in defined or program in (defined.get(suite) or {}):
            where.append(f"[workloads.{name}]")
    experiment = doc.get("experiment") or {}
    keys = list((experiment.get("vary") or {}).keys())
    for v in experiment.get("variants") or ():
        keys += list((v.get("set") or {}).keys()) if isinstance(v, Mapping) else []
    keys += list(quick.keys())
    for key in keys:
        if any(str(key).startswith(f"workloads.{name}.") or key == f"workloads.{name}" for name in benchmarks):
            if key not in where:
                where.append(str(key))
    return where


def missing_traces(need: Mapping[str, set[int]], programs: Sequence[Program]) -> list[str]:
    """What is not traced: ``no trace of splash2x.cholesky``, ``no trace of parsec.dedup,
    parsec.vips at 32, 64 threads`` (benchmarks lacking the same thread counts together, in the
    order of ``need``)."""
    by_name = {p.name: p for p in programs}
    groups: dict[tuple[int, ...], list[str]] = {}
    unusable: list[str] = []
    for name, counts in need.items():
        program = by_name.get(name)
        if program is not None and not program.replayable:
            unusable.append(
                f"{name}'s traces lack its synchronisation ({program.info.get('not_replayable', 'see its manifest')})"
            )
            continue
        lacking = () if program is None else tuple(sorted(t for t in counts if program.trace(t) is None))
        if program is None or lacking:
            groups.setdefault(lacking, []).append(name)
    out: list[str] = []
    for lacking, names in groups.items():
        text = f"no trace of {', '.join(names)}"
        if lacking:
            plural = "s" if lacking != (1,) else ""
            text += f" at {', '.join(str(t) for t in lacking)} thread{plural}"
        out.append(text)
    return out + unusable


# --- the trace run of an experiment ---------------------------------------------------------


@dataclass(frozen=True)
class Skipped:
    """An experiment without a trace run, and why."""

    reason: str


def complete_benchmarks(
    need: Mapping[str, set[int]], benchmarks: Sequence[str], programs: Sequence[Program]
) -> list[str]:
    """The benchmarks of ``benchmarks`` traced at every thread count ``need`` asks of them."""
    by_name = {p.name: p for p in programs if p.replayable}
    return [b for b in benchmarks if b in by_name and all(by_name[b].trace(t) is not None for t in need.get(b, ()))]


def drop(value: Any, names: Sequence[str]) -> Any:
    """``value`` with the strings of ``names`` taken out of every list, at any depth (a scalar
    equal to one, such as a co-runner, is kept: it runs as its profile)."""
    if isinstance(value, Mapping):
        return {k: drop(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [drop(v, names) for v in value if not (isinstance(v, str) and v in names)]
    return value


def emptied(value: Any) -> bool:
    """Whether dropping left an empty list of workloads anywhere (a ``workloads`` list or a
    ``vary`` list that named only untraced benchmarks)."""
    if isinstance(value, Mapping):
        return any(emptied(v) for v in value.values())
    return isinstance(value, list) and not value


def prepare_traced(profile: Prepared, quick: bool, programs: Sequence[Program]) -> Prepared | Skipped:
    """The trace run of a prepared (profile) experiment, or why it has none. Benchmarks without
    a trace at every thread count they need are left out of its workload lists (their published
    values have no trace value: "no cell matched"); an untraced co-runner runs as its profile;
    no traced benchmark at all, no trace run."""
    experiment = profile.experiment
    benchmarks = named_benchmarks(profile.settings)
    if not benchmarks:
        return Skipped(NO_BENCHMARK)
    doc = tomllib.loads(experiment.text)
    quick_table = experiment.quick if quick else {}
    changed = changed_profiles(doc, quick_table, benchmarks)
    if changed:
        return Skipped(f"changes a profile ({', '.join(changed)}): a trace has no profile parameters")
    need = needed_threads(profile.settings, profile.cells)
    complete = complete_benchmarks(need, benchmarks, programs)
    missing = missing_traces(need, programs)
    if not complete:
        return Skipped("; ".join(missing))
    untraced = [b for b in benchmarks if b not in complete]
    names = {b: traced_name(b) for b in complete}
    source = str(experiment.path)
    traced_doc = traced_document(doc, names)
    if untraced:
        experiment_table = drop(traced_doc.get("experiment") or {}, untraced)
        if emptied(experiment_table):
            return Skipped("; ".join(missing))
        traced_doc["experiment"] = experiment_table
        quick_table = {k: drop(v, untraced) if str(k).startswith("experiment.") else v for k, v in quick_table.items()}
        if emptied(quick_table):
            return Skipped("; ".join(missing))
    try:
        text = toml_document(traced_doc)
    except TypeError as e:  # a value TOML's writer does not know (a date)
        return Skipped(f"cannot write the traced spec: {e}")
    overrides = [*traced_overrides(quick_table, names), *profile.extra]
    try:
        plan = Plan(text, source, overrides)
    except SpecError as e:
        return Skipped(f"the traced spec is not valid: {e}")
    spec_text = plan.spec_toml()
    spec_hash = hashlib.sha256(spec_text.encode()).hexdigest()[:16]
    traced = dataclasses.replace(experiment, text=text, info=json.loads(plan.info()))
    payload = SpecPayload(text, source, tuple(overrides), spec_hash)
    return Prepared(
        traced, plan, payload, tomllib.loads(spec_text), source=TRACE, partial="; ".join(missing), extra=profile.extra
    )


def prepare_all_traced(
    prepared: Sequence[Prepared], quick: bool, programs: Sequence[Program] | None = None
) -> tuple[list[Prepared], dict[str, str]]:
    """The trace runs of ``prepared`` and, per experiment id without one, why. ``programs``
    defaults to the catalogue of ``$VCPULAB_TRACES`` (a broken manifest: every experiment's
    reason is its error)."""
    if programs is None:
        try:
            programs = catalogue()
        except ManifestError as e:
            return [], {p.experiment.id: f"traces unreadable: {e}" for p in prepared}
    runs: list[Prepared] = []
    reasons: dict[str, str] = {}
    for p in prepared:
        got = prepare_traced(p, quick, programs)
        if isinstance(got, Skipped):
            reasons[p.experiment.id] = got.reason
        else:
            runs.append(got)
    return runs, reasons
