"""The bridge commands of the CLI: ``characterize`` (and, as they land, ``trace``, ``predict``,
``mitigate``). Their reports go to stderr, like ``time`` and ``perf stat``: the program's own
output owns stdout."""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

from .. import render
from .._vcpulab import TraceError, VcpulabError, trace_info
from ..analysis import Thresholds
from ..atomic import AtomicWriter, Output
from ..render import stderr_console
from . import machine, mitigate, native, oversub, predict
from .characterize import MM_CALLS, Characterization, characterize
from .launch import BUSY_HELD_OFF_SHARE, TRIM_MADVISE, LaunchError, Measurement, resolve, run_measured


def add_commands(commands: Any, positive_int: Any, duration_ms: Any, scenarios: Any, vcpu_counts: Any) -> None:
    """Adds the bridge commands to the CLI's subcommands (given the CLI's argument types)."""

    def vm_scenarios(text: str) -> list[str]:
        names = scenarios(text)
        if "native" in names:
            names = [n for n in names if n != "native"]  # always replayed
        return names

    ch = commands.add_parser(
        "characterize",
        help="run a real program natively and measure what decides its fate in VMs",
        description="Run PROGRAM natively on this machine and report its measured wall and CPU time, "
        "workload parallelism (threads on a CPU, sampled), voluntary/involuntary context switches per "
        "second, the machine's TLB-shootdown interrupts, its mmap/munmap/madvise/mprotect/futex calls, "
        "and its scalability type (DIS ch.4). The report goes to stderr; the program's stdin, stdout "
        "and stderr are its own, and vcpulab exits with its exit status.",
        epilog="example: vcpulab characterize --cpus 2 -- xz -T2 -c big.tar > big.tar.xz",
    )
    _cpus_option(ch, positive_int)
    ch.add_argument(
        "--slice",
        type=duration_ms,
        default=24.0,
        metavar="MS",
        help="time slice of the synchronization cut-off, in ms (default: 24, DIS's allocation period)",
    )
    ch.add_argument("--interval", type=duration_ms, default=10.0, metavar="MS", help="sampling interval (default: 10)")
    ch.add_argument("-o", "--output", metavar="FILE", help="also write the characterization as JSON to FILE")
    _program_argument(ch)
    ch.set_defaults(func=cmd_characterize)

    mi = commands.add_parser(
        "mitigate",
        help="measure the application-level mitigations that apply to a real program",
        description="Run PROGRAM natively, find which mitigations (TPDS §7) that need no recompilation "
        "apply to it (allocator tunables through GLIBC_TUNABLES, a spin-then-block pthread_spin_* shim, "
        "passive OpenMP waiting), and run it with each: a warm-up run per variant, then rounds of the "
        "baseline and every variant in an order rotated every round, until each speedup's 95 % confidence "
        "interval (paired by round) is within --precision. Report the measured speedup with its interval "
        "(\"not applicable\" for a variant --all runs although nothing in the program is for it to change) "
        "and the change in trimming madvise calls, TLB shootdowns (whole machine) and context switches. The "
        "program's stdin is /dev/null and its stdout is compared between variants, not shown.",
        epilog="example: vcpulab mitigate -- ./target/native/bin/heap_churn --threads 2",
    )
    _cpus_option(mi, positive_int)
    mi.add_argument("--all", action="store_true", help="try every mitigation, not only those that apply")
    mi.add_argument("--runs", type=positive_int, metavar="N", help="exactly N runs per variant (default: adaptive)")
    mi.add_argument(
        "--min-runs", type=positive_int, default=3, metavar="N", help="adaptive: at least N runs (default 3)"
    )
    mi.add_argument(
        "--max-runs", type=positive_int, default=10, metavar="N", help="adaptive: at most N runs (default 10)"
    )
    mi.add_argument(
        "--precision",
        type=float,
        default=0.05,
        metavar="F",
        help="adaptive: stop when every paired speedup's 95 %% CI half-width is within F of it (default 0.05)",
    )
    mi.add_argument(
        "--budget", type=float, default=60.0, metavar="S", help="adaptive: seconds per variant, baseline included (default 60)"
    )
    mi.add_argument(
        "--no-predict", action="store_true", help="skip the simulator's prediction (one traced run and its replays)"
    )
    mi.add_argument("-o", "--output", metavar="FILE", help="also write the comparison as JSON to FILE")
    _program_argument(mi)
    mi.set_defaults(func=cmd_mitigate)

    tr = commands.add_parser(
        "trace",
        help="run a real program under the LD_PRELOAD tracer and write its trace",
        description="Run PROGRAM with libvtrace.so preloaded: per thread and with timestamps, its thread "
        "create/exit/join, pthread mutex/spin/rwlock/barrier/condvar operations with wait and hold times, "
        "malloc/free/realloc sizes and mmap/munmap/madvise/mprotect calls go to a binary trace "
        "(docs/trace-format.md). The program's input and output are its own; vcpulab exits with its "
        "exit status. The trace is written whole or not at all.",
        epilog="example: vcpulab trace -o xz.vtrace -- xz -T2 -c big.tar > big.tar.xz",
    )
    tr.add_argument("-o", "--output", required=True, metavar="FILE", help="the trace file to write")
    _cpus_option(tr, positive_int)
    tr.add_argument(
        "--cpu-gap",
        type=positive_int,
        metavar="NS",
        help="measure thread CPU time at most every NS of wall time (default 10000; see docs/trace-format.md)",
    )
    _program_argument(tr)
    tr.set_defaults(func=cmd_trace)

    pr = commands.add_parser(
        "predict",
        help="replay a trace in the simulator: overheads in VMs, their causes, mitigations",
        description="Replay TRACE (from `vcpulab trace`) in the simulator: natively on the traced machine's "
        "CPUs (the prediction of the traced run's wall time), then natively and in each SCENARIO with "
        "--vcpus vCPUs; print δη_t and δη_r, the causes of the added time, and the mitigations of "
        "TPDS §7 and DIS that apply, each simulated: the VM's speedup and the δη it leaves.",
        epilog="example: vcpulab predict xz.vtrace --scenario OC --vcpus 8",
    )
    pr.add_argument("trace", metavar="TRACE", help="a trace file written by `vcpulab trace`")
    pr.add_argument(
        "--scenario",
        dest="scenarios",
        action="extend",
        type=vm_scenarios,
        metavar="S",
        help="UC, OC or OC2; repeatable or comma-separated (default: UC,OC)",
    )
    pr.add_argument(
        "--vcpus",
        action="extend",
        type=vcpu_counts,
        metavar="N",
        help="vCPUs per VM; repeatable or comma-separated (default: the traced machine's CPUs)",
    )
    pr.add_argument("--cpus", type=positive_int, metavar="N", help="cores of the native replay (default: as traced)")
    pr.add_argument("--seed", type=positive_int, default=1, metavar="N", help="random seed (default 1)")
    pr.add_argument("-o", "--output", metavar="FILE", help="also write the prediction as JSON to FILE")
    pr.set_defaults(func=cmd_predict)

    fi = commands.add_parser(
        "fidelity",
        help="how well the native replay of a program's trace predicts its measured wall time",
        description="Run PROGRAM natively --runs times (measured, untraced), once under the tracer, and "
        "replay the trace in the simulator natively on the same number of CPUs; print the measured and "
        "replayed wall times and the error. The program's output is discarded.",
        epilog="example: vcpulab fidelity -- target/native/bin/pipeline --items 5000",
    )
    _cpus_option(fi, positive_int)
    fi.add_argument("--runs", type=positive_int, default=3, metavar="N", help="untraced runs (default 3)")
    fi.add_argument("-o", "--output", metavar="FILE", help="also write the comparison as JSON to FILE")
    _program_argument(fi)
    fi.set_defaults(func=cmd_fidelity)

    ov = commands.add_parser(
        "oversubscription",
        help="more threads than CPUs with a spin barrier vs a blocking one: measured here and simulated",
        description="Run tracer/workloads/spin_barrier natively with THREADS threads on CPUS CPUs, with its "
        "user-level spin barrier and with pthread_barrier_wait, and the simulator's spinbarrier and barrier "
        "workloads with the same threads, CPUs, rounds and work on a kernel with this machine's time slice: "
        "the OC2 effect of TPDS §6 (Fig. 10), measured next to its prediction.",
    )
    ov.add_argument("--threads", type=positive_int, default=4, metavar="N", help="threads (default 4)")
    ov.add_argument("--cpus", type=positive_int, metavar="N", help="CPUs (default: 2, or 1 on a 1-CPU machine)")
    ov.add_argument("--rounds", type=positive_int, default=200, metavar="N", help="barrier rounds (default 200)")
    ov.add_argument(
        "--work-us", type=positive_int, default=50, metavar="US", help="work per thread per round (default 50)"
    )
    ov.add_argument("--runs", type=positive_int, default=1, metavar="N", help="measured runs of each (default 1)")
    ov.add_argument("-o", "--output", metavar="FILE", help="also write the comparison as JSON to FILE")
    ov.set_defaults(func=cmd_oversubscription)


