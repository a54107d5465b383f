"""The bridge commands of the CLI: ``characterize`` (and, as they land, ``trace``, ``predict``,
``mitigate``). Their reports go to stderr, like ``time`` and ``perf stat``: the program's own
output owns stdout."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.console import Console
from rich.table import Table

from ..analysis import Thresholds
from ..atomic import AtomicWriter
from .characterize import MM_CALLS, Characterization, characterize
from .launch import LaunchError, run_measured


def add_commands(commands: Any, positive_int: Any, duration_ms: Any) -> None:
    """Adds the bridge commands to the CLI's subcommands."""
    ch = commands.add_parser(
        "characterize",
        help="run a real program natively and measure what decides its fate in VMs",
        description="Run PROGRAM natively on this machine and report its measured wall and CPU time, "
        "workload parallelism (threads on a CPU, sampled), voluntary/involuntary context switches per "
        "second, the machine's TLB-shootdown interrupts, its mmap/munmap/madvise/mprotect/futex calls, "
        "and its scalability type (digest §1.4). The report goes to stderr; the program's stdin, stdout "
        "and stderr are its own, and vcpulab exits with its exit status.",
        epilog="example: vcpulab characterize --cpus 2 -- xz -T2 -c big.tar > big.tar.xz",
    )
    ch.add_argument("--cpus", type=positive_int, metavar="N", help="run it on N of this machine's CPUs (default: all)")
    ch.add_argument(
        "--slice",
        type=duration_ms,
        default=24.0,
        metavar="MS",
        help="time slice of the synchronization cut-off, in ms (default: 24, DIS's allocation period)",
    )
    ch.add_argument("--interval", type=duration_ms, default=10.0, metavar="MS", help="sampling interval (default: 10)")
    ch.add_argument("-o", "--output", metavar="FILE", help="also write the characterization as JSON to FILE")
    ch.add_argument("program", nargs=argparse.REMAINDER, metavar="-- PROGRAM [ARGS...]", help="the program to run")
    ch.set_defaults(func=cmd_characterize)


def _program(args: argparse.Namespace) -> list[str]:
    argv = list(args.program)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise LaunchError(
            f"{args.command}: no program given (usage: vcpulab {args.command} [OPTIONS] -- PROGRAM [ARGS...])", 2
        )
    return argv


def cmd_characterize(args: argparse.Namespace) -> int:
    argv = _program(args)
    th = Thresholds(slice_ms=args.slice)
    m = run_measured(argv, cpus=args.cpus, sample_s=args.interval / 1000.0)
    c = characterize(m, th)
    if args.output:
        with AtomicWriter(args.output) as f:
            f.write(json.dumps(c.to_json(), indent=1) + "\n")
    console = Console(stderr=True)
    console.print(characterization_table(c))
    if m.status != 0:
        ended = f"signal {-m.status}" if m.status < 0 else f"exit status {m.status}"
        console.print(f"the program ended with {ended}", style="yellow", highlight=False)
    return m.exit_code


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
    table.add_row("scalability type (digest §1.4)", str(c.scalability_type), _TYPES[c.scalability_type])
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
