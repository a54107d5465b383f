"""Property tests of what the commands read from a user: spec files (`vcpulab validate FILE`),
`--set PATH=VALUE`, `--only FIELD=VALUE,...` and trace files (`vcpulab predict FILE`).

Whatever the bytes, the nesting or the size, a command ends with exit 0, 2 (bad input) or 3
(a simulation that cannot complete); a failure is exactly one line `vcpulab: error: ...` on
stderr; no "Traceback" anywhere; and no file is written (each call runs in a fresh directory,
its results store and HOME inside it, and must leave it as it found it).

Most calls run in-process (`vcpulab.cli.main`, stdout and stderr captured: the same code path
as the console script, without a process start per example). What only a real process shows
(a stack overflow is SIGSEGV, which kills the process rather than raising) runs as a
subprocess: the deep-nesting cases and the trace reader, whose replay may not even be bounded
in time for arbitrary records.

Hypothesis runs derandomized (a fixed sequence of examples, the same on every machine) with no
example database, so a failure here is a failure everywhere, every time.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import struct
import subprocess
import tempfile
import tomllib
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import REPO, vcpulab_command
from vcpulab.spec import MAX_DEPTH  # the spec's nesting bound, the native side's too


def _settings(examples: int) -> Any:
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


# --- running the command ----------------------------------------------------------------------


@dataclass
class Outcome:
    args: Sequence[str]
    code: int
    out: str
    err: str
    written: list[str]

    def check(self) -> None:
        """The properties every input must keep."""
        shown = f"args={[a[:200] for a in self.args]!r}\ncode={self.code}\nstderr={self.err[:2000]!r}"
        assert self.code in (0, 2, 3), shown
        assert "Traceback" not in self.out and "Traceback" not in self.err, shown
        assert not self.written, f"{shown}\nwrote {self.written}"
        lines = self.err.splitlines()
        if self.code == 0:
            # Notes (vm.apicv) and the replay's progress may be said; an error may not.
            assert not any(line.startswith("vcpulab: error") for line in lines), shown
        else:
            assert len(lines) == 1 and self.err.endswith("\n") and self.err.count("\n") == 1, shown
            assert lines[0].startswith("vcpulab: error: "), shown
            assert "internal error" not in lines[0], shown


def _listing(root: Path) -> set[str]:
    return {str(Path(d, f).relative_to(root)) for d, dirs, files in os.walk(root) for f in [*dirs, *files]}


@contextlib.contextmanager
def _scratch(files: dict[str, bytes]) -> Iterator[tuple[Path, dict[str, str]]]:
    """A fresh directory holding ``files``, and the environment a call runs with: its results
    store and HOME inside the directory (so whatever a command writes shows up there)."""
    with tempfile.TemporaryDirectory(prefix="vcpulab-props-") as d:
        root = Path(d)
        for name, data in files.items():
            (root / name).write_bytes(data)
        env = {
            "VCPULAB_RESULTS": str(root / "results"),
            "HOME": str(root / "home"),
            "XDG_CACHE_HOME": str(root / "cache"),
        }
        yield root, env


@contextlib.contextmanager
def _environ(values: dict[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.pop("VCPULAB_DEBUG", None)  # a bug must show as "internal error", not a traceback
    os.environ.update(values)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def in_process(args: Sequence[str], files: dict[str, bytes] | None = None) -> Outcome:
    """``vcpulab ARGS`` through :func:`vcpulab.cli.main`, in a fresh directory."""
    from vcpulab import cli

    files = files or {}
    with _scratch(files) as (root, env):
        before = _listing(root)
        out, err = io.StringIO(), io.StringIO()
        with _environ(env), contextlib.chdir(root), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main(list(args))
            except SystemExit as e:  # what a process would exit with (never expected)
                code = e.code if isinstance(e.code, int) else 1
        return Outcome(args, code, out.getvalue(), err.getvalue(), sorted(_listing(root) - before))


def in_subprocess(args: Sequence[str], files: dict[str, bytes] | None = None, timeout: float = 120) -> Outcome:
    """``vcpulab ARGS`` as its own process (a crash is a negative exit code here)."""
    files = files or {}
    with _scratch(files) as (root, env_extra):
        before = _listing(root)
        env = {k: v for k, v in os.environ.items() if k != "VCPULAB_DEBUG"} | env_extra
        proc = subprocess.run(
            vcpulab_command() + list(args),
            cwd=root,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
        )
        out = proc.stdout.decode("utf-8", "replace")
        err = proc.stderr.decode("utf-8", "replace")
        return Outcome(args, proc.returncode, out, err, sorted(_listing(root) - before))


# --- what a spec can hold -------------------------------------------------------------------

# A small experiment: two cells of a one-operation workload (a run of it takes milliseconds).
TINY = b"""[experiment]
workloads = ["w"]
scenarios = ["native", "UC"]
vcpus = [2]