def _cpus_option(parser: argparse.ArgumentParser, positive_int: Any) -> None:
    parser.add_argument(
        "--cpus", type=positive_int, metavar="N", help="run it on N of this machine's CPUs (default: all)"
    )


def _program_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("program", nargs=argparse.REMAINDER, metavar="-- PROGRAM [ARGS...]", help="the program to run")


def _program(args: argparse.Namespace) -> list[str]:
    argv = list(args.program)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise LaunchError(
            f"{args.command}: no program given (usage: vcpulab {args.command} [OPTIONS] -- PROGRAM [ARGS...])", 2
        )
    return argv


def check_output(path: str | None) -> None:
    """The one-line error of an ``-o FILE`` that cannot be written (a directory, a missing
    directory, ...), raised before the runs and simulations whose results it is to hold: the
    commands write it only at their end."""
    if path is not None:
        Output(path, "-o")


def cmd_characterize(args: argparse.Namespace) -> int:
    argv = _program(args)
    check_output(args.output)
    th = Thresholds(slice_ms=args.slice)
    m = run_measured(argv, cpus=args.cpus, sample_s=args.interval / 1000.0)
    c = characterize(m, th)
    if args.output:
        _write_json(args.output, c.to_json())
    console = stderr_console()
    console.print(characterization_table(c))
    if m.status != 0:
        ended = f"signal {-m.status}" if m.status < 0 else f"exit status {m.status}"
        console.print(f"the program ended with {ended}", style="yellow", highlight=False)
    return m.exit_code


