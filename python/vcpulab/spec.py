"""Turning what a user gives (a file, TOML text, a dict, command-line flags) into spec text.

Validation is not done here: the native side validates the spec text and every override
exactly the same way, whatever they came from. This module only reads, quotes and assembles.
"""

from __future__ import annotations

import json
import math
import os
import stat
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

import tomli_w

SCENARIOS: tuple[str, ...] = ("native", "UC", "OC", "OC2")
"""Every scenario, in the order they are reported."""

SpecLike: TypeAlias = str | os.PathLike[str] | Mapping[str, Any]
OverridesLike: TypeAlias = Iterable[str] | Mapping[str, Any]


class OverrideSyntaxError(ValueError):
    """An override is not of the form PATH=VALUE."""


MAX_DEPTH = 64
"""The most levels a spec nests (each key, part of a dotted key and list index is one): the
native side's bound for spec files and ``--set`` (``crates/vcpulab-sim/src/spec/depth.rs``).
A dict spec or override value is held to it here, before it is written out as TOML, which
recurses once per level."""


def _check_depth(value: Any, what: str, start: int = 0) -> None:
    """:class:`SpecError` (the native side's words) if ``value`` nests more than
    :data:`MAX_DEPTH` levels below ``start``; without recursion, so any depth is told."""
    stack = [(value, start)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, Mapping) else item if isinstance(item, (list, tuple)) else ()
        for child in children:
            if depth + 1 > MAX_DEPTH:
                from ._vcpulab import SpecError

                raise SpecError(
                    f"{what}: nested more than {MAX_DEPTH} levels deep (each key, part of a dotted key and "
                    f"list index is a level; at most {MAX_DEPTH})"
                )
            stack.append((child, depth + 1))


@dataclass(frozen=True)
class SpecSource:
    """Spec text plus the name errors should be reported against."""

    text: str
    source: str


def toml_value(value: Any) -> str:
    """Render a Python value as a one-line TOML value (the right-hand side of ``key = value``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        # JSON's escapes are all valid TOML; DEL must be escaped in TOML, not in JSON.
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, Mapping):
        items = ", ".join(f"{toml_value(str(k))} = {toml_value(v)}" for k, v in value.items())
        return f"{{ {items} }}" if items else "{}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} as a TOML value")


def parse_override(text: str) -> str:
    """Check the shape of a ``PATH=VALUE`` override and return it unchanged.

    The value itself is validated by the native side, against the spec.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # bytes that are not UTF-8 on the command line (surrogate escapes)
        shown = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        raise OverrideSyntaxError(f"not valid UTF-8 text: '{shown}'") from None
    path, sep, _value = text.partition("=")
    if not sep or not path.strip():
        raise OverrideSyntaxError(f"expected PATH=VALUE, e.g. experiment.vcpus=[4] (got {text!r})")
    return text


def normalize_overrides(overrides: OverridesLike) -> list[str]:
    """Accept ``["a.b=1", ...]`` or ``{"a.b": 1, ...}`` and return ``PATH=VALUE`` strings."""
    if isinstance(overrides, Mapping):
        for path, value in overrides.items():
            # The path's own levels are the native side's to count; its value's are counted here.
            _check_depth(value, f"--set {str(path)[:60]}", start=1)
        return [f"{path}={toml_value(value)}" for path, value in overrides.items()]
    if isinstance(overrides, str):
        raise TypeError("overrides must be a list of 'PATH=VALUE' strings or a mapping, not a str")
    return [parse_override(item) for item in overrides]


def _looks_like_path(text: str) -> bool:
    if "\n" in text:
        return False
    stripped = text.strip()
    return stripped.endswith(".toml") or Path(stripped).is_file()


MAX_TEXT_INPUT = 16 * 1024 * 1024
"""The largest spec file (or other text input) read, in bytes; the biggest example is a few KiB."""


class InputFileError(ValueError):
    """An input file that cannot be read as text: its one-line reason, naming the file."""