[workloads.w]
program = [{ compute = "1us" }]
"""
EXAMPLES = sorted((REPO / "examples").glob("*.toml"))


@functools.cache
def spec_fields() -> list[tuple[str, Any]]:
    """Every field of a materialised spec (a built-in workload included) and its value: real
    paths for --set, and values of the right shape to mutate."""
    from vcpulab import Plan

    text = (REPO / "examples" / "quickstart.toml").read_text()
    doc = tomllib.loads(Plan(text, "quickstart.toml", []).spec_toml())
    fields: list[tuple[str, Any]] = []

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict) and value:
            for k, v in value.items():
                key = k if k.replace("_", "").replace("-", "").isalnum() and k.isascii() else f'"{k}"'
                walk(f"{prefix}.{key}" if prefix else key, v)
        else:
            fields.append((prefix, value))

    walk("", doc)
    return fields


def toml_text(value: Any) -> str:
    from vcpulab.spec import toml_value

    return toml_value(value)


# Text as a command line delivers it: no NUL; bytes that are not UTF-8 arrive as surrogate
# escapes (U+DC80..U+DCFF), as Python decodes argv.
arg_chars = st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)) | st.sampled_from(
    ["\udc80", "\udcff", "\udcc3"]
)
arg_text = st.text(arg_chars, max_size=40)
# Pieces TOML and the override syntax give meaning to.
syntax = st.sampled_from(
    list("[]{}=.,'\"\\#\n\t ")
    + ['"""', "'''", "\\u", "\\U0010FFFF", "\\ud800", "[0]", "[-1]", "[99999999999999999999]"]
)
numbers = st.sampled_from(
    [
        "0",
        "-1",
        "1",
        "2",
        "9223372036854775807",
        "9223372036854775808",
        "-9223372036854775808",
        "18446744073709551615",
        "99999999999999999999999",
        "0x7fffffffffffffff",
        "0o777",
        "0b1",
        "1_000",
        "1e308",
        "1e309",
        "-1e309",
        "5e-324",
        "nan",
        "-nan",
        "inf",
        "-inf",
        "-0.0",
        "1.5",
        "4294967295",
        "4294967296",
        "65536",
        "1979-05-27T07:32:00Z",
        "07:32:00",
        "1979-05-27",
        "true",
        "false",
    ]
)
units = st.sampled_from(["ns", "us", "µs", "ms", "s", "min", "h", "KiB", "MiB", "GiB", "TiB", "B", "%", "", " ", "x"])
quantity = st.builds(lambda n, u: f'"{n}{u}"', numbers, units)
scalar_text = (
    numbers
    | quantity
    | st.builds(toml_text, st.text(arg_chars, max_size=12))
    | st.sampled_from(
        ['""', '"none"', '"auto"', '"UC"', '"lock"', "[]", "{}", "[1, 2]", '["lock", "ep"]', "[0]", "{ x = 1 }"]
    )
)