def cmd_mitigate(args: argparse.Namespace) -> int:
    argv = _program(args)
    check_output(args.output)
    if not 0 < args.precision < 1:
        raise LaunchError(f"--precision must be between 0 and 1 (got {args.precision})", 2)
    if args.runs is not None:
        policy = mitigate.Policy.fixed(args.runs)
    else:
        if args.min_runs > args.max_runs:
            raise LaunchError(f"--min-runs ({args.min_runs}) exceeds --max-runs ({args.max_runs})", 2)
        policy = mitigate.Policy(args.min_runs, args.max_runs, args.precision, args.budget)
    binary = mitigate.inspect_binary(resolve(argv))
    console = stderr_console()

    def on_run(name: str, m: Measurement) -> None:
        console.print(f"  {name}: {m.wall_s:.3f} s", style="dim")

    # The first run decides what applies (its counts) and warms the machine up: not kept.
    first, _ = mitigate.run_once(argv, "baseline", {}, args.cpus)
    on_run("baseline (warm-up, not kept)", first)
    chosen = mitigate.applicable(binary, first, args.all)
    # Resolve every library first: a missing one is an error before the long runs.
    variants = [(mit, reason, applies, mitigate.Runs(mit.name, mit.env())) for mit, reason, applies in chosen]
    for mit, reason, applies, _ in variants:
        console.print(f"{mit.name}: {reason}" + ("" if applies else " (does not apply; run on request, --all)"), style="dim")
    base = mitigate.Runs("baseline", {})
    mitigate.interleaved(argv, base, [v for *_, v in variants], policy, args.cpus, on_run)
    comparisons = [mitigate.compare(base, mit, reason, runs, applies) for mit, reason, applies, runs in variants]
    comparisons.sort(key=lambda c: (not c.applies, -c.speedup))
    for c in comparisons:
        if not c.applies:
            c.not_predicted = "does not apply"
    if any(c.applies for c in comparisons) and not args.no_predict:
        console.print("predicting: one traced run, replayed with and without each change", style="dim")
        _predict_mitigations(argv, args.cpus, base.measurements[0].cpus, comparisons, console)
    for c in comparisons:
        if c.predicted is None and c.not_predicted is None:
            c.not_predicted = "not modelled" if not c.mitigation.simulated else "not asked for (--no-predict)"
    if args.output:
        _write_json(args.output, mitigate_json(argv, base, comparisons))
    console.print(mitigation_table(argv, base, comparisons))
    if not any(applies for _, _, applies in chosen):
        console.print("no mitigation of the catalogue applies (see --all)", style="yellow")
    return 0


# A larger trace of the baseline is not replayed by `mitigate` (its replays would take long).
PREDICT_TRACE_LIMIT = 512 << 20


def _predict_mitigations(
    argv: list[str], cpus: int | None, ncpus: int, comparisons: list[mitigate.Comparison], console: Any
) -> None:
    """Fills each comparison's simulated speedup: the baseline traced once, replayed natively
    on the same CPUs without and with the mitigation's simulated equivalent."""
    with tempfile.TemporaryDirectory(prefix="vcpulab-mitigate-") as d:
        out = Path(d) / "baseline.vtrace"
        with open(os.devnull, "r+b") as null:  # as the measured runs: no input, output discarded
            # The tracer stops just above the limit: a spin-polling program can otherwise write
            # gigabytes per second of lock calls.
            limit = PREDICT_TRACE_LIMIT + (1 << 20)
            trace_program(argv, out, cpus, None, console, stdout=null.fileno(), stdin=null.fileno(), max_bytes=limit)
        size = out.stat().st_size
        if size > PREDICT_TRACE_LIMIT:
            _not_predicted(comparisons, f"the baseline's trace grew beyond {PREDICT_TRACE_LIMIT >> 20} MiB", console)
            return
        try:
            info = json.loads(trace_info(str(out)))
        except TraceError as e:
            _not_predicted(comparisons, f"the replay of the baseline's trace failed: {e}", console)
            return
        warning = predict.unexplained_warning(info["replay"])
        if warning:
            console.print(f"warning: the simulated column: {warning}", style="bold yellow", highlight=False)
        # A replay that fails (a deadlock the program did not have, a run limit) costs only the
        # simulated column: the measurements above are printed and written all the same.
        try:
            plain = predict.fidelity(str(out), ncpus, info=info)["t_native_s"]
        except VcpulabError as e:
            _not_predicted(comparisons, f"the replay of the baseline's trace failed: {e}", console)
            return
        for c in comparisons:
            if c.mitigation.simulated and c.applies:
                try:
                    changed = predict.fidelity(str(out), ncpus, overrides=c.mitigation.simulated, info=info)["t_native_s"]
                except VcpulabError as e:
                    c.not_predicted = f"the replay with {c.mitigation.name} failed: {e}"
                    console.print(f"not predicted: {c.not_predicted}", style="yellow")
                    continue
                c.predicted = float(plain) / float(changed)


