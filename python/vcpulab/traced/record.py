"""``vcpulab workloads record``: run the real programs built from source at their thread counts,
untraced and under the tracer, and write ``traces/<suite>/<program>/t<N>.vtrace.xz`` with the
program's ``manifest.toml`` (docs/real-programs.md).

For each program table ``traces/programs/<suite>.<program>.toml`` and each thread count N::

    untraced runs (--runs, measured: wall, CPU, context switches, system calls)   the truth
    one traced run (vcpulab trace: the same counts, under the tracer)             the perturbation
    the trace's native replay on the traced CPUs (predict.fidelity)               the replay's error
    the trace, xz-compressed, its sha256 and all of the above → manifest [[trace]]

The programs are not built here: their binaries are ``<bin>/<suite>.<program>`` and their inputs
``<inputs>/<suite>.<program>/`` (defaults :data:`DEFAULT_BIN`, :data:`DEFAULT_INPUTS`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import lzma
import os
import platform
import statistics
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._vcpulab import trace_info
from ..atomic import Output
from ..bridge import mitigate, predict
from ..bridge.commands import trace_program
from ..bridge.launch import TRIM_MADVISE, LaunchError, Measurement
from ..spec import toml_value
from .manifest import MANIFEST, ManifestError, load_program, program_table, repo_traces

REAL = repo_traces().parent.parent / "real"
"""Where the programs are built: the directory `real` beside the repository's own directory."""
DEFAULT_BIN = Path(os.environ.get("VCPULAB_REAL_BIN") or REAL / "bin")
DEFAULT_INPUTS = Path(os.environ.get("VCPULAB_REAL_INPUTS") or REAL / "inputs")
SOURCE = "github.com/bamos/parsec-benchmark"
"""The public PARSEC 3.0 tree the programs are built from (docs/references.md [PARSEC])."""
COMMIT = "2e492f771c6749577fe4e7610d516a9e7f8ad580"

COUNTS = {
    "futex": "syscalls:sys_enter_futex",
    "madvise": "syscalls:sys_enter_madvise",
    "madvise_trim": TRIM_MADVISE,
    "munmap": "syscalls:sys_enter_munmap",
    "mprotect": "syscalls:sys_enter_mprotect",
    "mmap": "syscalls:sys_enter_mmap",
    "brk": "syscalls:sys_enter_brk",
    "sched_yield": "syscalls:sys_enter_sched_yield",
}
"""The system calls counted in every run (perf tracepoints; absent where perf cannot count)."""

REPLAY_METRICS = (
    "parallelism",
    "tlb_shootdowns",
    "tlb_local_only",
    "ipis_tlb",
    "ipis_resched",
    "blocks",
    "blocks_per_s",
    "block_p50_us",
    "block_p90_us",
    "block_mean_us",
    "wakeups",
    "wakeups_local",
    "wakeups_remote",
    "futex_calls",
)
"""The native replay's metrics kept in the manifest (those the simulator reports)."""

FIELDS = ("program", "path", "compiler", "cflags", "libraries", "args", "input", "native_input")
"""Fields a program table must give (traces/programs/*.toml)."""


class RecordError(Exception):
    """A program that cannot be recorded: one line."""


@dataclass(frozen=True)
class Setup:
    bin_dir: Path = DEFAULT_BIN
    inputs_dir: Path = DEFAULT_INPUTS
    root: Path = repo_traces()
    runs: int = 3
    cpus: int | None = None


def _measured(m: Measurement) -> dict[str, Any]:
    out: dict[str, Any] = {
        "wall_s": round(m.wall_s, 6),
        "user_s": round(m.user_s, 6),
        "sys_s": round(m.sys_s, 6),
        "vol_ctxsw": m.voluntary_switches,
        "invol_ctxsw": m.involuntary_switches,
        "held_off_share": round(m.held_off_share, 4),
    }
    for key, event in COUNTS.items():
        n = m.count(event)
        if n is not None:
            out[key] = n
    return out