INLINE_KEYS = ["a", "x", "params", '"q.r"', "'k'"]


@st.composite
def nested(draw: st.DrawFn, leaf: st.SearchStrategy[str] = scalar_text, most: int = 3 * MAX_DEPTH) -> str:
    """A TOML value nested up to ``most`` lists and inline tables deep (built by a loop, not
    recursion, so it can be far deeper than Hypothesis' own recursion goes)."""
    depth = draw(st.integers(0, 6) | st.integers(0, most))
    value = draw(leaf)
    for _ in range(depth):
        kind = draw(st.sampled_from(["array", "table", "dotted"]))
        if kind == "array":
            value = f"[{value}]"
        elif kind == "table":
            value = f"{{ {draw(st.sampled_from(INLINE_KEYS))} = {value} }}"
        else:
            value = f"{{ {'.'.join(['k'] * draw(st.integers(1, 5)))} = {value} }}"
    return value


@st.composite
def a_field(draw: st.DrawFn) -> tuple[str, Any]:
    return draw(st.sampled_from(spec_fields()))


@st.composite
def toml_line(draw: st.DrawFn) -> str:
    """One line of a spec: a real field (dotted from the root) or a made-up key, set to a
    value of the field's shape, a scalar of any shape, or something nested."""
    path, original = draw(a_field())
    choice = draw(st.integers(0, 5))
    if choice == 0:
        path = draw(arg_text.filter(lambda s: "\n" not in s)) or "k"
        path = toml_text(path)  # any text, as a quoted key
    elif choice == 1:
        path = path + "." + ".".join(["a"] * draw(st.integers(1, 2 * MAX_DEPTH)))
    value = draw(
        st.one_of(
            st.just(toml_text(original)),
            scalar_text,
            nested(),
            st.text(arg_chars, max_size=30),
        )
    )
    return f"{path} = {value}"