def _not_predicted(comparisons: list[mitigate.Comparison], why: str, console: Any) -> None:
    """No mitigation is simulated, for ``why``: said once, and kept by each that applies."""
    console.print(f"not predicted: {why}", style="yellow")
    for c in comparisons:
        if c.applies:
            c.not_predicted = why


def _delta(base: mitigate.Runs, runs: mitigate.Runs, value: Any) -> str:
    a, b = base.mean(value), runs.mean(value)
    if a is None or b is None:
        return "n/a"
    return f"{a:,.0f} → {b:,.0f}"


def _switches(m: Measurement) -> int:
    return m.voluntary_switches + m.involuntary_switches


def mitigation_table(argv: list[str], base: mitigate.Runs, comparisons: list[mitigate.Comparison]) -> Table:
    bw = statistics.fmean(base.walls)
    hw = base.half_width()
    table = Table(
        title=f"{' '.join(argv)[:70]}: baseline {bw:.3f} s ± {_num(hw, '.3f')} ({len(base.walls)} runs), measured "
        "in rounds of alternating order, speedups paired by round (simulated: the native replay of a trace of "
        "the baseline, with the same change)",
        title_justify="left",
    )
    for col in (
        "mitigation",
        "runs",
        "wall (s)",
        "speedup [95 % CI]",
        "simulated",
        "trimming madvise",
        "TLB shootdowns (whole machine)",
        "ctx switches",
    ):
        table.add_column(col, justify="left" if col == "mitigation" else "right")
    table.add_column("stdout")
    for c in comparisons:
        ci = "" if c.speedup_ci is None else f" [{c.speedup_ci[0]:.2f}, {c.speedup_ci[1]:.2f}]"
        table.add_row(
            f"{c.mitigation.name} ({c.mitigation.cause})",
            str(len(c.runs.walls)),
            f"{statistics.fmean(c.runs.walls):.3f}",
            f"{c.speedup:.2f}×{ci}" if c.applies else "not applicable",
            "—" if c.predicted is None else f"{c.predicted:.2f}×" + (" (disagrees)" if c.agrees is False else ""),
            _delta(base, c.runs, lambda m: m.count(TRIM_MADVISE)),
            _delta(base, c.runs, lambda m: m.tlb_shootdowns),
            _delta(base, c.runs, _switches),
            {True: "same", False: "DIFFERS", None: "varies"}[c.same_output],
        )
    remarks = [r for c in comparisons if (r := c.remark) is not None]
    remarks += [
        f"{c.mitigation.name}: not applicable: {c.reason} (run on request, --all: its ratio to the baseline, "
        f"{c.speedup:.2f}×, is noise, not a speedup)"
        for c in comparisons
        if not c.applies
    ]
    if remarks:
        table.caption = Text("\n".join(remarks), style="yellow")
        table.caption_justify = "left"
    return table


def mitigate_json(argv: list[str], base: mitigate.Runs, comparisons: list[mitigate.Comparison]) -> dict[str, Any]:
    return {
        "argv": argv,
        "baseline": {"wall_s": base.walls, "runs": [m.to_json() for m in base.measurements]},
        "mitigations": [
            {
                "name": c.mitigation.name,
                "cause": c.mitigation.cause,
                "what": c.mitigation.what,
                "why": c.reason,
                # False: its hook finds nothing to act on here (run only on request, --all);
                # then speedup is null and measured_ratio is the noise it measured.
                "applies": c.applies,
                "env": c.runs.env,
                "wall_s": c.runs.walls,
                "speedup": c.speedup if c.applies else None,
                "speedup_ci95": c.speedup_ci if c.applies else None,
                "measured_ratio": c.speedup,
                "same_output": c.same_output,
                "predicted_speedup": c.predicted,
                "not_predicted": c.not_predicted,
                # Whether the simulated speedup lies within the measured 95 % CI (null: nothing
                # to compare), and when it does not, what the simulation leaves out.
                "simulation_agrees": c.agrees,
                "remark": c.remark,
                "runs": [m.to_json() for m in c.runs.measurements],
            }
            for c in comparisons
        ],
    }


