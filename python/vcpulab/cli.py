"""The ``vcpulab`` command.

Every failure ends in exactly one line ``vcpulab: error: <message>`` on stderr and an exit
code: 2 for a bad spec or bad usage, 3 when a simulation cannot complete, 130 on Ctrl-C (SIGINT),
143 on SIGTERM.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import signal
import sys
import threading
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, NoReturn, TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from . import __version__, analysis, ple, render, report, scaling
from ._vcpulab import (
    TIMELINE_MAX_EVENTS,
    TIMELINE_WINDOW_NS,
    Plan,
    SimulationError,
    SpecError,
    VcpulabError,
    bench,
    build_id,
    characterize,
    platform_toml,
    platforms,
    policies,
    workload_toml,
    workloads,
)
from .atomic import AtomicWriter, Output, OutputError, write_bytes_atomic, write_csv_atomic
from .bridge import commands as bridge_commands
from .bridge.launch import LaunchError
from .calibration import commands as calibration_commands
from .calibration.rows import CalibrationError
from .report import memory
from .spec import SCENARIOS, InputFileError, OverrideSyntaxError, Selection, SpecSource, apicv_note, parse_override
from .spec import read_text_input as spec_read_text_input
from .store import COMPACT_ABOVE, QUERY_MEMORY_LIMIT, ResultsStore, StoreError, result_from_row
from .sweep import (
    CellFailed,
    InlineExecutor,
    OnlyError,
    SpecPayload,
    make_executor,
    parse_only,
    plan_stored,
    run_sweep,
    select_cells,
    stored_rows,
    sweep_units,
)
from .text import json_text, one_line, printable
from .traced.manifest import ManifestError, unreplayable_notes
from .traced.record import RecordError

EXIT_USAGE = 2
EXIT_SIMULATION = 3
EXIT_INTERRUPTED = 130
# `vcpulab query` prints at most this many rows unless --limit says otherwise.
QUERY_LIMIT = 10_000
# After Ctrl-C or SIGTERM, stopping the workers and committing finished cells normally takes well under a
# second; if it takes longer than this, the process dumps its threads' stacks and exits anyway.
INTERRUPT_GRACE_S = 30.0


class CliError(Exception):
    """An error to report as one line with the given exit code."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