def read_text_input(path: str, what: str) -> str:
    """The UTF-8 text of the regular file ``path`` of at most :data:`MAX_TEXT_INPUT` bytes,
    else :class:`InputFileError` naming ``what`` and ``path`` (an OSError, e.g. a missing
    file, propagates as it is). It never blocks (a FIFO is refused
    before it is opened, and opened without waiting for a writer if it appears meanwhile) and
    never reads more than the limit (``/dev/zero`` is refused, a growing file is cut short)."""
    where = f"cannot read {what} '{path}'"
    limit = f"larger than {MAX_TEXT_INPUT // (1024 * 1024)} MiB"

    def check(st: os.stat_result) -> None:
        if stat.S_ISDIR(st.st_mode):
            raise InputFileError(f"{where}: is a directory")
        if not stat.S_ISREG(st.st_mode):
            kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device or socket"
            raise InputFileError(f"{where}: not a regular file ({kind})")
        if st.st_size > MAX_TEXT_INPUT:
            raise InputFileError(f"{where}: {limit} ({st.st_size:,} bytes)")

    # An OSError (missing, not permitted) propagates as it is: callers say it their way.
    check(os.stat(path))
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        check(os.fstat(fd))  # what was opened, if the path changed since the stat
        chunks, size = [], 0
        while size <= MAX_TEXT_INPUT:
            chunk = os.read(fd, MAX_TEXT_INPUT + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > MAX_TEXT_INPUT:
        raise InputFileError(f"{where}: {limit}")
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError:
        raise InputFileError(f"{where}: not UTF-8 text") from None


def read_spec_file(path: str | os.PathLike[str]) -> SpecSource:
    """Read a spec file: a regular file of at most :data:`MAX_TEXT_INPUT` bytes of UTF-8 text,
    else :class:`InputFileError` (see :func:`read_text_input`)."""
    name = os.fspath(path)
    return SpecSource(read_text_input(name, "spec file"), name)


def load_spec(spec: SpecLike, source: str | None = None) -> SpecSource:
    """Resolve a path, TOML text or dict into spec text.

    A ``str`` is taken as a path when it is one line and ends in ``.toml`` or names an
    existing file; otherwise it is TOML text.
    """
    if isinstance(spec, Mapping):
        _check_depth(spec, "<dict>")
        loaded = SpecSource(tomli_w.dumps(dict(spec)), "<dict>")
    elif isinstance(spec, os.PathLike) or (isinstance(spec, str) and _looks_like_path(spec)):
        loaded = read_spec_file(spec)
    elif isinstance(spec, str):
        loaded = SpecSource(spec, "<string>")
    else:
        raise TypeError(f"spec must be a path, TOML text or a dict, not {type(spec).__name__}")
    return SpecSource(loaded.text, source) if source is not None else loaded


@dataclass(frozen=True)
class Selection:
    """The experiment fields that command-line flags can set. ``None`` means not given."""

    workloads: Sequence[str] | None = None
    scenarios: Sequence[str] | None = None
    vcpus: Sequence[int] | None = None
    seeds: Sequence[int] | None = None
    threads: int | None = None

    def fields(self) -> dict[str, Any]:
        """The given fields as ``experiment.*`` keys and values, in spec order."""
        values: dict[str, Any] = {
            "workloads": _dedup(self.workloads),
            "scenarios": _dedup(self.scenarios),
            "vcpus": _dedup(self.vcpus),
            "seeds": _dedup(self.seeds),
            "threads": self.threads,
        }
        return {key: value for key, value in values.items() if value is not None}

    def overrides(self) -> list[str]:
        """The given fields as overrides of a spec file."""
        return [f"experiment.{key}={toml_value(value)}" for key, value in self.fields().items()]

    def spec(self) -> SpecSource:
        """A whole spec built from flags alone, with defaults for what was not given."""
        experiment: dict[str, Any] = {
            "scenarios": list(SCENARIOS),
            "vcpus": [8],
            "seeds": [1],
        }
        experiment.update(self.fields())
        return SpecSource(tomli_w.dumps({"experiment": experiment}), "<flags>")


def _dedup(values: Sequence[Any] | None) -> list[Any] | None:
    if values is None:
        return None
    return list(dict.fromkeys(values))


APICV_OFF_NOTE = (
    "vm.apicv = false with PV EOI on (vm.pv.eoi, the default) costs exits only where an interrupt reaches a "
    "vCPU running guest code (a kick, EXTERNAL_INTERRUPT, instead of a posted interrupt) or waits behind another "
    "pending one (INTERRUPT_WINDOW and MSR_WRITE_EOI); a wake-up IPI to a halted vCPU takes KVM's same path with "
    "or without APICv, so a workload whose IPIs only wake idle vCPUs runs unchanged (docs/spec.md, vm.apicv)"
)


def apicv_note(spec_toml: str) -> str | None:
    """:data:`APICV_OFF_NOTE` when a VM of the materialised spec ``spec_toml`` has APICv off and
    PV EOI on: the setting users expect to cost more than it can (see the note)."""
    doc = tomllib.loads(spec_toml)
    base = doc.get("vm", {})
    for vm in [base, *doc.get("vms", {}).values()]:
        apicv = vm.get("apicv", base.get("apicv", True))
        eoi = vm.get("pv", {}).get("eoi", base.get("pv", {}).get("eoi", True))
        if apicv is False and eoi is not False:
            return APICV_OFF_NOTE
    # Variants that turn it off: `vary = { "vm.apicv" = [...] }` or a named variant's `set`.
    experiment = doc.get("experiment", {})
    eoi_off = base.get("pv", {}).get("eoi", True) is False
    if False in (experiment.get("vary", {}).get("vm.apicv") or []) and not eoi_off:
        return APICV_OFF_NOTE
    for variant in experiment.get("variants", []):
        sets = variant.get("set", {}) if isinstance(variant, dict) else {}
        if sets.get("vm.apicv") is False and sets.get("vm.pv.eoi", not eoi_off) is not False:
            return APICV_OFF_NOTE
    return None