def cmd_trace(args: argparse.Namespace) -> int:
    argv = _program(args)
    out = Path(args.output)
    console = stderr_console()
    m, info = trace_program(argv, out, args.cpus, args.cpu_gap, console)
    console.print(trace_table(out, m, info))
    if m.status != 0:
        console.print(f"the program ended with exit status {m.status}", style="yellow", highlight=False)
    return m.exit_code


def trace_program(
    argv: list[str],
    out: Path,
    cpus: int | None,
    cpu_gap: int | None,
    console: Any,
    stdout: int | None = None,
    stdin: int | None = None,
    max_bytes: int | None = None,
    env_extra: Mapping[str, str] | None = None,
) -> tuple[Measurement, dict[str, Any]]:
    """Runs ``argv`` under the tracer into ``out`` (whole or not at all, through
    :class:`~vcpulab.atomic.Output`: a link is written through, a device or FIFO gets the
    finished trace copied in); the run's measurement and the trace's description. With
    ``max_bytes`` the tracer stops recording before the file grows beyond it (VTRACE_MAX_BYTES).
    ``env_extra`` is added to the program's environment (e.g. OMP_NUM_THREADS)."""
    output = Output(out, "-o")
    lib = native.library("libvtrace.so")
    resolve(argv)  # a missing program fails before anything is created
    # Absolute: the program may change directories before the tracer opens it. Beside the file
    # it becomes (renamed over it), or in the temporary directory for a device or FIFO.
    where = Path(tempfile.gettempdir()) if output.stream else output.target.parent
    fd, tmp_name = tempfile.mkstemp(prefix=f".{output.target.name}.", suffix=".tmp", dir=where.resolve())
    os.close(fd)
    tmp, log = Path(tmp_name), Path(tmp_name + ".log")
    tmp.unlink()  # the tracer creates it, header first
    env = {**os.environ, **(env_extra or {})}
    env.update({"VTRACE_OUT": str(tmp), "VTRACE_LOG": str(log)})
    env["LD_PRELOAD"] = f"{lib}:{env['LD_PRELOAD']}" if env.get("LD_PRELOAD") else str(lib)
    if cpu_gap is not None:
        env["VTRACE_CPU_GAP_NS"] = str(cpu_gap)
    if max_bytes is not None:
        env["VTRACE_MAX_BYTES"] = str(max_bytes)
    try:
        m = run_measured(argv, env=env, cpus=cpus, stdin=stdin, stdout=stdout)
        if m.status < 0:
            raise LaunchError(
                f"{argv[0]} was killed by signal {-m.status} under tracing: no trace written", m.exit_code
            )
        if not tmp.exists():
            raise LaunchError(
                f"{argv[0]}: nothing was traced (a statically linked program, or one that clears LD_PRELOAD?)",
                m.exit_code or 1,
            )
        info = json.loads(trace_info(str(tmp)))  # the whole file must read back
        output.replace_with(tmp)
        if log.exists() and log.stat().st_size > 0:
            if output.stream:  # no file beside a device or FIFO: the problems themselves
                problems = log.read_text(errors="replace").splitlines()
                console.print("the tracer reported problems:", style="yellow")
                for line in problems[:20] + ([f"... ({len(problems) - 20} more lines)"] if len(problems) > 20 else []):
                    console.print(f"  {line}", style="yellow", highlight=False)
            else:
                os.replace(log, Path(f"{output.target}.log"))
                console.print(f"the tracer reported problems: see {output.target}.log", style="yellow")
    except TraceError as e:
        raise LaunchError(f"the trace of {argv[0]} is unreadable: {e}", 1) from None
    finally:
        # Also on SIGINT/SIGTERM (the program and its children are stopped by then): the
        # trace, its log, and the header the tracer writes beside it before linking it in.
        tmp.unlink(missing_ok=True)
        log.unlink(missing_ok=True)
        for leftover in tmp.parent.glob(glob.escape(tmp.name) + ".vtrace-tmp.*"):
            leftover.unlink(missing_ok=True)
    return m, info