@st.composite
def spec_text(draw: st.DrawFn) -> bytes:
    """Spec file contents: random bytes, a real spec mutated byte by byte, lines of TOML over a
    valid experiment, deep nesting and large sizes."""
    kind = draw(st.sampled_from(["bytes", "mutated", "fields", "deep", "large", "syntax"]))
    if kind == "bytes":
        return draw(st.binary(max_size=400))
    if kind == "mutated":
        data = bytearray(draw(st.sampled_from(EXAMPLES)).read_bytes())
        for _ in range(draw(st.integers(1, 8))):
            op = draw(st.sampled_from(["flip", "insert", "delete", "cut"]))
            at = draw(st.integers(0, max(len(data) - 1, 0)))
            if op == "flip" and data:
                data[at] = draw(st.integers(0, 255))
            elif op == "insert":
                data[at:at] = draw(st.binary(min_size=1, max_size=8))
            elif op == "delete":
                del data[at : at + draw(st.integers(1, 16))]
            else:
                del data[at:]
        return bytes(data)
    if kind == "fields":
        lines = draw(st.lists(toml_line(), min_size=1, max_size=6))
        return TINY + "\n".join(lines).encode("utf-8", "surrogateescape") + b"\n"
    if kind == "deep":
        return TINY + f"[vm]\nq = {draw(nested(most=6 * MAX_DEPTH))}\n".encode("utf-8", "surrogateescape")
    if kind == "large":
        n = draw(st.sampled_from([1_000, 20_000, 100_000]))
        what = draw(st.sampled_from(["seeds", "keys", "string", "headers"]))
        if what == "seeds":
            return b"[experiment]\nworkloads = ['lock']\nseeds = [" + b",".join(b"%d" % i for i in range(n)) + b"]\n"
        if what == "keys":
            return TINY + b"[vm]\n" + b"".join(b"k%d = %d\n" % (i, i) for i in range(n))
        if what == "string":
            return TINY + b"[workloads.w.params]\nx = '" + b"y" * (n * 50) + b"'\n"
        return TINY + b"".join(b"[workloads.w%d]\n" % i for i in range(n // 10))
    pieces = draw(st.lists(syntax | arg_text | numbers, max_size=30))
    return TINY + "".join(pieces).encode("utf-8", "surrogateescape")


# --- spec files ---------------------------------------------------------------------------------


@_settings(400)
@given(spec_text())
def test_any_spec_file_is_validated_or_refused_in_one_line(data: bytes) -> None:
    in_process(["validate", "spec.toml"], {"spec.toml": data}).check()


# --- --set -------------------------------------------------------------------------------------


@st.composite
def override(draw: st.DrawFn) -> str:
    """``PATH=VALUE`` of any text, or a real field's path with a value of any shape."""
    kind = draw(st.sampled_from(["text", "syntax", "deep-path", "field", "field", "field", "field", "field-nested"]))
    if kind == "text":
        return draw(arg_text)
    if kind == "syntax":
        return "".join(draw(st.lists(syntax | arg_text | numbers, max_size=12)))
    path, original = draw(a_field())
    if kind == "deep-path":
        path = ".".join([path] + ["a"] * draw(st.integers(MAX_DEPTH - 8, MAX_DEPTH + 2)))
    elif draw(st.booleans()):
        path += draw(st.sampled_from(["", "[0]", "[1]", "[999]", ".x", "[0].x", " ", "'", "[x]", "."]))
    if kind == "field-nested":
        value = draw(nested())
    else:
        value = draw(st.one_of(st.just(toml_text(original)), scalar_text, arg_text))
    return f"{path}={value}"


@_settings(400)
@given(st.lists(override(), min_size=1, max_size=3))
def test_any_override_is_applied_or_refused_in_one_line(sets: list[str]) -> None:
    args = ["validate", "spec.toml"] + [f"--set={s}" for s in sets]
    in_process(args, {"spec.toml": TINY}).check()


# --- --only ------------------------------------------------------------------------------------

CELL_VALUES = {
    "workload": ["w", "lock", "W"],
    "scenario": ["native", "UC", "uc", "OC"],
    "vcpus": ["2", "4", "02", "2.0"],
    "threads": ["2", "0"],
    "oc_vms": ["2", "None", ""],
    "seed": ["1", "18446744073709551616"],
    "variant": ["", "x"],
}


@st.composite
def only_filter(draw: st.DrawFn) -> str:
    """``FIELD=VALUE[|VALUE],...``: real fields and values (so some select cells and run them),
    and any text."""
    if draw(st.integers(0, 3)) == 0:
        return "".join(
            draw(st.lists(arg_text | st.sampled_from([",", "|", "=", " ", "workload", "vcpus"]), max_size=10))
        )
    parts = []
    for _ in range(draw(st.integers(1, 3))):
        field = draw(st.sampled_from(sorted(CELL_VALUES)) | arg_text)
        values = draw(st.lists(st.sampled_from(CELL_VALUES.get(field, [""])) | arg_text, min_size=1, max_size=3))
        parts.append(f"{field}{draw(st.sampled_from(['=', ' = ', '==', '']))}{'|'.join(values)}")
    return draw(st.sampled_from([",", ", ", ",,", "|"])).join(parts)


@_settings(150)
@given(st.lists(only_filter(), min_size=1, max_size=2))
def test_any_only_filter_selects_or_is_refused_in_one_line(filters: list[str]) -> None:
    args = ["run", "spec.toml", "--no-store", "-j", "1"] + [f"--only={f}" for f in filters]
    in_process(args, {"spec.toml": TINY}).check()


# --- nesting and length far past the bounds, in a real process ----------------------------------


def _deep_path(n: int) -> str:
    return ".".join(["a"] * n)


DEEP_CASES = {
    # Was a stack overflow in the TOML writer: SIGSEGV, exit 139, nothing said.
    "set-path-20000": ["validate", "spec.toml", f"--set={_deep_path(20_000)}=1"],
    # Were read as a string of brackets (the toml crate's guard made them "not TOML").
    "set-array-20000": ["validate", "spec.toml", f"--set=vm.x={'[' * 20_000}{']' * 20_000}"],
    "set-inline-table-20000": ["validate", "spec.toml", f"--set=vm.x={'{a=' * 20_000}1{'}' * 20_000}"],
    "set-unclosed-20000": ["validate", "spec.toml", f"--set=vm.x={'[' * 20_000}"],
    # Path and value each within the bound, together past it.
    "set-path-and-value": ["validate", "spec.toml", f"--set={_deep_path(40)}={'[' * 40}1{']' * 40}"],
    # A vary key becomes an override path: it was told with the whole 40,000-character key.
    "vary-key-20000": ["validate", "vary.toml"],
    # Was "malformed TOML: recursion limit" (the toml crate's guard): now the same words as --set.
    "file-key-20000": ["validate", "deep.toml"],
    # Within each of the toml crate's guards, and recursed through by serde (a stack overflow
    # on a 1 MiB stack).
    "file-dotted-inline-tables": ["validate", "multiplied.toml"],
    # Not nested, only long (near the kernel's 128 KiB limit on one argument).
    "only-long": ["run", "spec.toml", "--no-store", "-j", "1", "--only=" + ",".join(["vcpus=2"] * 15_000)],
}


def _multiplied() -> bytes:
    # 79 inline tables, each under a 78-part dotted key: within each of the toml crate's own
    # guards (80 of either), over 6,000 levels deep in all.
    key = _deep_path(78)
    value = "1"
    for _ in range(79):
        value = f"{{ {key} = {value} }}"
    return TINY + f"[vm]\nq = {value}\n".encode()


@pytest.mark.parametrize("case", sorted(DEEP_CASES))
def test_nesting_far_past_the_bound_is_one_line_not_a_crash(case: str) -> None:
    files = {
        "spec.toml": TINY,
        "deep.toml": TINY + f"[vm]\n{_deep_path(20_000)} = 1\n".encode(),
        "multiplied.toml": _multiplied(),
        "vary.toml": TINY.replace(
            b"vcpus = [2]\n", f'vcpus = [2]\nvary = {{ "{_deep_path(20_000)}" = [1] }}\n'.encode()
        ),
    }
    r = in_subprocess(DEEP_CASES[case], files)
    r.check()
    if case != "only-long":
        assert r.code == 2 and f"nested more than {MAX_DEPTH} levels deep" in r.err, r.err[:500]
        assert len(r.err) < 400, r.err[:500]  # the input is shown cut short, not whole


@pytest.mark.parametrize("where", ["file", "set-path", "set-value"])
def test_the_nesting_bound_is_the_same_for_every_input(where: str) -> None:
    """At the bound the spec is judged on its fields (an unknown field here); one level more is
    the nesting error, whichever way the spec came in."""

    def run(levels: int) -> str:
        if where == "file":
            return in_process(
                ["validate", "s.toml"], {"s.toml": TINY + f"[vm]\n{_deep_path(levels - 1)} = 1\n".encode()}
            ).err
        if where == "set-path":
            return in_process(["validate", "s.toml", f"--set=vm.{_deep_path(levels - 1)}=1"], {"s.toml": TINY}).err
        value = "[" * (levels - 2) + "1" + "]" * (levels - 2)
        return in_process(["validate", "s.toml", f"--set=vm.x={value}"], {"s.toml": TINY}).err

    at, past = run(MAX_DEPTH), run(MAX_DEPTH + 1)
    assert "unknown field" in at and "nested" not in at, at
    assert f"nested more than {MAX_DEPTH} levels deep" in past, past


# --- trace files -------------------------------------------------------------------------------

MAGIC = b"\x89VTRACE\n"


def trace_header(version: int = 4) -> bytes:
    h = MAGIC + struct.pack("<HHIQI", version, 32, 0, 1_700_000_000_000_000_000, 42)
    return h + struct.pack("<I", zlib.crc32(h))


def trace_block(pid: int, tid: int, base: int, seq: int, records: Sequence[bytes], fix_crc: bool = True) -> bytes:
    payload = b"".join(records)
    head = b"VTBK" + struct.pack("<IIIQIII", len(payload), pid, tid, base, seq, len(records), 0)
    crc = zlib.crc32(head + payload) if fix_crc else 0
    return head + struct.pack("<I", crc) + payload


def record(kind: int, flags: int, t: int, body: bytes) -> bytes:
    return struct.pack("<BBHQ", kind, flags, 12 + len(body), t) + body


BASE = 5_000_000
U64 = st.integers(0, 2**64 - 1)
SMALL = st.integers(0, 4096)
# Kind: the struct layout of its fields after the header (the cpu field included where it has one).
KINDS = {
    0x03: "<Q",  # THREAD_EXIT
    0x04: "<QIiQ",  # THREAD_CREATE
    0x05: "<QIiQQ",  # THREAD_JOIN
    0x06: "<Qi",  # EXEC
    0x07: "<QQQQQ",  # THREAD_STATS
    0x10: "<QQQi",  # MUTEX_LOCK
    0x11: "<QQQ",  # MUTEX_UNLOCK
    0x12: "<QQQi",
    0x13: "<QQQ",
    0x14: "<QQQi",
    0x15: "<QQQi",
    0x16: "<QQQ",
    0x17: "<QQIi",  # BARRIER_INIT
    0x18: "<QQQi",
    0x19: "<QQQQi",  # COND_WAIT
    0x1A: "<QQ",
    0x1B: "<QQ",
    0x1C: "<QQIIQi",  # FUTEX
    0x20: "<QQ",  # MALLOC (no cpu)
    0x21: "<Q",
    0x22: "<QQQ",
    0x23: "<QQQ",
    0x24: "<QQQ",
    0x30: "<QQQiii",  # MMAP
    0x31: "<QQQi",
    0x32: "<QQQii",
    0x33: "<QQQii",
}


ADDRESSES = [0x1000, 0x2000, 0x5000, 0x7F00_0000_0000]
# Kinds that say how threads start, end and meet: random ones mostly make the trace
# inconsistent, which the reader refuses early; the rest reach the replay.
STRUCTURE = {0x03, 0x04, 0x05, 0x06, 0x07}


@st.composite
def field_value(draw: st.DrawFn, code: str, wild: bool) -> int:
    """A field: in a plausible record, an address of a few, a small time, a small result; in
    a wild one, anything of the field's width."""
    if not wild:
        if code in "Qq":
            return draw(st.sampled_from(ADDRESSES) | st.integers(0, 10**6))
        if code == "I":
            return draw(st.integers(0, 64))
        return draw(st.sampled_from([0, 0, 0, -1, 16, 110]))
    if code in "Qq":
        return draw(st.one_of(SMALL, U64, st.sampled_from([2**64 - 1, 2**63, *ADDRESSES])))
    if code == "I":
        return draw(st.one_of(SMALL, st.integers(0, 2**32 - 1)))
    return draw(st.one_of(st.integers(-20, 20), st.integers(-(2**31), 2**31 - 1)))


@st.composite
def a_record(draw: st.DrawFn, t: int, cpu: int) -> bytes:
    wild = draw(st.integers(0, 4)) == 0
    kind = draw(st.sampled_from(sorted(KINDS) if wild else sorted(set(KINDS) - STRUCTURE)))
    layout = KINDS[kind]
    values = [draw(field_value(c, wild)) for c in layout[1:]]
    if kind < 0x20 and not wild:
        values[0] = cpu  # the thread's CPU time, growing
    flags = draw(st.sampled_from([0, 0, 0x01, 0x02, 0x80] + ([0xFF] if wild else [])))
    return record(kind, flags, t, struct.pack(layout, *values))


def process_start(pid: int, version: int, cmd: bytes = b"./app\0") -> bytes:
    body = struct.pack("<QIIIHHQQ", 7, pid, 1, 8, 0, len(cmd), BASE, 99) + cmd
    if version >= 4:  # the kernel release and glibc's version
        body += b"6.1.0\0".ljust(64, b"\0") + b"2.36\0".ljust(16, b"\0")
    return record(0x01, 0, 0, body)


def thread_start(t: int, tid: int, parent: int, seq: int) -> bytes:
    return record(0x02, 0, t, struct.pack("<QIIIIQ", t, tid, parent, seq, 0, 0xABC))


@st.composite
def trace_bytes(draw: st.DrawFn) -> bytes:
    """Random bytes; the magic or a valid header followed by random bytes; or a trace of valid
    blocks (checksums right) of random records, a thread or two, maybe mutated afterwards."""
    kind = draw(st.sampled_from(["bytes", "magic", "header", "records", "records", "records"]))
    if kind == "bytes":
        return draw(st.binary(max_size=300))
    if kind == "magic":
        return MAGIC + draw(st.binary(max_size=300))
    if kind == "header":
        return trace_header(draw(st.sampled_from([1, 2, 3, 4, 5]))) + draw(st.binary(max_size=300))
    pid = 100
    version = draw(st.sampled_from([2, 3, 4, 4]))
    threads = draw(st.integers(1, 3))
    blocks = []
    t = 1
    for i in range(threads):
        tid = pid + i
        recs = [process_start(pid, version)] if i == 0 else []
        recs.append(thread_start(t, tid, 0 if i == 0 else pid, i))
        for _ in range(draw(st.integers(0, 12))):
            t += draw(st.integers(0, 10**6))
            recs.append(draw(a_record(t, cpu=t // 2)))
        if draw(st.booleans()):
            recs.append(record(0x03, 0, t + 1, struct.pack("<Q", t)))
        blocks.append(trace_block(pid, tid, BASE, 0, recs))
    data = bytearray(trace_header(version) + b"".join(blocks))
    for _ in range(draw(st.sampled_from([0, 0, 1, 3]))):
        at = draw(st.integers(32, len(data) - 1))
        data[at] = draw(st.integers(0, 255))
    return bytes(data)


PREDICT = ["predict", "t.vtrace", "--scenario", "UC", "--vcpus", "2"]


@_settings(40)
@given(trace_bytes())
def test_any_trace_is_predicted_or_refused_in_one_line(data: bytes) -> None:
    in_subprocess(PREDICT, {"t.vtrace": data}, timeout=120).check()


def _one_thread(*records: bytes) -> bytes:
    """A version-4 trace of one thread: its process start, thread start, then ``records``."""
    main = [process_start(100, 4), thread_start(1, 100, 0, 0), *records]
    return trace_header(4) + trace_block(100, 100, BASE, 0, main)


def test_a_replay_error_is_the_one_line_on_stderr() -> None:
    # A replay-time error (the barrier the trace inits for 36 parties and waits on with one
    # thread) came after a progress line "  simulating: native replay on 8 CPUs", printed
    # even when stderr was no terminal: two lines where a failure must be one.
    data = _one_thread(
        record(0x17, 0, 1000, struct.pack("<QQIi", 900, 0x1000, 36, 0)),  # BARRIER_INIT, 36 parties
        record(0x18, 0, 2000, struct.pack("<QQQi", 1000, 0x1000, 5, 0)),  # BARRIER_WAIT
    )
    r = in_subprocess(PREDICT, {"t.vtrace": data}, timeout=60)
    r.check()
    assert r.code == 2 and "the barrier would never open" in r.err