class _StoreOnce(argparse._StoreAction):
    """argparse's ``store``, except that an option given twice is an error: argparse keeps the
    last value and drops the others without a word, so ``--vcpus 4 --vcpus 8`` ran 8 alone.
    Options that take several values say so in their help and accumulate instead."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        if self.option_strings:
            given: set[str] = namespace.__dict__.setdefault("_options_given", set())
            if self.dest in given:
                parser.error(f"argument {'/'.join(self.option_strings)}: given more than once (give it once)")
            given.add(self.dest)
        super().__call__(parser, namespace, values, option)


# The metavars of the arguments that name files (or a program and its arguments): these may
# hold bytes that are not UTF-8, as file names may. Every other argument is text.
PATH_METAVARS = frozenset({"FILE", "FILE.png", "DIR", "RESULTS", "SPEC", "TRACE", "-- PROGRAM [ARGS...]"})


def _utf8(parse: Any) -> Any:
    """An argument type: ``parse`` of a text that must be UTF-8. Python hands a command line's
    bytes that are not UTF-8 over as lone surrogates, which no later step can encode."""

    def check(text: str) -> Any:
        if any("\udc80" <= c <= "\udcff" for c in text):
            raise argparse.ArgumentTypeError(f"expected UTF-8 text; '{printable(text)}' holds a byte that is not UTF-8")
        return parse(text)

    check.__name__ = getattr(parse, "__name__", "text")
    return check


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (no usage dump) handled by :func:`main`, an
    option that takes one value may not be repeated (:class:`_StoreOnce`), and every argument
    but a file name must be UTF-8 text (:func:`_utf8`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.register("action", None, _StoreOnce)
        self.register("action", "store", _StoreOnce)

    def add_argument(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("metavar") not in PATH_METAVARS and kwargs.get("action") not in TAKES_NO_VALUE:
            kwargs["type"] = _utf8(kwargs.get("type") or str)
        return super().add_argument(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise CliError(message)


# Actions that take no value (a type would be an error).
TAKES_NO_VALUE = frozenset({"store_true", "store_false", "store_const", "append_const", "count", "help", "version"})


# --- argument types -------------------------------------------------------------------------


def _scenarios(text: str) -> list[str]:
    """``UC`` / ``uc,oc`` / ``all`` → canonical scenario names."""
    canonical = {name.lower(): name for name in SCENARIOS}
    names: list[str] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        if part.lower() == "all":
            names += SCENARIOS
        elif part.lower() in canonical:
            names.append(canonical[part.lower()])
        else:
            raise argparse.ArgumentTypeError(f"unknown scenario {part!r} (choose from {', '.join(SCENARIOS)}, all)")
    return names


def _ints(text: str) -> list[int]:
    """``8`` or ``4,8,16`` → integers."""
    try:
        return [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an integer or a comma-separated list of integers (got {text!r})"
        ) from None


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer (got {text!r})") from None


# The widest values the spec's fields take (vcpus and threads are u32; seeds are u64, but a
# TOML integer stops at 2^63 - 1). The simulator checks the rest (e.g. vCPUs the machine has).
U32_MAX = 2**32 - 1
TOML_INT_MAX = 2**63 - 1


def _bounded(parse: Any, low: int, high: int, what: str) -> Any:
    """An argument type: ``parse``'s integer(s), each within ``low``..``high`` (``what``
    describes the range in the error)."""

    def check(text: str) -> Any:
        value = parse(text)
        for v in value if isinstance(value, list) else [value]:
            if not low <= v <= high:
                raise argparse.ArgumentTypeError(f"expected {what} (got {v})")
        return value

    return check


_vcpu_counts = _bounded(_ints, 1, U32_MAX, f"vCPU counts from 1 to {U32_MAX}")
_seeds = _bounded(_ints, 0, TOML_INT_MAX, f"seeds from 0 to {TOML_INT_MAX}")
_thread_count = _bounded(_int, 1, U32_MAX, f"a thread count from 1 to {U32_MAX}")


# A count (CPUs, vCPUs, runs, rounds, ...).
_positive_int = _bounded(_int, 1, U32_MAX, f"a positive integer up to {U32_MAX}")


def _names(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def _override(text: str) -> str:
    try:
        return parse_override(text)
    except OverrideSyntaxError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


# The longest time slice or sampling interval a flag takes, in ms (one hour).
MAX_DURATION_MS = 3_600_000.0


def _duration_ms(text: str) -> float:
    try:
        value = float(text.removesuffix("ms"))
    except ValueError:
        value = -1.0
    if not 0 < value <= MAX_DURATION_MS:
        raise argparse.ArgumentTypeError(
            f"expected a positive number of milliseconds up to {MAX_DURATION_MS:.0f} (got {text!r})"
        )
    return value


_DURATION = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(ns|us|µs|ms|s)?\s*")
_NS_PER = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
_WINDOW_FORM = "START:END with durations such as 0ms:50ms, 10ms:80ms or 10ms: (END empty: until the run ends)"


def _virtual_ns(text: str) -> int:
    """``50ms`` / ``1.5s`` / ``0`` → ns (a unit is required unless the value is 0)."""
    m = _DURATION.fullmatch(text)
    if m is None or (m.group(2) is None and float(m.group(1)) != 0):
        raise argparse.ArgumentTypeError(
            f"expected {_WINDOW_FORM}; {text.strip()!r} is not a duration (units ns, us, ms, s)"
        )
    ns = round(float(m.group(1)) * _NS_PER[m.group(2) or "ns"])
    if ns > TOML_INT_MAX:
        raise argparse.ArgumentTypeError(f"{text.strip()!r} is too long a duration (at most {TOML_INT_MAX} ns)")
    return ns


def _window(text: str) -> tuple[int, int | None]:
    """``START:END`` → (start ns, end ns or None = until the run ends)."""
    start, colon, end = text.partition(":")
    if not colon or ":" in end:
        raise argparse.ArgumentTypeError(f"expected {_WINDOW_FORM} (got {text!r})")
    from_ns = _virtual_ns(start) if start.strip() else 0
    to_ns = _virtual_ns(end) if end.strip() else None
    if to_ns is not None and to_ns <= from_ns:
        raise argparse.ArgumentTypeError(f"the end must be after the start (got {text!r})")
    return from_ns, to_ns


# The longest `bench` runs, in seconds (one hour).
MAX_BENCH_S = 3600.0


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= MAX_BENCH_S:  # also NaN, inf and 1e400 (inf)
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds up to {MAX_BENCH_S:g} (got {text!r})")
    return value


def max_jobs() -> int:
    """The most local worker processes ``-j`` may start: 8 per core. More only crowd the
    machine (each process holds a simulator), and the results are the same with any number."""
    return 8 * (os.cpu_count() or 1)


def _jobs(text: str) -> int:
    value = _int(text)
    if not 1 <= value <= max_jobs():
        raise argparse.ArgumentTypeError(
            f"expected 1 to {max_jobs()} worker processes (8 per core of this machine; got {value})"
        )
    return value


# --- parser ---------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="vcpulab",
        description="Simulate multithreaded workloads on virtualized multicore hosts.",
        epilog="exit codes: 0 ok, 2 invalid spec or usage, 3 simulation could not complete, 130 interrupted (SIGINT), "
        "143 terminated (SIGTERM)",
    )
    parser.add_argument("--version", action="version", version=f"vcpulab {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    experiment = _Parser(add_help=False)
    experiment.add_argument("spec", nargs="?", metavar="SPEC", help="experiment spec (TOML); flags below override it")
    experiment.add_argument(
        "--workload",
        dest="workloads",
        action="extend",
        type=_names,
        metavar="NAME",
        help="workload(s) to run; repeatable or comma-separated (required without SPEC)",
    )
    experiment.add_argument(
        "--scenario",
        dest="scenarios",
        action="extend",
        type=_scenarios,
        metavar="S",
        help="native, UC, OC, OC2 or all; repeatable or comma-separated (default: all)",
    )
    experiment.add_argument(
        "--vcpus",
        action="extend",
        type=_vcpu_counts,
        metavar="N",
        help="vCPU count(s); repeatable or comma-separated (default: 8)",
    )
    experiment.add_argument(
        "--seed", dest="seeds", action="extend", type=_seeds, metavar="N", help="random seed(s) (default: 1)"
    )
    experiment.add_argument("--threads", type=_thread_count, metavar="N", help="threads per instance (default: vCPUs)")
    experiment.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        type=_override,
        metavar="PATH=VALUE",
        help="""override any spec field with a TOML value, e.g. --set 'limits.max_virtual_time="60s"'""",
    )

    run = commands.add_parser(
        "run",
        parents=[experiment],
        help="run an experiment and report the overheads",
        description="Run every cell of an experiment: a spec file, flags, or both.",
    )
    run.add_argument(
        "--json", action="store_true", help="print one JSON object per run (JSON Lines) instead of a table"
    )
    run.add_argument("-o", "--out", metavar="FILE", help="also write the JSON Lines to FILE (all or nothing)")
    run.add_argument(
        "--results",
        metavar="DIR",
        help="results directory (Parquet + DuckDB); default: results/<spec name> for a SPEC file "
        "($VCPULAB_RESULTS/<spec name> when set), none for a run from flags alone. Cells already stored "
        "there are not run again.",
    )
    run.add_argument("--no-store", action="store_true", help="do not store results (run every cell)")
    run.add_argument(
        "--repair",
        action="store_true",
        help="repair a damaged results directory first: set its missing or unreadable parts aside in DIR/damaged/ "
        "(never deleted) and run their cells again (docs/results.md)",
    )
    run.add_argument(
        "-j",
        "--jobs",
        type=_jobs,
        metavar="N",
        help="local worker processes (default: all cores; 1 runs in this process)",
    )
    run.add_argument("--cluster", metavar="ADDRESS", help="run on a Dask scheduler, e.g. tcp://HOST:8786")
    run.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="FILTER",
        help="run only matching cells: FIELD=VALUE[,FIELD=VALUE...], values of one field separated by |, "
        "e.g. 'workload=dedup,vcpus=16|32' (fields: workload, scenario, vcpus, threads, oc_vms, seed, variant)",
    )
    run.add_argument(
        "--cdf-out",
        metavar="FILE",
        help='with [report] cdf = "tlb_latency": write every latency sample and its CDF to FILE (CSV),'
        " and a plot beside it as .png when matplotlib is installed",
    )
    run.add_argument(
        "--window-out",
        metavar="FILE.png",
        help="with [record] ple_window = true: plot the PLE window over time, one panel per workload, scenario "
        "and vCPU count, a line per variant with an adaptive window (and APLE's epoch thresholds), to FILE.png, "
        "and write every recorded series beside it as FILE.csv",
    )
    run.add_argument(
        "--scaling-out",
        metavar="FILE.png",
        help="plot the measured speedup over the vCPU counts (t at the smallest count / t), one panel per "
        "workload, a line per scenario and variant, with the ideal speedup dashed, to FILE.png, and write "
        "the curves beside it as FILE.csv (with the efficiency-based speedup)",
    )
    run.add_argument(
        "--timeline",
        metavar="FILE",
        help="also record a timeline of the run's single cell and write it to FILE: a Chrome/Perfetto trace "
        "(JSON; open it in https://ui.perfetto.dev) with a track per pCPU and per vCPU, exits, IPIs, PLE exits "
        "and TLB shootdowns. The selection must be one cell (see --only); it runs in this process and is not "
        "stored. See docs/timeline.md",
    )
    run.add_argument(
        "--timeline-window",
        type=_window,
        metavar="START:END",
        help=f"the virtual time the timeline covers, e.g. 0ms:50ms or 10ms: (until the run ends); "
        f"default 0ms:{TIMELINE_WINDOW_NS // 1_000_000}ms",
    )
    run.add_argument(
        "--timeline-max-events",
        type=_bounded(_int, 1, TOML_INT_MAX, f"a positive integer up to {TOML_INT_MAX}"),
        metavar="N",
        help=f"stop recording the timeline after N events, and say where (default {TIMELINE_MAX_EVENTS:,})",
    )
    run.set_defaults(func=cmd_run)

    validate = commands.add_parser(
        "validate",
        parents=[experiment],
        help="check a spec and list the runs it makes",
        description="Validate a spec (and overrides) without running it.",
    )
    validate.add_argument("--json", action="store_true", help="print the cells as JSON Lines")
    validate.add_argument("--print-spec", action="store_true", help="print the materialised spec (TOML) instead")
    validate.set_defaults(func=cmd_validate)

    workload_commands = _list_and_show(
        commands,
        "workloads",
        "list the built-in workloads and the traced real programs",
        "List the built-in workloads (profiles) and the traced real programs (traced.<suite>.<program>: "
        "PARSEC/SPLASH-2x traces under $VCPULAB_TRACES, by default the repository's traces/), or show one: a "
        "profile as TOML, a traced program's manifest.",
        cmd_workloads,
        "print a built-in workload's TOML, or a traced program's manifest (traced.NAME)",
        cmd_workload_show,
    )
    from .traced import compare as traced_compare
    from .traced import record as traced_record

    rec = workload_commands.add_parser(
        "record",
        help="record the traces of the real programs built from source (docs/real-programs.md)",
        description="Run the real programs built from source (binaries <bin>/<suite>.<program>, inputs "
        "<inputs>/<suite>.<program>/) at their thread counts: untraced (--runs times), under the tracer, and "
        "replayed natively; write traces/<suite>/<program>/t<N>.vtrace.xz and the program's manifest.toml. "
        "How each program is run: traces/programs/<suite>.<program>.toml (docs/real-programs.md).",
    )
    traced_record.add_arguments(rec, _bounded(_ints, 1, 1024, "thread counts from 1 to 1024"))
    rec.set_defaults(func=traced_record.run)
    cmp = workload_commands.add_parser(
        "compare",
        help="the profiles against the traces' native replays; the traces' trust table (docs/profiles.md)",
        description="Run each traced program's built-in profile and its trace's replay natively in the "
        "simulator, N threads on N CPUs, and compare their blocking, wake-up, futex and unmapping rates and "
        "parallelism (a table, or spliced into --markdown FILE); with --trust FILE, splice the traces' "
        "trust table (replay error, untraced against traced counts) from the manifests instead.",
    )
    traced_compare.add_arguments(cmp)
    cmp.set_defaults(func=traced_compare.run)
    _list_and_show(
        commands,
        "platforms",
        "list the platform presets (testbeds)",
        "List the platform presets, one per testbed of the published experiments, or show one as "
        'TOML with the source of every value. A spec selects one with [platform] preset = "NAME".',
        cmd_platforms,
        "print a preset's TOML, with its sources",
        cmd_platform_show,
    )

    ch = commands.add_parser(
        "characterize-sim",
        help="run a workload natively in the simulator and classify it",
        description="Run a workload natively (n = CPUs threads on CPUs cores) and report its workload "
        "parallelism, synchronization frequency and scalability type (DIS ch.4), and the rates of "
        "blocks, TLB shootdowns and call-function IPIs.",
    )
    ch.add_argument("workload", metavar="NAME", help="a built-in workload (a unique suffix is enough: dedup)")
    ch.add_argument(
        "--cpus",
        type=_int,
        default=16,
        metavar="N",
        help="CPUs and threads (default: 16)",
    )
    ch.add_argument(
        "--seed",
        type=_bounded(_int, 0, TOML_INT_MAX, f"a seed from 0 to {TOML_INT_MAX}"),
        default=1,
        metavar="N",
        help="random seed (default: 1)",
    )
    ch.add_argument(
        "--slice",
        type=_duration_ms,
        default=24.0,
        metavar="MS",
        help="time slice of the synchronization cut-off, in ms (default: 24, DIS's allocation period)",
    )
    ch.add_argument("--set", dest="sets", action="append", default=[], type=_override, metavar="PATH=VALUE")
    ch.add_argument("--json", action="store_true", help="print the characterization as JSON")
    ch.set_defaults(func=cmd_characterize)

    dg = commands.add_parser(
        "diagnose",
        parents=[experiment],
        help="rank the causes of one cell's overhead and measure the mitigations",
        description="For one VM cell (UC, OC or OC2): rank the causes of its overhead by the CPU time they "
        "add over the native run, show who made busy-waiting vCPUs wait (wait chains), then re-run the cell "
        "with each applicable mitigation (TPDS §7, DIS) and print δη_t and δη_r with it, best first.",
    )
    dg.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="FILTER",
        help="pick the cell among the spec's: FIELD=VALUE[,FIELD=VALUE...] (fields as for run --only)",
    )
    dg.add_argument("--top", type=_positive_int, default=8, metavar="N", help="causes to show (default: 8)")
    dg.add_argument("--no-mitigations", action="store_true", help="skip the mitigation re-runs")
    dg.add_argument("--json", action="store_true", help="print the diagnosis as JSON")
    dg.add_argument("-o", "--out", metavar="FILE", help="also write the diagnosis to FILE as JSON (all or nothing)")
    dg.set_defaults(func=cmd_diagnose)

    bridge_commands.add_commands(commands, _positive_int, _duration_ms, _scenarios, _vcpu_counts)

    q = commands.add_parser(
        "query",
        help="run DuckDB SQL over a results directory",
        description="Run SQL over stored results: the views 'runs' (one row per cell) and 'baselines'. "
        "Schema: docs/results.md, or `vcpulab query RESULTS 'DESCRIBE runs'`.",
    )
    q.add_argument("results", metavar="RESULTS", help="results directory")
    q.add_argument(
        "sql", metavar="SQL", help='a SQL query, e.g. "SELECT workload, avg(delta_eta_t) FROM runs GROUP BY 1"'
    )
    q.add_argument("--format", choices=("table", "csv", "json"), default="table", help="output format (default: table)")
    q.add_argument(
        "--limit",
        type=_int,
        default=QUERY_LIMIT,
        metavar="N",
        help=f"print at most N rows; a longer result is cut, with a note on stderr (default: {QUERY_LIMIT})",
    )
    q.set_defaults(func=cmd_query)

    sm = commands.add_parser(
        "summary",
        help="means and 95%% confidence intervals per configuration",
        description="Per configuration (workload, variant, scenario, vCPUs, threads, k): the number of "
        "repetitions (seeds) and the mean of each metric with its confidence interval (Student t).",
    )
    sm.add_argument("results", metavar="RESULTS", help="results directory")
    sm.add_argument(
        "--metric",
        dest="metrics",
        action="extend",
        type=_names,
        metavar="NAME",
        help=f"metric column(s) (default: {', '.join(analysis.SUMMARY_METRICS)})",
    )
    sm.add_argument("--confidence", type=float, default=0.95, metavar="P", help="confidence level (default: 0.95)")
    sm.add_argument("--json", action="store_true", help="print JSON Lines")
    sm.set_defaults(func=cmd_summary)

    cat = commands.add_parser(
        "categorize",
        help="TPDS overhead categories and scalability types of stored results",
        description="Classify each (workload, variant, vCPUs) of stored results into the TPDS overhead "
        "categories (negligible, high guest, high host, high overcommit; needs UC, and OC2 for the last) "
        "and the DIS ch.4 scalability type (needs the native cell). Thresholds: docs/results.md.",
    )
    cat.add_argument("results", metavar="RESULTS", help="results directory")
    cat.add_argument(
        "--declared",
        action="store_true",
        help="compare each workload's undercommitted categories (negligible, high guest, high host; the union "
        "over its vCPU counts) with those its profile declares (kvm_overhead) and count the agreements",
    )
    defaults = analysis.Thresholds()
    for name, help_text in (
        ("negligible", "δη_t below this in UC and in every stored OC and OC2 cell is negligible"),
        ("guest", "guest part of UC's extra cycles above this is high guest overhead"),
        ("host", "host part of UC's extra cycles above this is high host overhead"),
        ("overcommit", "δη_t in OC or OC2 above UC's by more than this is high overcommit overhead"),
    ):
        cat.add_argument(
            f"--{name}",
            type=float,
            default=getattr(defaults, name),
            metavar="X",
            help=f"{help_text} (default: {getattr(defaults, name)})",
        )
    cat.add_argument(
        "--slice",
        type=_duration_ms,
        default=defaults.slice_ms,
        metavar="MS",
        help="time slice of the sync cut-off (default: 24)",
    )
    cat.add_argument(
        "--build",
        metavar="ID",
        help="the model build whose results to categorize (a vcpulab_version of the store, e.g. "
        f"{build_id()}), or 'all' for every build, each a configuration of its own (default: this "
        "simulator's build where the store holds results of several builds and some of this one, "
        "else every build)",
    )
    cat.add_argument("--json", action="store_true", help="print JSON Lines")
    cat.set_defaults(func=cmd_categorize)

    rp = commands.add_parser(
        "report",
        help="write an HTML report of a results directory (figures, tables, methods)",
        description="Write one self-contained HTML file (inline SVG figures, no network needed) with whatever the "
        "results contain: overhead distributions, per-workload overheads with their guest/host split, host time by "
        "exit reason, cycles per vCPU, TLB-shootdown latency, PLE window, speedup curves, categories, summary and "
        "methods; every table and the data behind every figure as CSV in the folder <FILE stem>_csv/ beside it. "
        "See docs/report.md.",
    )
    rp.add_argument("results", metavar="RESULTS", help="results directory")
    rp.add_argument("-o", "--out", metavar="FILE", help="the HTML file to write (default: RESULTS/report.html)")
    rp.add_argument("--title", metavar="TEXT", help="the report's title (default: vcpulab report: <results folder>)")
    rp.add_argument(
        "--diagnose",
        action="append",
        default=[],
        metavar="FILTER",
        help="add a diagnosis section for the stored UC/OC/OC2 cells matching FILTER (as for run --only, e.g. "
        "'workload=parsec.dedup,scenario=OC,vcpus=16,seed=1'); repeatable; re-runs them and their mitigations",
    )
    rp.set_defaults(func=cmd_report)

    rep = commands.add_parser(
        "reproduce",
        help="run the published experiments and score them against their published values",
        description="Run the reproduction suite (experiments/published/<ID>.toml: every published experiment, "
        "or the IDs given) through the results store, and print a scoreboard: per published value the simulated "
        "mean and 95 % CI over seeds and a verdict (reproduced, partly, not reproduced, no published value, not "
        "expressible). Writes an HTML scoreboard too. Exit 0 whatever the verdicts. See docs/reproduce.md.",
    )
    rep.add_argument("ids", nargs="*", metavar="ID", help="experiment ids to run (case-insensitive; default: all)")
    rep.add_argument("--list", action="store_true", help="list every id with its status and kind; run nothing")
    rep.add_argument(
        "--quick",
        action="store_true",
        help="apply each spec's [reproduce] quick overrides (reduced sizes, for CI: structure and determinism; "
        "the verdicts are not meaningful)",
    )
    rep.add_argument(
        "--suite", metavar="DIR", help=f"the suite directory (default: {os.path.join('experiments', 'published')})"
    )
    rep.add_argument(
        "--results",
        metavar="DIR",
        help="the one results directory of the whole suite (default: results/reproduce, results/reproduce-quick "
        "with --quick; under $VCPULAB_RESULTS when set); cells already stored there are not run again",
    )
    rep.add_argument("-j", "--jobs", type=_jobs, metavar="N", help="local worker processes (default: all cores)")
    rep.add_argument("--cluster", metavar="ADDRESS", help="run on a Dask scheduler, e.g. tcp://HOST:8786")
    rep.add_argument("--json", action="store_true", help="print the scoreboard as one JSON document")
    rep.add_argument("--html", metavar="FILE", help="the HTML scoreboard to write (default: RESULTS/scoreboard.html)")
    rep.add_argument("--markdown", metavar="FILE", help="also write the full scoreboard as Markdown to FILE")
    rep.add_argument(
        "--no-traces",
        action="store_true",
        help="skip the trace runs (by default an experiment whose PARSEC/SPLASH-2x workloads were all traced at its "
        "thread counts runs a second time with traced.<suite>.<program> in their place: the trace columns)",
    )
    rep.add_argument(
        "--calibrated",
        action="append",
        default=[],
        metavar="FILE",
        help="a calibrated preset (vcpulab calibrate's output); its values apply to every experiment on its "
        "testbed; repeatable, one per testbed",
    )
    rep.set_defaults(func=cmd_reproduce)
    calibration_commands.add_commands(commands, _jobs, _seeds, _positive_int)

    pol = commands.add_parser(
        "policies",
        help="list the pluggable policies",
        description="List every policy implementation a spec can select, with the field that selects it.",
    )
    pol.add_argument("--json", action="store_true", help="print JSON Lines")
    pol.set_defaults(func=cmd_policies)

    b = commands.add_parser("bench", help="measure simulator speed on a fixed model workload")
    b.add_argument("--seconds", type=_seconds, default=3.0, metavar="S", help="wall time to run for (default: 3)")
    b.add_argument("--json", action="store_true", help="print the measurement as JSON")
    b.set_defaults(func=cmd_bench)
    return parser


# --- commands -------------------------------------------------------------------------------


def _list_and_show(
    commands: Any, name: str, help: str, description: str, list_func: Any, show_help: str, show_func: Any
) -> Any:
    """A command that lists a catalogue (`--json`: JSON Lines) and has `show NAME` for one item."""
    listing = commands.add_parser(name, help=help, description=description)
    listing.add_argument("--json", action="store_true", help="print JSON Lines")
    listing.set_defaults(func=list_func)
    sub = listing.add_subparsers(dest=f"{name}_command", metavar="COMMAND", parser_class=_Parser)
    show = sub.add_parser("show", help=show_help)
    show.add_argument("name", metavar="NAME")
    if name == "workloads":
        show.add_argument("--json", action="store_true", help="print it as one JSON document")
    show.set_defaults(func=show_func)
    return sub


def make_plan(args: argparse.Namespace) -> Plan:
    return make_payload(args)[0]


def make_payload(args: argparse.Namespace) -> tuple[Plan, SpecPayload]:
    """The validated plan of the flags and spec, and what rebuilds it in another process."""
    selection = Selection(
        workloads=args.workloads, scenarios=args.scenarios, vcpus=args.vcpus, seeds=args.seeds, threads=args.threads
    )
    if args.spec is not None:
        loaded = _read_spec(args.spec)
        overrides = selection.overrides() + args.sets
    elif args.workloads:
        loaded, overrides = selection.spec(), list(args.sets)
    else:
        raise CliError(f"{args.command} needs a SPEC file or --workload NAME")
    try:
        plan = Plan(loaded.text, loaded.source, overrides)
    except SpecError as e:
        raise SpecError(_name_the_flag(str(e), selection, loaded.source, args.sets)) from None
    return plan, SpecPayload(loaded.text, loaded.source, tuple(overrides))


_FLAGS = {
    "workloads": "--workload",
    "scenarios": "--scenario",
    "vcpus": "--vcpus",
    "seeds": "--seed",
    "threads": "--threads",
}


def _name_the_flag(message: str, selection: Selection, source: str, sets: Sequence[str]) -> str:
    """A spec error about a field an experiment flag set (and so replaced), told against the
    flag rather than the override or spec the flags became: ``--vcpus: experiment.vcpus[0]: ...``
    (unless a --set, applied after the flags, sets that field again)."""
    set_paths = [s.partition("=")[0].strip() for s in sets]
    for key, override in zip(selection.fields(), selection.overrides(), strict=True):
        if any(re.match(rf"experiment\.{key}\b", path) for path in set_paths):
            continue
        flag = _FLAGS[key]
        for prefix in (f"--set {override}: ", f"{source}: "):
            rest = message.removeprefix(prefix)
            if rest != message and re.match(rf"experiment\.{key}\b", rest):
                return f"{flag}: {rest}"
    return message


def _read_spec(path: str) -> SpecSource:
    # Errors name the file as it prints (a byte that is not UTF-8 as \xNN): the simulator takes text.
    return SpecSource(read_text_input(path, "spec file"), printable(path))


def read_text_input(path: str, what: str) -> str:
    """:func:`vcpulab.spec.read_text_input`, its error as a one-line CLI error."""
    try:
        return spec_read_text_input(path, what)
    except InputFileError as e:
        raise CliError(str(e)) from None
    except OSError as e:
        raise CliError(f"cannot read {what} '{path}': {e.strerror or e}") from None


def cmd_run(args: argparse.Namespace) -> int:
    plan, payload = make_payload(args)
    info = report.parse_info(plan.info())
    _check_baseline(info)
    scale_info = _scaling_settings(plan, info)
    cdf_out = _cdf_out(args.cdf_out, info)
    _check_window_out(args.window_out)
    _check_scaling_out(args.scaling_out)
    if args.jobs is not None and args.cluster:
        raise CliError("--jobs and --cluster exclude each other (the cluster's workers run the cells)")
    cells = plan.cells()
    try:
        selected = select_cells(cells, parse_only(args.only))
    except OnlyError as e:
        raise CliError(str(e)) from None
    if not selected:
        raise CliError(f"--only {' '.join(args.only)}: no cell of the experiment matches (see `vcpulab validate`)")
    if args.out is not None:
        _check_writable(args.out, option="--out")
    if args.timeline is not None or args.timeline_window is not None or args.timeline_max_events is not None:
        return _run_with_timeline(args, plan, info, scale_info, cdf_out, cells, selected)
    results_dir = _results_dir(args)
    spec_text = plan.spec_toml()
    if (apicv := apicv_note(spec_text)) is not None:
        sys.stderr.write(f"vcpulab: note: {apicv}\n")
    for note in unreplayable_notes(str(cells[i]["workload"]) for i in selected):
        sys.stderr.write(f"vcpulab: note: {note}\n")
    spec_hash = hashlib.sha256(spec_text.encode()).hexdigest()[:16]
    payload = SpecPayload(payload.text, payload.source, payload.overrides, spec_hash)
    if args.repair and results_dir is None:
        raise CliError("--repair repairs a results directory: drop --no-store (or give --results DIR)")
    store = ResultsStore(results_dir) if results_dir is not None else None
    emit = _InOrder(selected, sys.stdout if args.json else None)
    # Workers are started first, before DuckDB and the progress bar start threads here.
    executor = make_executor(args.jobs, args.cluster)
    try:
        return _sweep_and_show(
            args, plan, payload, info, scale_info, cdf_out, cells, selected, results_dir, store, emit, executor
        )
    finally:
        executor.close(cancel=True)  # a no-op after the sweep closed it


@contextmanager
def sweep_failures(results_dir: str | None) -> Iterator[None]:
    """A failed simulation or an interruption of a sweep as a one-line error (exit 3, or the
    signal's code), saying where the finished cells are kept when they are stored
    (``results_dir``) and that running the same command again continues."""
    try:
        yield
    except CellFailed as e:
        kept = f"; {e.stored} finished cells are stored in {results_dir} (run again to continue)" if results_dir else ""
        raise CliError(f"{e}{kept}", EXIT_SIMULATION) from None
    except KeyboardInterrupt as e:
        kept = (
            f" (finished cells are stored in {printable(results_dir)}; run the same command again to continue)"
            if results_dir
            else ""
        )
        message, code = _interrupted(e)
        raise CliError(f"{message}{kept}", code) from None


def _sweep_and_show(
    args: argparse.Namespace,
    plan: Plan,
    payload: SpecPayload,
    info: report.PlanInfo,
    scale_info: scaling.Settings,
    cdf_out: Path | None,
    cells: Sequence[Mapping[str, Any]],
    selected: list[int],
    results_dir: str | None,
    store: ResultsStore | None,
    emit: _InOrder,
    executor: Any,
) -> int:
    spec_text = plan.spec_toml()
    spec_hash = payload.spec_hash
    with store.writer(repair=args.repair) if store is not None else nullcontext() as writer:
        if store is not None and store.repaired:
            sys.stderr.write(_repaired_note(store))
        sweep = plan_stored(plan, selected, store)
        if writer is not None:
            writer.save_spec(spec_hash, spec_text)
        for i, row in stored_rows(store, sweep).items():
            emit.add(i, row)
        units = sweep_units(sweep)
        if not sweep.tasks:
            executor.close(cancel=False)
            executor = InlineExecutor()
        interactive = sys.stderr.isatty()
        if sweep.stored and interactive:
            stored_in = f"{len(sweep.stored)} of {len(selected)} cells already stored in {printable(results_dir)}"
            sys.stderr.write(f"vcpulab: {stored_in}\n")

        def on_result(i: int, row: dict[str, Any]) -> None:
            emit.add(i, row)
            done(render.cell_label(cells[i]))

        with sweep_failures(results_dir if writer is not None else None):
            with render.sweep_progress(units, interactive, executor.workers) as done:
                report_ = run_sweep(
                    plan,
                    payload,
                    sweep,
                    executor,
                    writer,
                    on_result=on_result,
                    on_baseline=lambda t: done(f"baseline of {render.cell_label(cells[t.cells[0]])}"),
                )
        if writer is not None and store is not None and report_.ran:
            with store.reading():  # compaction reads every part in full: name a damaged one
                writer.compact(above=COMPACT_ABOVE)
    rows = [emit.rows[i] for i in selected]
    many = (
        len(rows) > render.MANY_CELLS
        and not args.json
        and args.out is None
        and not info.published
        and cdf_out is None
        and info.baseline is None
        and not info.ple
        and args.window_out is None
        and not scale_info.scalability
        and scale_info.spread is None
        and args.scaling_out is None
    )
    # Large sweeps show an overview made from the rows' columns; everything else needs the
    # result objects back.
    ordered = [] if many else [result_from_row(r) for r in rows]
    overview = rows if len(rows) > render.MANY_CELLS else None
    console = _report(args, info, scale_info, spec_text, ordered, cdf_out, overview)
    if console is not None and results_dir is not None:
        ran, kept_n = report_.ran, len(sweep.stored)
        console.print(
            f"results: {printable(results_dir)} ({ran} cells run, {kept_n} already stored); "
            f"query with `vcpulab summary {printable(results_dir)}` or "
            f"`vcpulab query {printable(results_dir)} SQL`",
            style="dim",
            highlight=False,
        )
    return 0


def _report(
    args: argparse.Namespace,
    info: report.PlanInfo,
    scale_info: scaling.Settings,
    spec_text: str,
    ordered: list[dict[str, Any]],
    cdf_out: Path | None,
    overview: list[dict[str, Any]] | None,
) -> Console | None:
    """Writes ``--out``, ``--cdf-out``, ``--window-out`` and ``--scaling-out`` and, without
    ``--json``, prints the results table (or the overview of ``overview``'s stored rows for a
    large sweep), the published, CDF, PLE, scalability, spread and asymmetric-vCPU tables;
    returns the console for more footer lines (None with ``--json``)."""
    if args.out is not None:
        with AtomicWriter(args.out, option="--out") as out:
            for r in ordered:
                out.write(json_text(r) + "\n")
    written = _write_cdf(cdf_out, ordered) if cdf_out is not None else []
    if args.window_out is not None:
        written += _write_window(Path(args.window_out), ordered)
    if args.scaling_out is not None:
        written += _write_scaling(Path(args.scaling_out), ordered)
    if args.json:
        return None
    console = render.stdout_console()
    if overview is not None:
        console.print(render.overview_table(overview))
        console.print(
            f"{len(overview)} cells: per-cell figures with --json, or from the results directory "
            "(vcpulab summary / query)",
            style="dim",
            highlight=False,
        )
    else:
        console.print(render.results_table(ordered, info.columns))
        console.print(render.legend(ordered))
    if info.published:
        settings = tomllib.loads(spec_text)
        console.print()
        console.print(render.published_table(report.compare_published(info.published, ordered, settings)))
    if info.cdf == "tlb_latency":
        console.print()
        console.print(render.cdf_table(ordered, [report.cdf_summary(r) for r in ordered]))
    _print_ple(console, info, ordered)
    _print_scaling(console, scale_info, info.baseline, ordered)
    if memory.console_wanted(ordered or overview or []):
        console.print()
        console.print(render.memory_table(memory.console_rows(ordered or overview or [])))
    if written:
        console.print(f"wrote {', '.join(written)}", style="dim", highlight=False)  # escaped by the console
    return console


def _run_with_timeline(
    args: argparse.Namespace,
    plan: Plan,
    info: report.PlanInfo,
    scale_info: scaling.Settings,
    cdf_out: Path | None,
    cells: Sequence[Mapping[str, Any]],
    selected: list[int],
) -> int:
    """``run --timeline``: the one selected cell, run here (not stored) with a timeline of
    its own simulation; the same output as a normal run, and the timeline file."""
    if args.timeline is None:
        raise CliError("--timeline-window and --timeline-max-events need --timeline FILE")
    if len(selected) != 1:
        example = ",".join(f"{k}={cells[selected[0]][k]}" for k in ("workload", "scenario", "vcpus", "seed"))
        raise CliError(
            f"--timeline records one cell; this run selects {len(selected)} "
            f"(choose one with --only, e.g. --only '{example}')"
        )
    if args.cluster:
        raise CliError("--timeline runs its cell in this process: drop --cluster")
    if args.results:
        raise CliError("--timeline runs its cell without storing it: drop --results")
    _check_writable(args.timeline, option="--timeline")
    from_ns, to_ns = args.timeline_window or (0, TIMELINE_WINDOW_NS)
    max_events = args.timeline_max_events or TIMELINE_MAX_EVENTS
    i = selected[0]
    try:
        with render.sweep_progress(1, sys.stderr.isatty(), 1) as done:
            result_json, trace, events, truncated_at = plan.run_cell_with_timeline(i, from_ns, to_ns, max_events)
            done(render.cell_label(cells[i]))
    except KeyboardInterrupt as e:
        raise CliError(*_interrupted(e)) from None
    except SimulationError as e:
        # A run limit or a deadlock: what led to it is in the timeline recorded so far.
        partial = getattr(e, "timeline", None)
        if partial is not None:
            write_bytes_atomic(args.timeline, partial)
            n = int(getattr(e, "timeline_events", 0))
            sys.stderr.write(
                f"vcpulab: wrote timeline {printable(args.timeline)} up to the failure below "
                f"({n:,} events; open in https://ui.perfetto.dev)\n"
            )
        raise
    write_bytes_atomic(args.timeline, trace)
    # The same object (key order included) a stored result gives back.
    raw = json.loads(result_json)
    rest = {k: v for k, v in raw.items() if k != "run"}
    result = result_from_row(
        {"result_json": json.dumps(rest, sort_keys=True), "run_json": json.dumps(raw["run"], sort_keys=True)}
    )
    if args.json:
        sys.stdout.write(json_text(result) + "\n")
    _report(args, info, scale_info, plan.spec_toml(), [result], cdf_out, None)
    sys.stdout.flush()
    cut = (
        f", cut at {truncated_at / 1e6:g} ms of virtual time by --timeline-max-events"
        if truncated_at is not None
        else ""
    )
    if events == 0:
        cut = f": the run ended at {float(result['duration_s']) * 1e3:g} ms, before the window starts"
    sys.stderr.write(
        f"vcpulab: wrote timeline {printable(args.timeline)} ({events:,} events{cut}; open in https://ui.perfetto.dev)\n"
    )
    return 0


class _InOrder:
    """Collects stored rows arriving in any order; with a stream, prints each cell's result
    object as JSON as soon as every cell before it (in the plan's order) has been printed."""

    def __init__(self, order: Sequence[int], stream: TextIO | None) -> None:
        self.order = list(order)
        self.stream = stream
        self.rows: dict[int, dict[str, Any]] = {}
        self._next = 0

    def add(self, i: int, row: dict[str, Any]) -> None:
        self.rows[i] = row
        while self._next < len(self.order) and self.order[self._next] in self.rows:
            if self.stream is not None:
                result = result_from_row(self.rows[self.order[self._next]])
                self.stream.write(json_text(result) + "\n")
                self.stream.flush()
            self._next += 1


def _results_dir(args: argparse.Namespace) -> str | None:
    """Where results go: --results, else results/<spec stem> for a spec file, else nowhere."""
    if args.no_store:
        if args.results:
            raise CliError("--results and --no-store exclude each other")
        return None
    if args.results:
        return str(args.results)
    if args.spec is not None:
        return os.path.join(os.environ.get("VCPULAB_RESULTS") or "results", Path(args.spec).stem)
    return None


def _open_store(path: str) -> ResultsStore:
    try:
        store = ResultsStore.open_existing(path)
        store.check()
    except StoreError as e:
        raise CliError(str(e)) from None
    return store


def _repaired_note(store: ResultsStore) -> str:
    """The line ``run --repair`` prints after setting damaged parts aside."""
    names = ", ".join(d.file for d in store.repaired)
    return (
        f"vcpulab: repaired {printable(store.root)}: set {len(store.repaired)} damaged part(s) aside in "
        f"{printable(store.root / 'damaged')}/ ({names}; see NOTES.txt there); the spec's cells among their rows "
        "run again\n"
    )


# Statements `vcpulab query` runs: reading only (SELECT, and DESCRIBE / SHOW / SUMMARIZE, which
# DuckDB parses as SELECT; EXPLAIN).
_QUERY_STATEMENTS = ("SELECT", "EXPLAIN")


def _check_query(sql: str) -> None:
    """One read-only statement, or a one-line error saying what is wrong."""
    import duckdb

    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as e:
        raise CliError(f"query failed: {e}") from None
    if not statements:
        raise CliError('query: the SQL is empty (give one SELECT statement, e.g. "SELECT count(*) FROM runs")')
    if len(statements) > 1:
        raise CliError(f"query: give one SQL statement (got {len(statements)})")
    kind = statements[0].type.name
    if kind == "EXPLAIN":
        # EXPLAIN ANALYZE runs the statement it explains: that one must be a SELECT too.
        inner = re.match(r"\s*EXPLAIN\s+(?:ANALY[SZ]E\s+|\([^)]*\)\s*)?(.*)", sql, re.S | re.I)
        inner_kinds = [st.type.name for st in duckdb.extract_statements(inner.group(1))] if inner else []
        if inner_kinds != ["SELECT"]:
            raise CliError("query: EXPLAIN is allowed only of a SELECT statement: the results directory is read-only")
    elif kind not in _QUERY_STATEMENTS:
        raise CliError(
            f"query: only reading statements are allowed (SELECT, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN), not {kind}: "
            "the results directory is read-only to queries"
        )


def _query_rows(con: Any, sql: str, limit: int) -> tuple[list[str], list[tuple[Any, ...]], bool]:
    """The columns and at most ``limit`` rows of ``sql``, and whether there were more. Rows are
    streamed as Arrow batches, so a huge result is never materialised (Arrow also converts
    time-zone-aware timestamps without pytz)."""
    reader = con.sql(sql).to_arrow_reader(min(limit + 1, 2048))
    columns = list(reader.schema.names)
    rows: list[tuple[Any, ...]] = []
    for batch in reader:
        rows.extend(zip(*(c.to_pylist() for c in batch.columns), strict=True))
        if len(rows) > limit:
            break
    return columns, rows[:limit], len(rows) > limit


def cmd_query(args: argparse.Namespace) -> int:
    import duckdb
    import pyarrow

    if args.limit < 1:
        raise CliError(f"--limit must be at least 1 (got {args.limit})")
    _check_query(args.sql)
    store = _open_store(args.results)
    try:
        with store.reading():
            con = store.query_connection()
            columns, rows, cut = _query_rows(con, args.sql, args.limit)
    except duckdb.OutOfMemoryException as e:
        first = str(e).splitlines()[0]
        raise CliError(f"query failed: it needs more than the {QUERY_MEMORY_LIMIT} memory limit ({first})") from None
    except duckdb.Error as e:
        raise CliError(f"query failed: {e}") from None
    except (OSError, pyarrow.ArrowException) as e:  # an error while streaming arrives through Arrow
        raise CliError(f"query failed: {e}") from None
    if args.format == "json":
        for row in rows:
            print(json_text(dict(zip(columns, row, strict=True)), default=str))
    elif args.format == "csv":
        import csv

        w = csv.writer(sys.stdout)
        w.writerow(columns)
        w.writerows(rows)
    else:
        render.stdout_console().print(render.query_table(columns, rows))
    if cut:
        sys.stdout.flush()
        sys.stderr.write(f"vcpulab: output cut: showed the first {len(rows)} rows (--limit N to change)\n")
    return 0


def cmd_summary(args: argparse.Namespace) -> int:
    if not 0 < args.confidence < 1:
        raise CliError(f"--confidence must be between 0 and 1 (got {args.confidence})")
    metrics = args.metrics or list(analysis.SUMMARY_METRICS)
    store = _open_store(args.results)
    try:
        with store.reading():
            rows = analysis.summary(store, metrics, args.confidence)
    except KeyError as e:
        raise CliError(str(e.args[0])) from None
    if args.json:
        for row in rows:
            print(json_text(row))
        return 0
    render.stdout_console().print(render.summary_table(rows, metrics, args.confidence))
    _print_legend(store, rows)
    return 0


def _print_legend(store: ResultsStore, rows: Sequence[Mapping[str, Any]]) -> None:
    """Under a table with a config column: what each configuration label stands for."""
    if any(r.get("config") for r in rows):
        with store.reading():
            for line in analysis.config_legend(store, rows):
                print(printable(line))


def cmd_categorize(args: argparse.Namespace) -> int:
    th = analysis.Thresholds(
        negligible=args.negligible, guest=args.guest, host=args.host, overcommit=args.overcommit, slice_ms=args.slice
    )
    store = _open_store(args.results)
    with store.reading():
        build = _categorize_build(args.results, args.build, analysis.stored_builds(store))
        rows = analysis.categorize(store, th, build)
    if args.declared:
        from ._vcpulab import workloads

        declared = {w["name"]: w["kvm_overhead"] for w in workloads()}
        rows = analysis.agreement(rows, declared)
        if not rows:
            raise CliError(
                f"{args.results}: no UC results of a workload whose profile declares TPDS categories (kvm_overhead)"
            )
    if args.json:
        for row in rows:
            print(json_text(row))
        return 0
    if not args.declared:
        render.stdout_console().print(render.categories_table(rows))
        _print_legend(store, rows)
        return 0
    render.stdout_console().print(render.agreement_table(rows))
    totals: dict[tuple[str, str], list[bool]] = {}
    for r in rows:
        totals.setdefault((r["variant"], r["config"]), []).append(r["agree"])
    # The configurations with the most workloads (a sweep's matrix) first.
    for (variant, config), agree in sorted(totals.items(), key=lambda t: (-len(t[1]), t[0])):
        where = ", ".join(x for x in (variant and f"variant {variant}", config and f"config {config}") if x)
        print(f"agree on {sum(agree)} of {len(agree)} workloads" + (f" ({where})" if where else ""))
    _print_legend(store, rows)
    return 0


def _categorize_build(results: str, wanted: str | None, builds: Mapping[str, int]) -> str | None:
    """The build ``categorize`` reads (None: every build). A store that collected the results
    of several model builds (``vcpulab reproduce`` after a model change) would otherwise list
    each build as a configuration of its own; by default the current build's are shown, and a
    note on stderr says so."""
    if wanted == "all":
        return None
    if wanted is not None:
        if wanted not in builds:
            have = ", ".join(builds) or "none"
            raise CliError(f"--build {wanted}: {results} holds no results of that build (builds stored: {have})")
        return wanted
    if len(builds) < 2:
        return None
    current = build_id()
    pick = current if current in builds else None
    if pick is None:
        what = f", none of this one ({current}): each build is a configuration of its own (--build ID to pick one)"
    else:
        what = (
            f"; categorizing this build's ({current}, {builds[current]} cells) only "
            "(--build all for every build, --build ID for another)"
        )
    print(f"vcpulab: note: {printable(results)} holds the results of {len(builds)} model builds{what}", file=sys.stderr)
    return pick


def cmd_report(args: argparse.Namespace) -> int:
    import shlex

    out = Path(args.out) if args.out else Path(args.results) / "report.html"
    try:
        store = report.open_store(args.results)
        store.check()
        report.build.check_output(out)
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            missing = "vcpulab report draws with matplotlib, which is not installed (pip install matplotlib)"
            raise CliError(missing) from None
        command = shlex.join(["vcpulab", *getattr(args, "argv", ["report", args.results])])
        try:
            filters = [parse_only([f]) for f in args.diagnose]
        except OnlyError as e:
            raise CliError(str(e).replace("--only", "--diagnose")) from None
        with report.build.progress_bar(sys.stderr.isatty()) as step, store.reading():
            extra = []
            if filters:
                from .report import diagnosis

                step("diagnosing")
                extra.append(diagnosis.section(diagnosis.diagnose_stored(store, filters, on_step=step)))
            built = report.build_report(store, title=args.title, command=command, progress=step, extra_sections=extra)
        written = report.write_report(built, out)
    except report.ReportError as e:
        raise CliError(str(e)) from None
    csvs = written[1:]
    print(f"wrote {printable(written[0])}")
    if csvs:
        print(f"wrote {printable(csvs[0].parent)}/ ({len(csvs)} CSV files: {', '.join(p.name for p in csvs)})")
    return 0


def cmd_reproduce(args: argparse.Namespace) -> int:
    import datetime
    import shlex

    from . import reproduce
    from .reproduce import page, run, scoreboard, traces

    try:
        suite = reproduce.load_suite(args.suite or reproduce.default_suite())
        chosen = suite.select(args.ids)
        if args.list:
            if args.json:
                print(json_text([scoreboard.id_json(e) for e in chosen]))
            else:
                render.stdout_console().print(scoreboard.list_table(chosen))
            return 0
        calibrated = _calibrated_overlays(args.calibrated)
        profiles = [
            run.prepare(e, args.quick, calibrated.get(e.platform.casefold(), ())) for e in chosen if e.runnable
        ]
        from .calibration import fit

        sets = fit.load_sets(fit.calibration_path(suite.root))
        calibration_rows = frozenset(r for s in sets.values() for r in s.rows)
    except (reproduce.SuiteError, CalibrationError) as e:
        raise CliError(str(e)) from None
    no_trace: dict[str, str] | None = None
    prepared = profiles
    if not args.no_traces:
        traced, no_trace = traces.prepare_all_traced(profiles, args.quick)
        by_id = {t.experiment.id: t for t in traced}
        # Each experiment's trace run right after its profile run.
        prepared = [q for p in profiles for q in (p, by_id.get(p.experiment.id)) if q is not None]
    if args.jobs is not None and args.cluster:
        raise CliError("--jobs and --cluster exclude each other (the cluster's workers run the cells)")
    results_dir = args.results or os.path.join(
        os.environ.get("VCPULAB_RESULTS") or "results", "reproduce-quick" if args.quick else "reproduce"
    )
    html_out = args.html or os.path.join(results_dir, "scoreboard.html")
    for path, option in ((args.html, "--html"), (args.markdown, "--markdown")):
        if path is not None:
            _check_writable(path, option=option)
    if args.quick:
        sys.stderr.write(f"vcpulab: {scoreboard.QUICK_NOTE}\n")
    # Workers are started first, before DuckDB and the progress bar start threads here.
    executor = make_executor(args.jobs, args.cluster)
    try:
        with sweep_failures(results_dir):
            done = run.run_suite(
                prepared,
                ResultsStore(results_dir),
                executor,
                progress=sys.stderr.isatty(),
                reopen=lambda: make_executor(args.jobs, args.cluster),
            )
    finally:
        executor.close(cancel=True)  # a no-op after the suite closed it
    board = scoreboard.build(done.experiments, chosen, args.quick, no_trace, calibration_rows)
    command = shlex.join(["vcpulab", *getattr(args, "argv", ["reproduce"])])
    date = datetime.date.today().isoformat()
    if args.html is None:
        Path(html_out).parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(html_out, page.render(board, command, date).encode("utf-8"))
    if args.markdown is not None:
        with AtomicWriter(args.markdown, option="--markdown") as out:
            out.write(scoreboard.markdown(board, command, date))
    if args.json:
        print(json_text(board.to_json()))
    else:
        console = render.stdout_console()
        console.print(scoreboard.rich_table(board))
        for line in scoreboard.not_expressible_lines(board):
            console.print(line, style="dim", highlight=False, markup=False)
        for line in board.trace_lines():
            console.print(line, style="dim", highlight=False, markup=False)
        console.print(board.total_line(), style="bold", highlight=False, markup=False)
        console.print(board.trace_line(), style="bold", highlight=False, markup=False)
    written = [html_out] + ([args.markdown] if args.markdown else [])
    sys.stderr.write(
        f"vcpulab: {done.ran} cells run, {done.stored} already stored in {printable(results_dir)}; "
        f"wrote {printable(', '.join(written))}\n"
    )
    return 0


def _calibrated_overlays(paths: Sequence[str]) -> dict[str, list[str]]:
    """``--calibrated FILE``: per preset (folded), the ``--set`` overrides of its calibrated
    values; two files for one preset are an error."""
    from .calibration import fit

    out: dict[str, list[str]] = {}
    for path in paths:
        preset, overrides = fit.overlay_overrides(Path(path))
        if preset.casefold() in out:
            raise CalibrationError(f"--calibrated {path}: a second calibrated preset for {preset}")
        out[preset.casefold()] = overrides
    return out


def _cdf_out(path: str | None, info: report.PlanInfo) -> Path | None:
    """Check ``--cdf-out`` before running anything."""
    if path is None:
        return None
    if info.cdf != "tlb_latency":
        raise CliError('--cdf-out needs [report] cdf = "tlb_latency" and [record] tlb_samples = true in the spec')
    if report.cdf_png_path(path) == Path(path):
        raise CliError(f"--cdf-out '{path}': name the CSV file (the plot is written beside it with suffix .png)")
    _check_writable(path)
    if os.path.isdir(report.cdf_png_path(path)):
        raise CliError(f"cannot write '{report.cdf_png_path(path)}': is a directory")
    return Path(path)


def _check_baseline(info: report.PlanInfo) -> None:
    """``[report] baseline`` must name a variant of the experiment, by its whole label or, with
    ``experiment.vary``, by the name of a named variant (checked before running)."""
    if info.baseline is None or scaling.names_variant(info.variants, info.baseline):
        return
    baseline = json.dumps(info.baseline, ensure_ascii=False)
    named = scaling.variant_names(info.variants) or [v for v in info.variants if v]
    if not named:
        raise CliError(
            f"report.baseline = {baseline}: the experiment has no variants to compare "
            f"(declare them with [[experiment.variants]], one named {baseline})"
        )
    known = ", ".join(json.dumps(v, ensure_ascii=False) for v in named)
    raise CliError(f"report.baseline = {baseline} is not a variant of the experiment (variants: {known})")


def _print_ple(console: Console, info: report.PlanInfo, results: Sequence[Mapping[str, Any]]) -> None:
    """The tables of ``[report] baseline`` (performance relative to it) and ``[report] ple``
    (PLE inefficiency, spinlock-intensive classification)."""
    if info.baseline is not None:
        console.print()
        if any(scaling.is_baseline(r.get("variant"), info.baseline) and r["scenario"] != "native" for r in results):
            matrix = ple.performance_matrix(results, info.baseline, info.variants)
            console.print(render.performance_table(matrix, info.baseline))
        else:
            console.print(
                f"performance relative to {info.baseline}: no VM cell of variant {info.baseline} was run (see --only)",
                style="dim",
                highlight=False,
                markup=False,
            )
    if info.ple:
        console.print()
        console.print(render.inefficiency_table(ple.inefficiency_matrix(results, info.variants)))
        classes = ple.classify(results)
        console.print()
        if classes:
            console.print(render.classification_table(classes))
        else:
            console.print(
                "no cell with a fixed 512-cycle window: add a variant with "
                'vm.ple.window_policy = "fixed" and vm.ple.window_cycles = 512 to classify workloads',
                style="dim",
                highlight=False,
                markup=False,
            )


def _scaling_settings(plan: Plan, info: report.PlanInfo) -> scaling.Settings:
    """``[report] scalability`` and ``spread``; ``spread`` must be a key of ``experiment.vary``
    (checked before running, like the baseline)."""
    settings = scaling.parse_settings(plan.info())
    _check_spread(settings.spread, info.variants)
    return settings


def _check_spread(key: str | None, variants: Sequence[str]) -> None:
    """``[report] spread`` must be a key in the variant labels, i.e. of ``experiment.vary``."""
    keys = scaling.variant_keys(variants)
    if key is None or key in keys:
        return
    shown = json.dumps(key, ensure_ascii=False)
    if not keys:
        raise CliError(
            f"report.spread = {shown}: the experiment varies no key "
            f"(declare its values with experiment.vary = {{ {shown} = [...] }})"
        )
    known = ", ".join(json.dumps(k, ensure_ascii=False) for k in keys)
    raise CliError(f"report.spread = {shown} is not a key of experiment.vary (variant keys: {known})")


def _print_scaling(
    console: Console, settings: scaling.Settings, baseline: str | None, results: Sequence[Mapping[str, Any]]
) -> None:
    """The tables of ``[report] scalability`` (speedup curves, efficiency decomposition) and
    ``[report] spread``, and, when a run recorded ``run.asymmetric``, the asymmetric-vCPU table."""

    def note(text: str) -> None:
        console.print(text, style="dim", highlight=False, markup=False)

    if settings.scalability:
        console.print()
        console.print(render.speedup_table(scaling.speedup_curves(results)))
        console.print()
        console.print(render.efficiency_table(scaling.efficiency(results)))
    if settings.spread is not None:
        console.print()
        spreads = scaling.spread(results, settings.spread, baseline)
        if spreads:
            console.print(render.spread_table(spreads, settings.spread, baseline))
        else:
            note(f"performance spread over {settings.spread}: no cell of a variant with it was run (see --only)")
    if scaling.has_asymmetric(results):
        console.print()
        console.print(render.asymmetric_table(scaling.asymmetric(results)))


def _check_scaling_out(path: str | None) -> None:
    """Check ``--scaling-out`` before running anything."""
    if path is None:
        return
    if Path(path).suffix.lower() != ".png":
        raise CliError(
            f"--scaling-out '{path}': name the PNG file (FILE.png; the CSV is written beside it as FILE.csv)"
        )
    _check_writable(path, option="--scaling-out")
    if os.path.isdir(scaling.speedup_csv_path(path)):
        raise CliError(f"--scaling-out: cannot write '{scaling.speedup_csv_path(path)}': is a directory")


def _write_scaling(path: Path, results: Sequence[Mapping[str, Any]]) -> list[str]:
    """Write the speedup plot and its CSV; returns the files written (none, with a note, when no
    workload ran at two vCPU counts)."""
    curves = scaling.speedup_curves(results)
    csv_path = scaling.speedup_csv_path(path)
    if not scaling.has_curve(curves):
        sys.stderr.write(
            "vcpulab: note: no speedup curve: no workload ran at two vCPU counts or more "
            f"(set experiment.vcpus); did not write '{path}'\n"
        )
        return []
    png = scaling.speedup_png(curves)
    write_csv_atomic(csv_path, scaling.SPEEDUP_CSV_COLUMNS, scaling.speedup_csv_rows(curves))
    if png is None:
        missing = f"vcpulab: note: matplotlib is not installed; skipped the plot '{path}' (pip install matplotlib)"
        sys.stderr.write(missing + "\n")
        return [str(csv_path)]
    write_bytes_atomic(path, png)
    return [str(path), str(csv_path)]


def _check_window_out(path: str | None) -> None:
    """Check ``--window-out`` before running anything."""
    if path is None:
        return
    if Path(path).suffix.lower() != ".png":
        raise CliError(f"--window-out '{path}': name the PNG file (FILE.png; the CSV is written beside it as FILE.csv)")
    _check_writable(path, option="--window-out")
    if os.path.isdir(ple.window_csv_path(path)):
        raise CliError(f"--window-out: cannot write '{ple.window_csv_path(path)}': is a directory")


def _write_window(path: Path, results: Sequence[Mapping[str, Any]]) -> list[str]:
    """Write the PLE window plot and its CSV; returns the files written (none, with a note,
    when no run recorded a window series)."""
    csv_path = ple.window_csv_path(path)
    if not ple.has_window_series(results):
        sys.stderr.write(
            f"vcpulab: note: no PLE window series: set [record] ple_window = true; did not write '{path}'\n"
        )
        return []
    if ple.write_window_plot(path, results):
        return [str(path), str(csv_path)]
    ple.write_window_csv(csv_path, results)
    missing = f"vcpulab: note: matplotlib is not installed; skipped the plot '{path}' (pip install matplotlib)"
    sys.stderr.write(missing + "\n")
    return [str(csv_path)]


def _write_cdf(path: Path, results: Sequence[dict[str, Any]]) -> list[str]:
    """Write the CDF CSV and, if matplotlib is available, its plot; returns the files written."""
    report.write_cdf_csv(path, results)
    png = report.cdf_png_path(path)
    if report.write_cdf_png(png, results):
        return [str(path), str(png)]
    sys.stderr.write(
        f"vcpulab: note: matplotlib is not installed; skipped the plot '{printable(png)}' (pip install matplotlib)\n"
    )
    return [str(path)]


def _check_writable(path: str, option: str | None = None) -> Output:
    """A one-line error, before anything runs, for an output path that cannot be written
    (naming ``option`` when given): :class:`vcpulab.atomic.Output`."""
    return Output(path, option)


def cmd_validate(args: argparse.Namespace) -> int:
    plan = make_plan(args)
    info = report.parse_info(plan.info())
    _check_baseline(info)
    _scaling_settings(plan, info)
    if args.print_spec:
        _write(sys.stdout, plan.spec_toml())
        return 0
    cells = plan.cells()
    if args.json:
        for cell in cells:
            print(json_text(cell))
        return 0
    console = render.stdout_console()
    if len(cells) <= render.MANY_CELLS:
        console.print(render.cells_table(cells))
    else:
        # A table of every cell would take minutes to render for a large sweep, and nobody
        # reads it: the values each dimension takes, then the first few cells.
        console.print(_dimensions_table(cells))
        console.print(render.cells_table(cells[:VALIDATE_FIRST_CELLS]))
        console.print(
            f"… and {len(cells) - VALIDATE_FIRST_CELLS:,} more cells (every cell with --json)",
            style="dim",
            highlight=False,
            markup=False,
        )
    console.print(f"spec OK: {len(cells)} runs", highlight=False)
    if (apicv := apicv_note(plan.spec_toml())) is not None:
        sys.stderr.write(f"vcpulab: note: {apicv}\n")
    return 0


# Above render.MANY_CELLS cells, `validate` lists the values of each dimension and this many cells.
VALIDATE_FIRST_CELLS = 10
_DIMENSIONS = (
    ("variant", "variants"),
    ("workload", "workloads"),
    ("scenario", "scenarios"),
    ("vcpus", "vCPU counts"),
    ("threads", "thread counts"),
    ("oc_vms", "OC VMs"),
    ("seed", "seeds"),
)


def _dimensions_table(cells: Sequence[Mapping[str, Any]], shown: int = 8) -> Table:
    """Per dimension of the cells: how many distinct values, and the first ``shown`` of them."""
    table = Table(title=f"{len(cells):,} cells", title_justify="left")
    table.add_column("dimension")
    table.add_column("values", justify="right")
    table.add_column("first values")
    for key, name in _DIMENSIONS:
        values = list(dict.fromkeys(c.get(key) for c in cells))
        if all(v in (None, "") for v in values):  # no variants
            continue
        listed = ", ".join(str(v) for v in values[:shown]) + (", …" if len(values) > shown else "")
        table.add_row(name, f"{len(values):,}", Text(listed))
    return table


def _print_items(items: Sequence[Any], table: Any, as_json: bool) -> int:
    """Prints ``items`` as JSON Lines, or as the rich table ``table(items)``."""
    if as_json:
        for item in items:
            print(json_text(item))
    else:
        render.stdout_console().print(table(items))
    return 0


def _traced_programs() -> list[Any]:
    """The traced real programs of ``$VCPULAB_TRACES`` (a broken manifest: its one line, exit 2)."""
    from .traced.manifest import ManifestError, catalogue

    try:
        return catalogue()
    except ManifestError as e:
        raise CliError(str(e)) from None


def traced_item(program: Any) -> dict[str, Any]:
    """A traced program as ``vcpulab workloads --json`` lists it (``kind = "trace"``)."""
    info = program.info
    return {
        "name": program.workload,
        "kind": "trace",
        "source": "trace",
        "suite": program.name.split(".", 1)[0],
        "program": program.name,
        "model": "trace replay",
        "description": f"{program.name} traced at {len(program.traces)} thread counts ({one_line(info.get('input'))})",
        "threads": program.thread_counts,
        "input": info.get("input"),
        "commit": info.get("commit"),
        "directory": str(program.directory),
    }


def cmd_workloads(args: argparse.Namespace) -> int:
    from .traced.manifest import traces_root

    builtins = [{**w, "kind": "profile"} for w in workloads()]
    traced = [traced_item(p) for p in _traced_programs()]
    if args.json:
        for item in builtins + traced:
            print(json_text(item))
    else:
        console = render.stdout_console()
        console.print(render.workloads_table(builtins))
        if traced:
            console.print(render.traced_table(traced))
    if not traced:
        sys.stderr.write(
            f"vcpulab: note: no traced programs in {printable(traces_root())} (set VCPULAB_TRACES, or record them: "
            "docs/real-programs.md)\n"
        )
    return 0


def cmd_characterize(args: argparse.Namespace) -> int:
    if not 1 <= args.cpus <= U32_MAX:
        raise CliError(f"--cpus must be at least 1 and at most {U32_MAX} (got {args.cpus})")
    result = json.loads(characterize(args.workload, args.cpus, args.seed, int(args.slice * 1e6), list(args.sets)))
    if args.json:
        print(json_text(result))
    else:
        render.stdout_console().print(render.characterization_table(result))
    return 0


def cmd_diagnose(args: argparse.Namespace) -> int:
    from . import diagnose

    if args.out is not None:
        _check_writable(args.out, option="--out")
    _, payload = make_payload(args)
    try:
        want = parse_only(args.only)
    except OnlyError as e:
        raise CliError(str(e)) from None
    overrides = list(payload.overrides)

    def selected(cells: Sequence[Mapping[str, Any]]) -> list[int]:
        return select_cells(cells, want)

    with render.step_progress(sys.stderr.isatty()) as progress:
        try:
            diag = diagnose.run(
                payload.text,
                payload.source,
                overrides,
                selected,
                mitigate=not args.no_mitigations,
                on_step=progress.done,
                on_plan=lambda n: progress.total(1 + n),
            )
        except diagnose.DiagnoseError as e:
            raise CliError(str(e)) from None
    data = diag.to_json()
    if args.out is not None:
        with AtomicWriter(args.out, option="--out") as out:
            out.write(json_text(data, indent=1) + "\n")
    if args.json:
        print(json_text(data))
        return 0
    console = render.stdout_console()
    console.print(render.diagnosis_header(data))
    console.print()
    console.print(render.causes_table(data, args.top))
    if data["wait_chains"]["total_ns"]:
        console.print()
        console.print(render.wait_chains_table(data))
    if data.get("wake_path", {}).get("wakeups"):
        console.print()
        console.print(render.wake_path_table(data))
    if data["mitigations"]:
        console.print()
        console.print(render.mitigations_table(data))
    elif not args.no_mitigations:
        console.print(
            "no mitigation to try: no cause adds 1% of the native cycles, or its mitigations are already on",
            style="dim",
        )
    return 0


def cmd_policies(args: argparse.Namespace) -> int:
    return _print_items(policies(), render.policies_table, args.json)


def cmd_platforms(args: argparse.Namespace) -> int:
    return _print_items(platforms(), render.platforms_table, args.json)


def cmd_platform_show(args: argparse.Namespace) -> int:
    _write(sys.stdout, platform_toml(args.name))
    return 0


def cmd_workload_show(args: argparse.Namespace) -> int:
    from .traced.manifest import PREFIX

    if args.name.startswith(PREFIX):
        return _show_traced(args.name, args.json)
    if args.json:
        _write(sys.stdout, json_text({"kind": "profile", **tomllib.loads(workload_toml(args.name))}))
    else:
        _write(sys.stdout, workload_toml(args.name))
    return 0


def _show_traced(name: str, as_json: bool) -> int:
    """``vcpulab workloads show traced.X``: the manifest, readable or as JSON."""
    import difflib

    from .traced.manifest import PREFIX, ManifestError, resolve

    programs = _traced_programs()
    try:
        program = resolve(name, programs)
    except ManifestError as e:
        # Compared without the prefix, which every name shares: 'dedupp' or 'parsec.dedupp' → traced.parsec.dedup.
        keys = {k: p.workload for p in programs for k in (p.name, p.name.split(".", 1)[1])}
        close = difflib.get_close_matches(name.removeprefix(PREFIX), list(keys), n=3, cutoff=0.6)
        shown = list(dict.fromkeys(keys[c] for c in close))
        hint = f"; did you mean {' or '.join(repr(c) for c in shown)}?" if shown else ""
        raise CliError(f"{e}{hint}") from None
    if as_json:
        traces = [{**t.entry, "threads": t.threads, "file": t.file, "sha256": t.sha256} for t in program.traces]
        doc = {"name": program.workload, "kind": "trace", "directory": str(program.directory)}
        print(json_text({**doc, **program.info, "trace": traces}))
    else:
        console = render.stdout_console()
        for part in render.traced_program_view(program):
            console.print(part)
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    result = json.loads(bench(args.seconds))
    if args.json:
        print(json_text(result))
    else:
        print(render.bench_text(result))
    return 0


def _write(stream: TextIO, text: str) -> None:
    stream.write(text if text.endswith("\n") else text + "\n")


# --- entry point ----------------------------------------------------------------------------


def _fail(message: object, code: int) -> int:
    if sys.stderr is not None:  # closed (2>&-): the exit code still says it
        sys.stderr.write(f"vcpulab: error: {one_line(message)}\n")
        sys.stderr.flush()
    return code


class Interrupted(KeyboardInterrupt):
    """SIGINT (Ctrl-C) or SIGTERM, raised where the main thread is: a KeyboardInterrupt, so
    every clean-up written for Ctrl-C (stopping workers and traced programs, committing
    finished cells, removing temporary files) runs for both. Exit code 128 + the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__()
        self.signum = signum

    @property
    def code(self) -> int:
        return 128 + self.signum

    @property
    def message(self) -> str:
        return "interrupted" if self.signum == signal.SIGINT else f"interrupted by {signal.Signals(self.signum).name}"


def _interrupted(e: KeyboardInterrupt) -> tuple[str, int]:
    """The error message and exit code of an interruption."""
    if isinstance(e, Interrupted):
        return e.message, e.code
    return "interrupted", EXIT_INTERRUPTED


class _Interrupts:
    """SIGINT and SIGTERM raise :class:`Interrupted` (a KeyboardInterrupt) and start a
    watchdog: the clean-up that follows (stopping workers, committing finished cells) must not
    hang the terminal. If it outlives :data:`INTERRUPT_GRACE_S`, the watchdog prints every
    thread's stack (for a bug report) and ends the process with the signal's exit code (130,
    143); the journal already holds every finished cell, so nothing stored is lost."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)
    # What a process starts with, per signal: only then is the signal ours to take over.
    DEFAULTS = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}

    def __init__(self) -> None:
        self._previous: dict[int, Any] = {}
        self._watchdog: threading.Timer | None = None

    def __enter__(self) -> _Interrupts:
        # Only the main thread of a process whose handlers are the defaults can take them over
        # (not, e.g., a test runner calling main() from a worker thread).
        if threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                if signal.getsignal(signum) is self.DEFAULTS[signum]:
                    self._previous[signum] = signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()
        if self._watchdog is not None:
            self._watchdog.cancel()

    def _on_signal(self, signum: int, frame: object) -> None:
        if self._watchdog is None:
            self._watchdog = threading.Timer(INTERRUPT_GRACE_S, _give_up_after_interrupt, args=(128 + signum,))
            self._watchdog.daemon = True
            self._watchdog.start()
        raise Interrupted(signum)


def _give_up_after_interrupt(code: int = EXIT_INTERRUPTED) -> None:
    import faulthandler

    sys.stderr.write(
        f"vcpulab: error: interrupted, but stopping took longer than {INTERRUPT_GRACE_S:g} s; exiting now "
        "(finished cells are kept). Please report this with the thread stacks below.\n"
    )
    sys.stderr.flush()
    faulthandler.dump_traceback(all_threads=True)
    os._exit(code)


def _quiet_stdout() -> None:
    """Points stdout at /dev/null, so what is left in its buffer goes nowhere without an error."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError, AttributeError):
        pass


def main(argv: Sequence[str] | None = None) -> int:
    # A net under vcpulab.text.printable: whatever still reaches a stream with a byte that is
    # not UTF-8 in it is written escaped, not an error.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and getattr(stream, "errors", None) == "strict":
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError):
                pass
    with _Interrupts():
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    if sys.stdout is None:  # started with stdout closed (>&-): nothing could be printed
        closed = "standard output is closed (vcpulab prints its results there; redirect it to a file or /dev/null)"
        return _fail(closed, EXIT_USAGE)
    try:
        args = build_parser().parse_args(argv)
        args.argv = list(argv) if argv is not None else sys.argv[1:]
        if args.command is None:
            raise CliError("missing command (run, summary, query, validate, workloads, ...); see 'vcpulab --help'")
        code: int = args.func(args)
        sys.stdout.flush()
        return code
    except CliError as e:
        return _fail(e, e.code)
    except SpecError as e:
        return _fail(e, EXIT_USAGE)
    except (SimulationError, VcpulabError) as e:
        return _fail(e, EXIT_SIMULATION)
    except (StoreError, ManifestError, RecordError, CalibrationError) as e:
        return _fail(e, EXIT_USAGE)
    except LaunchError as e:
        return _fail(e, e.code)
    except OutputError as e:
        return _fail(e, EXIT_USAGE)
    except BrokenPipeError:
        # The reader of stdout went away (e.g. `| head`): stop quietly, as a pipeline expects,
        # and keep Python from complaining again when it flushes stdout at exit. (Before
        # ConnectionError, of which it is a kind.)
        _quiet_stdout()
        return 141
    except ConnectionError as e:
        return _fail(e, EXIT_USAGE)
    except KeyboardInterrupt as e:
        return _fail(*_interrupted(e))
    except OSError as e:
        where = f"'{printable(e.filename)}': " if e.filename else ""
        return _fail(f"cannot access {where}{e.strerror or e}", EXIT_USAGE)
    except Exception as e:  # a bug of ours: still one line, unless asked for the traceback
        if os.environ.get("VCPULAB_DEBUG"):
            raise
        return _fail(f"internal error: {type(e).__name__}: {e} (set VCPULAB_DEBUG=1 for a traceback)", 1)


if __name__ == "__main__":
    raise SystemExit(main())