def cmd_fidelity(args: argparse.Namespace) -> int:
    argv = _program(args)
    check_output(args.output)
    console = stderr_console()
    policy = mitigate.Policy.fixed(args.runs)
    measured = mitigate.repeat("untraced", argv, {}, policy, args.cpus, lambda n, m: None)
    with tempfile.TemporaryDirectory(prefix="vcpulab-fidelity-") as d:
        out = Path(d) / "run.vtrace"
        with open(os.devnull, "r+b") as null:
            traced, _ = trace_program(argv, out, args.cpus, None, console, stdout=null.fileno(), stdin=null.fileno())
        info = json.loads(trace_info(str(out)))
        pred = predict.fidelity(str(out), measured.measurements[0].cpus, info=info)
        replay = info["replay"]
    mean = statistics.fmean(measured.walls)
    hw = measured.half_width()
    replayed = float(pred["t_native_s"])
    error = replayed / mean - 1.0
    # CPU time is what other processes' load does not distort: the wall time it does (a
    # busy machine holds the program's threads off their CPUs), so that share is measured
    # too (schedstat) and the wall-time error is marked as not comparable beyond it.
    cpu_mean = statistics.fmean(m.cpu_s for m in measured.measurements)
    replayed_cpu = float(pred["c_native_ns"]) / 1e9
    held_off = statistics.fmean(m.held_off_share for m in measured.measurements)
    result = {
        "argv": argv,
        "cpus": measured.measurements[0].cpus,
        "measured_wall_s": measured.walls,
        "traced_wall_s": traced.wall_s,
        "replayed_s": replayed,
        "error": error,
        "measured_cpu_s": [m.cpu_s for m in measured.measurements],
        "replayed_cpu_s": replayed_cpu,
        "cpu_error": replayed_cpu / cpu_mean - 1.0 if cpu_mean > 0 else None,
        "held_off_share": held_off,
        "wall_time_comparable": held_off <= BUSY_HELD_OFF_SHARE,
        # The traced kernel whose rules the replay follows (machine.py).
        "kernel": replay.get("kernel"),
        "kernel_rules": machine.traced(replay).describe(),
        # The trace's off-CPU time with no traced reason, split (see `predict`).
        "unexplained_s": replay["unexplained_ns"] / 1e9,
        "blocked_untraced_s": replay.get("blocked_untraced_ns", 0) / 1e9,
        "unexplained_unsplit_s": replay.get("unexplained_unsplit_ns", 0) / 1e9,
        "warning": predict.unexplained_warning(replay),
        # The heap model against the traced run: trimming calls and shootdowns, measured while
        # tracing (TLB interrupts are the whole machine's) and in the native replay.
        "measured_trim_calls": traced.count(TRIM_MADVISE),
        "measured_munmap_calls": traced.count("syscalls:sys_enter_munmap"),
        # The main arena trims by shrinking brk (malloc.c systrim), not by madvise: a thread
        # given the main arena past the arena limit trims there (brk counts growth too).
        "measured_brk_calls": traced.count("syscalls:sys_enter_brk"),
        "measured_tlb_interrupts_machine": traced.tlb_shootdowns,
        "replayed_shootdowns": int(pred["metrics"]["tlb_shootdowns"]),
        "replayed_unmap_calls": int(predict.unmap_calls(pred["metrics"])),
    }
    if args.output:
        _write_json(args.output, result)
    out_console = render.stdout_console()
    table = Table(
        title=f"{' '.join(argv)[:70]}: native replay against the measured run",
        caption=f"replayed with {result['kernel_rules']}",
        title_justify="left",
    )
    for col in ("CPUs", "time", "measured (untraced)", "traced run", "replayed (simulated)", "error"):
        table.add_column(col, justify="right")
    ci = f" ± {hw:.3f}" if hw is not None else ""
    table.add_row(
        str(result["cpus"]),
        "wall",
        f"{mean:.3f} s{ci} ({len(measured.walls)} runs)",
        f"{traced.wall_s:.3f} s",
        f"{replayed:.3f} s",
        f"{error:+.1%}" + ("" if result["wall_time_comparable"] else " (busy)"),
    )
    cpu_error = result["cpu_error"]
    table.add_row(
        "",
        "CPU",
        f"{cpu_mean:.3f} s",
        f"{traced.cpu_s:.3f} s",
        f"{replayed_cpu:.3f} s",
        "—" if cpu_error is None else f"{cpu_error:+.1%}",
    )
    table.add_row(
        "",
        "shootdowns",
        "",
        f"{_num(result['measured_trim_calls'])} madvise(DONTNEED/FREE) + {_num(result['measured_munmap_calls'])} munmap "
        f"(+ {_num(result['measured_brk_calls'])} brk); "
        f"{_num(result['measured_tlb_interrupts_machine'])} TLB interrupts (whole machine)",
        f"{result['replayed_unmap_calls']:,} calls, {result['replayed_shootdowns']:,} shot down",
        "",
    )
    out_console.print(table)
    if result["warning"]:
        console.print(f"warning: {result['warning']}", style="bold yellow", highlight=False)
    if not result["wall_time_comparable"]:
        console.print(
            f"the machine was busy: other processes held the program off its CPUs for {held_off:.0%} of its "
            "runnable time, which the measured wall time includes and the replay (an idle machine) does not; "
            "compare the CPU times, or measure on a quieter machine",
            style="yellow",
        )
    return 0