def _median(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The runs' medians, key by key (a key some run lacks is left out); ``wall_s_runs`` keeps
    every run's wall time."""
    keys = [k for k in runs[0] if all(k in r for r in runs)]
    out: dict[str, Any] = {"runs": len(runs), "wall_s_runs": [r["wall_s"] for r in runs]}
    for k in keys:
        v = statistics.median(r[k] for r in runs)
        out[k] = round(v, 6) if isinstance(v, float) else v
    return out


def _fill(arg: str, threads: int, inputs: Path) -> str:
    return arg.replace("{threads}", str(threads)).replace("{inputs}", str(inputs))


def command(table: Mapping[str, Any], name: str, threads: int, setup: Setup) -> tuple[list[str], dict[str, str]]:
    """The program's argv and added environment at ``threads`` threads."""
    inputs = setup.inputs_dir / name
    argv = [str(setup.bin_dir / name), *(_fill(str(a), threads, inputs) for a in table["args"])]
    env = {str(k): _fill(str(v), threads, inputs) for k, v in (table.get("env") or {}).items()}
    return argv, env


def check_table(path: Path, table: Mapping[str, Any]) -> None:
    for key in FIELDS:
        if key not in table:
            raise ManifestError(f"{path}: field '{key}' is missing (expected: {', '.join(FIELDS)})")
    if not isinstance(table["args"], list) or not all(isinstance(a, str) for a in table["args"]):
        raise ManifestError(f"{path}: field 'args': expected an array of strings")
    for key in ("source", "commit"):  # optional: the PARSEC mirror's (SOURCE, COMMIT) otherwise
        if key in table and (not isinstance(table[key], str) or not table[key]):
            raise ManifestError(f"{path}: field '{key}': expected a non-empty string (got {table[key]!r})")
    counts = table.get("thread_counts", [])
    if not isinstance(counts, list) or not all(
        isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in counts
    ):
        raise ManifestError(f"{path}: field 'thread_counts': expected an array of positive integers")


def prepare_inputs(name: str, table: Mapping[str, Any], setup: Setup, say: Callable[[str], None]) -> None:
    """Makes ``<inputs>/<name>`` with the table's ``prepare`` command (our own generators, run
    from the repository's root) when it is missing; a table with neither ``prepare`` nor
    ``mirror_inputs`` needs none (its arguments are its input)."""
    inputs = setup.inputs_dir / name
    prepare = table.get("prepare")
    if (inputs.is_dir() and any(inputs.iterdir())) or not (prepare or table.get("mirror_inputs")):
        return  # made already, or the program takes its input from its arguments
    if not prepare:
        where = table["mirror_inputs"]
        raise RecordError(
            f"{name}: no inputs in {inputs} (extract {where} of the PARSEC tree there: docs/real-programs.md)"
        )
    inputs.mkdir(parents=True, exist_ok=True)
    argv = [_fill(str(a), 0, inputs) for a in prepare]
    say(f"{name}: making its inputs: {' '.join(argv)}")
    done = subprocess.run(argv, cwd=setup.root.parent, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise RecordError(f"{name}: making its inputs failed (exit status {done.returncode}): {last}")


@contextlib.contextmanager
def _scratch_cwd() -> Iterator[Path]:
    """A temporary working directory for the program (some write files into it)."""
    old = Path.cwd()
    with tempfile.TemporaryDirectory(prefix="vcpulab-record-") as d:
        os.chdir(d)
        try:
            yield Path(d)
        finally:
            os.chdir(old)


def record_one(
    name: str, table: Mapping[str, Any], threads: int, setup: Setup, out_dir: Path, console: Any
) -> dict[str, Any]:
    """Records ``name`` at ``threads`` threads: the manifest's ``[[trace]]`` entry."""
    argv, env = command(table, name, threads, setup)
    if not Path(argv[0]).is_file():
        raise RecordError(f"{name}: no program at {argv[0]} (build it first: docs/real-programs.md)")
    with _scratch_cwd() as cwd:
        untraced = mitigate.repeat("untraced", argv, env, mitigate.Policy.fixed(setup.runs), setup.cpus)
        raw = cwd / "run.vtrace"
        with open(os.devnull, "r+b") as null:
            traced, info = trace_program(
                argv, raw, setup.cpus, None, console, stdout=null.fileno(), stdin=null.fileno(), env_extra=env
            )
        if traced.status != 0:
            raise RecordError(f"{name} at {threads} threads: the traced run failed (exit status {traced.exit_code})")
        cpus = traced.cpus
        pred = predict.fidelity(str(raw), cpus, info=info)
        data = raw.read_bytes()
    packed = lzma.compress(data, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=9)
    file = f"t{threads}.vtrace.xz"
    Output(out_dir / file).write_bytes(packed)
    runs = [_measured(m) for m in untraced.measurements]
    base = _median(runs)
    replay = info["replay"]
    return {
        "threads": threads,
        "file": file,
        "sha256": hashlib.sha256(packed).hexdigest(),
        "bytes": len(packed),
        "trace_bytes": len(data),
        "format": int(info["version"]),
        "argv": [Path(argv[0]).name, *argv[1:]],
        "env": env,
        "cpus": cpus,
        "machine": platform.machine(),
        "kernel": replay.get("kernel") or platform.release(),
        "glibc": replay.get("libc") or platform.libc_ver()[1],
        "records": int(replay["records"]),
        "program_threads": int(replay["threads"]),
        "untraced": base,
        "traced": _measured(traced),
        "replay": replay_entry(pred, info, base),
    }


def replay_entry(pred: Mapping[str, Any], info: Mapping[str, Any], base: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest's ``replay`` table: the native replay ``pred`` of a trace (``info`` =
    its ``trace_info``) against the untraced medians ``base``."""
    replayed_wall = float(pred["t_native_s"])
    replayed_cpu = float(pred["c_native_ns"]) / 1e9
    metrics = pred.get("metrics", {})
    cpu = float(base["user_s"]) + float(base["sys_s"])
    return {
        "wall_s": round(replayed_wall, 6),
        "cpu_s": round(replayed_cpu, 6),
        "wall_error": round(replayed_wall / float(base["wall_s"]) - 1.0, 4) if base["wall_s"] > 0 else None,
        "cpu_error": round(replayed_cpu / cpu - 1.0, 4) if cpu > 0 else None,
        "unexplained_s": round(info["replay"]["unexplained_ns"] / 1e9, 6),
        "unmap_calls": int(predict.unmap_calls(metrics)),
        **{k: round(float(metrics[k]), 6) for k in REPLAY_METRICS if k in metrics},
    }


def _program(name: str, setup: Setup) -> tuple[Path, dict[str, Any], Path]:
    """``name``'s program table (its path, checked) and the directory of its traces."""
    path, table = program_table(name, setup.root)
    check_table(path, table)
    if table["program"] != name:
        raise ManifestError(f"{path}: field 'program': expected '{name}' (the file's name) (got {table['program']!r})")
    suite, prog = name.split(".", 1)
    return path, table, setup.root / suite / prog


def replay_again(name: str, setup: Setup, say: Callable[[str], None]) -> None:
    """Recomputes every ``replay`` table of ``name``'s manifest from its committed traces (after
    a change of the simulator), leaving the measurements of the real program as they are."""
    _, table, out_dir = _program(name, setup)
    program = load_program(out_dir)
    entries = []
    for t in program.traces:
        entry = dict(t.entry)
        trace = str(t.path(out_dir))
        info = json.loads(trace_info(trace))
        pred = predict.fidelity(trace, int(entry["cpus"]), info=info)
        entry["replay"] = replay_entry(pred, info, entry["untraced"])
        entries.append(entry)
        r = entry["replay"]
        say(f"{name}: {t.threads} threads: replayed {r['wall_s']:.3f} s, {r['unmap_calls']:,} unmapping calls")
    Output(out_dir / MANIFEST).write_bytes(manifest_text(name, table, entries).encode())


def manifest_text(name: str, table: Mapping[str, Any], entries: Sequence[Mapping[str, Any]]) -> str:
    head = {
        "program": name,
        "source": table.get("source", SOURCE),
        "commit": table.get("commit", COMMIT),
        **{k: table[k] for k in FIELDS if k != "program"},
        **{
            k: table[k]
            for k in ("threads_arg", "notes", "mirror_inputs", "prepare", "env", "replayable", "not_replayable")
            if k in table
        },
    }
    lines = [
        f"# Traces of {name} recorded by `vcpulab workloads record` (docs/real-programs.md).",
        "# The [[trace]] entries are measurements of this machine; do not edit them by hand.",
    ]
    lines += [f"{k} = {toml_value(v)}" for k, v in head.items()]
    for e in sorted(entries, key=lambda e: e["threads"]):
        lines.append("")
        lines.append("[[trace]]")
        lines += [f"{k} = {toml_value(v)}" for k, v in e.items()]
    return "\n".join(lines) + "\n"


def record(
    name: str, threads: Sequence[int] | None, setup: Setup, console: Any, say: Callable[[str], None]
) -> list[dict[str, Any]]:
    """Records ``name`` at ``threads`` (default: its table's thread_counts) and rewrites its
    manifest, keeping the entries of other thread counts. Returns the new entries."""
    path, table, out_dir = _program(name, setup)
    counts = list(threads or table.get("thread_counts") or [])
    if not counts:
        raise RecordError(f"{name}: no thread counts (give --threads, or thread_counts in {path})")
    out_dir.mkdir(parents=True, exist_ok=True)
    old: dict[int, dict[str, Any]] = {}
    if (out_dir / MANIFEST).is_file():
        old = {t.threads: dict(t.entry) for t in load_program(out_dir).traces}
    prepare_inputs(name, table, setup, say)
    made = []
    for n in counts:
        say(f"{name}: {n} threads: {setup.runs} untraced runs, a traced run, the native replay")
        entry = record_one(name, table, n, setup, out_dir, console)
        old[n] = entry
        made.append(entry)
        Output(out_dir / MANIFEST).write_bytes(manifest_text(name, table, list(old.values())).encode())
        say(
            f"{name}: {n} threads: {entry['bytes'] / 1e3:,.0f} kB, untraced {entry['untraced']['wall_s']:.3f} s, "
            f"traced {entry['traced']['wall_s']:.3f} s, replayed {entry['replay']['wall_s']:.3f} s"
        )
    return made


def add_arguments(p: Any, thread_counts: Any) -> None:
    """The options of ``vcpulab workloads record``; ``thread_counts`` is the CLI's type of a
    comma-separated list of thread counts."""
    p.add_argument(
        "names", nargs="*", metavar="NAME", help="programs (suite.program); default: every table in traces/programs"
    )
    p.add_argument(
        "--threads", type=thread_counts, help="thread counts, e.g. 1,4,16 (default: each table's thread_counts)"
    )
    p.add_argument(
        "--bin",
        type=Path,
        default=DEFAULT_BIN,
        help=f"the built programs, <suite>.<program> (default {DEFAULT_BIN}; $VCPULAB_REAL_BIN)",
    )
    p.add_argument(
        "--inputs",
        type=Path,
        default=DEFAULT_INPUTS,
        help=f"their inputs, one directory each (default {DEFAULT_INPUTS}; $VCPULAB_REAL_INPUTS)",
    )
    p.add_argument(
        "--runs",
        type=int,
        choices=range(1, 11),
        default=3,
        metavar="N",
        help="untraced runs per thread count, 1-10 (default 3)",
    )
    p.add_argument(
        "--replay-only",
        action="store_true",
        help="only recompute the manifests' native replays from the committed traces (after a simulator change)",
    )
    p.add_argument(
        "--root", type=Path, default=repo_traces(), help="the traces directory (default: the repository's traces/)"
    )


def run(args: Any) -> int:
    from ..render import stderr_console
    from .manifest import program_tables

    names = args.names or program_tables(args.root)
    if not names:
        raise RecordError(f"no program tables in {args.root / 'programs'} (docs/real-programs.md)")
    setup = Setup(args.bin, args.inputs, args.root.resolve(), args.runs)
    console = stderr_console()
    failed = 0
    for name in names:
        try:
            if args.replay_only:
                replay_again(name, setup, lambda s: console.print(s, highlight=False))
                continue
            record(name, args.threads, setup, console, lambda s: console.print(s, highlight=False))
        except (RecordError, ManifestError, LaunchError, OSError) as e:
            failed += 1
            console.print(f"vcpulab workloads record: {e}", style="red", highlight=False)
    return 1 if failed else 0