def cmd_oversubscription(args: argparse.Namespace) -> int:
    check_output(args.output)
    have = oversub.available_cpus()
    cpus = args.cpus or min(2, have)
    if cpus > have:
        raise LaunchError(f"--cpus {cpus}: only {have} CPUs are available here", 2)
    c = oversub.compare(args.threads, cpus, args.rounds, args.work_us, args.runs)
    if args.output:
        _write_json(args.output, c.to_json())
    table = Table(
        title=f"{c.threads} threads on {c.cpus} CPUs, {c.rounds} rounds of {c.work_us} µs "
        + (f"(simulated with this kernel's {c.slice_ms:g} ms slice)" if c.slice_ms else "(simulated with CFS's tunables)"),
        title_justify="left",
    )
    for col in ("barrier", "measured here", "simulated"):
        table.add_column(col, justify="left" if col == "barrier" else "right")
    for mode, label in (("spin", "user-level spin"), ("pthread", "pthread_barrier_wait")):
        walls = c.measured[mode]
        table.add_row(label, f"{statistics.fmean(walls):.3f} s", f"{c.simulated[mode]:.3f} s")
    table.add_row("spin / blocking", f"{c.ratio(c.measured):.1f}×", f"{c.ratio(c.simulated):.1f}×")
    render.stdout_console().print(table)
    if not c.wall_time_comparable:
        stderr_console().print(
            f"the machine was busy: other processes held the barrier's threads off their CPUs for "
            f"{c.held_off_share:.0%} of their runnable time, which the measured times include and the simulation "
            "(an idle machine) does not; compare the ratios, or measure on a quieter machine",
            style="yellow",
        )
    return 0


def trace_table(out: Path, m: Measurement, info: dict[str, Any]) -> Table:
    table = Table(title=f"{out}: {out.stat().st_size:,} bytes, traced run {m.wall_s:.3f} s", title_justify="left")
    for col in ("pid", "command", "threads", "records", "lost blocks"):
        table.add_column(col, justify="left" if col == "command" else "right")
    for p in info["processes"]:
        table.add_row(
            str(p["pid"]), " ".join(p["cmdline"])[:60], str(p["threads"]), f"{p['records']:,}", str(p["lost_blocks"])
        )
    return table


def cmd_predict(args: argparse.Namespace) -> int:
    check_output(args.output)
    path = Path(args.trace)
    if path.is_dir():
        raise LaunchError(f"{path}: is a directory (expected a .vtrace file written by `vcpulab trace`)", 2)
    if not path.exists():
        raise LaunchError(f"{path}: no such trace file", 2)
    if not path.is_file():
        raise LaunchError(f"{path}: not a regular file (expected a .vtrace file written by `vcpulab trace`)", 2)
    try:
        # What is being simulated, on a terminal only: an error is then stderr's one line.
        with render.step_progress(sys.stderr.isatty()) as steps:
            pred = predict.predict(
                str(path.resolve()),
                args.scenarios or ["UC", "OC"],
                args.vcpus,
                args.cpus,
                args.seed,
                on_step=lambda s: steps.done(f"simulating: {s}"),
            )
    except TraceError as e:
        raise LaunchError(str(e), 2) from None
    if args.output:
        _write_json(args.output, pred.to_json())
    out = render.stdout_console()
    rep = pred.info["replay"]
    fid = pred.fidelity
    # (the consoles print text as it is, markup included: the command line is bold by style)
    out.print(
        Text.assemble(
            (" ".join(rep["cmdline"])[:70], "bold"),
            f": {rep['threads']} threads, {rep['records']:,} records; "
            f"traced {rep['traced_ns'] / 1e9:.3f} s, "
            f"replayed natively on {fid['vcpus']} CPUs: {fid['t_native_s']:.3f} s "
            f"({machine.traced(rep).describe()}; off-CPU time with no traced reason: {_unexplained(rep)})",
        ),
        highlight=False,
    )
    results = pred.results
    out.print(render.results_table(results, []))
    for warning in pred.warnings():
        stderr_console().print(f"warning: {warning}", style="bold yellow", highlight=False)
    natives = {r["vcpus"]: r for r in results if r["scenario"] == "native"}
    for r in results:
        if r["scenario"] == "native":
            continue
        base = natives[r["vcpus"]]
        table = Table(title=f"{r['scenario']}, {r['vcpus']} vCPUs: where the added time goes", title_justify="left")
        for col in ("cause", "VM (per instance)", "native", "added"):
            table.add_column(col, justify="left" if col == "cause" else "right")
        for cause, vm, nat in predict.causes(r, base):
            table.add_row(
                cause, render.fmt_seconds(vm / 1e9), render.fmt_seconds(nat / 1e9), render.fmt_seconds((vm - nat) / 1e9)
            )
        out.print(table)
    if pred.mitigations:
        table = Table(
            title="mitigations (TPDS §7, DIS), simulated, best first: the VM's time before / after, "
            "and δη against the native run with the same change",
            title_justify="left",
        )
        for col in (
            "scenario",
            "vCPUs",
            "mitigation",
            "cause",
            "VM speedup",
            "δη_t before",
            "δη_t with it",
            "δη_r with it",
        ):
            table.add_column(col, justify="left" if col in ("scenario", "mitigation", "cause") else "right")
        for mit in pred.mitigations:
            before = next(
                r["delta_eta_t"] for r in results if (r["scenario"], r["vcpus"]) == (mit["scenario"], mit["vcpus"])
            )
            table.add_row(
                mit["scenario"],
                str(mit["vcpus"]),
                mit["name"],
                mit["cause"],
                f"{mit['speedup']:.2f}×",
                f"{before:+.1%}",
                f"{mit['delta_eta_t']:+.1%}",
                f"{mit['delta_eta_r']:+.1%}",
            )
        out.print(table)
    return 0


def _unexplained(rep: dict[str, Any]) -> str:
    """The replay's off-CPU time with no traced reason, and how it was split."""
    total = rep["unexplained_ns"] / 1e9
    parts = [
        f"{rep.get(key, 0) / 1e9:.3f} s {what}"
        for key, what in (
            ("held_off_ns", "waiting for a CPU"),
            ("blocked_untraced_ns", "blocked in untraced calls, replayed as sleeps"),
            ("unexplained_unsplit_ns", "not split, not replayed"),
        )
        if rep.get(key)
    ]
    return f"{total:.3f} s thread time" + (f": {', '.join(parts)}" if parts else "")


def _write_json(path: str, obj: Any) -> None:
    """``obj`` as indented JSON in ``path``, whole or not at all."""
    with AtomicWriter(path) as f:
        f.write(json.dumps(obj, indent=1) + "\n")


def _num(x: float | None, fmt: str = ",.0f") -> str:
    return "n/a" if x is None else format(x, fmt)


def characterization_table(c: Characterization) -> Table:
    m = c.measurement
    table = Table(
        title=f"{' '.join(m.argv)[:80]}: measured natively on {m.cpus} CPUs",
        title_justify="left",
        show_header=False,
    )
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_column("note")
    table.add_row("wall time", f"{m.wall_s:.3f} s", "")
    table.add_row("CPU time (user + sys)", f"{m.cpu_s:.3f} s", f"user {m.user_s:.3f} s, sys {m.sys_s:.3f} s")
    level = {True: "high", False: "low"}
    p90 = _num(c.parallelism_p90, ".2f")
    table.add_row(
        "workload parallelism (threads on a CPU)",
        f"{c.parallelism:.2f} of {m.cpus}",
        f"{level[c.high_parallelism]} (>= {c.thresholds.high_parallelism:.0%}); p90 {p90}; spinning counts as running",
    )
    table.add_row(
        "threads alive (average, sampled)",
        _num(c.threads, ".1f"),
        f"runnable but waiting for a CPU: {_num(c.waiting, '.2f')}",
    )
    table.add_row(
        "synchronization (blocks / thread / s)",
        f"{c.sync_per_thread_s:,.1f}",
        f"{level[c.high_sync]} (>= {1000.0 / c.thresholds.slice_ms:.1f}/s: once per {c.thresholds.slice_ms:g} ms)",
    )
    table.add_row("scalability type (DIS ch.4)", str(c.scalability_type), _TYPES[c.scalability_type])
    rates = c.to_json()["rates_per_s"]
    table.add_row(
        "voluntary context switches / s", _num(rates["voluntary_switches"]), f"{m.voluntary_switches:,} in all"
    )
    table.add_row(
        "involuntary context switches / s",
        _num(rates["involuntary_switches"]),
        f"{m.involuntary_switches:,} in all (preemption)",
    )
    table.add_row(
        "TLB-shootdown interrupts / s",
        _num(rates["tlb_shootdowns_machine"]),
        "whole machine (/proc/interrupts)" if m.tlb_shootdowns is not None else "no TLB line in /proc/interrupts",
    )
    for call in ("mmap", *MM_CALLS, "futex", "sched_yield"):
        n = m.counters.get(f"syscalls:sys_enter_{call}")
        if isinstance(n, int):
            table.add_row(f"{call} calls / s", _num(rates[call]), f"{n:,} in all")
        else:
            table.add_row(f"{call} calls / s", "n/a", str(n))
    forks = m.count("sched:sched_process_fork")
    if forks is not None:
        table.add_row("threads and processes created", f"{forks:,}", "")
    return table


_TYPES = {
    1: "high parallelism, low synchronization: scales well, also in VMs",
    2: "low parallelism, high synchronization: scales poorly, worse in VMs",
    3: "high parallelism, high synchronization: mediocre; synchronization costs more in VMs",
    4: "low parallelism, low synchronization: mediocre; can scale better in a VM than natively",
}
