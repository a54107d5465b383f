"""``vcpulab oversubscription``: the OC2 effect of TPDS §6 (Fig. 10) on this machine's own cores.
More threads than CPUs, synchronised by a user-level spin barrier and by its blocking
replacement (``pthread_barrier_wait``): measured with ``tracer/workloads/spin_barrier``, and
predicted by the simulator's ``spinbarrier`` and ``barrier`` workloads with the same threads,
CPUs, rounds and work, on a native kernel with this machine's rules (:mod:`.machine`).

A spinner holds its CPU until the scheduler preempts it, so each round costs about a time
slice instead of the work: the slice is what the prediction needs to share with the machine.
Linux ≥ 6.6 (EEVDF) gives every task a base slice of 0.75 ms × (1 + log2 CPUs) (``sysctl_
sched_base_slice`` scaled like the old CFS tunables); the simulator's CFS-style kernel gets the
same slice as its minimum granularity and period.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import tempfile
from dataclasses import dataclass
from typing import Any

from . import machine
from .launch import BUSY_HELD_OFF_SHARE, LaunchError, run_measured
from .native import program
from .predict import run_cells

@dataclass
class Comparison:
    threads: int
    cpus: int
    rounds: int
    work_us: float
    slice_ms: float | None  # EEVDF's base slice of this kernel (None: a CFS kernel)
    measured: dict[str, list[float]]  # mode → wall times
    simulated: dict[str, float]  # mode → simulated time
    held_off_share: float  # mean over the measured runs: how long other load held them off (launch.py)

    @property
    def wall_time_comparable(self) -> bool:
        return self.held_off_share <= BUSY_HELD_OFF_SHARE

    def ratio(self, table: dict[str, Any]) -> float:
        spin, block = table["spin"], table["pthread"]
        if isinstance(spin, list):
            spin, block = statistics.fmean(spin), statistics.fmean(block)
        return float(spin) / float(block)

    def to_json(self) -> dict[str, Any]:
        return {
            "threads": self.threads,
            "cpus": self.cpus,
            "rounds": self.rounds,
            "work_us": self.work_us,
            "slice_ms": self.slice_ms,
            "measured_s": self.measured,
            "simulated_s": self.simulated,
            "measured_ratio": self.ratio(self.measured),
            "simulated_ratio": self.ratio(self.simulated),
            "held_off_share": self.held_off_share,
            "wall_time_comparable": self.wall_time_comparable,
        }


def simulate(threads: int, cpus: int, rounds: int, work_us: float, kernel: machine.Machine) -> dict[str, float]:
    text = (
        '[experiment]\nworkloads = ["spinbarrier", "barrier"]\nscenarios = ["native"]\n'
        f"vcpus = [{cpus}]\nthreads = {threads}\nseeds = [1]\n"
    )
    sets = kernel.overrides()
    for w in ("spinbarrier", "barrier"):
        sets += [
            f"workloads.{w}.params.steps={rounds}",
            f'workloads.{w}.params.step_lo="{work_us}us"',
            f'workloads.{w}.params.step_hi="{work_us}us"',
        ]
    return {
        "spin" if r["workload"] == "spinbarrier" else "pthread": float(r["t_native_s"]) for r in run_cells(text, sets)
    }


def measure(argv: list[str], cpus: int) -> tuple[float, float]:
    """One run of a pathology workload on ``cpus`` CPUs: the wall time it reports (its own
    timing excludes its start-up calibration), and the share of its runnable time other
    processes held it off its CPUs."""
    with tempfile.TemporaryFile() as out:
        m = run_measured(argv, cpus=cpus, stdout=out.fileno())
        out.seek(0)
        text = out.read().decode(errors="replace")
    if m.status != 0:
        raise LaunchError(f"{' '.join(argv)} failed (exit status {m.exit_code})", m.exit_code or 1)
    return float(json.loads(text.strip().splitlines()[-1])["wall_s"]), m.held_off_share


def compare(threads: int, cpus: int, rounds: int, work_us: float, runs: int) -> Comparison:
    exe = str(program("spin_barrier"))
    measured: dict[str, list[float]] = {}
    held_off: list[float] = []
    for mode in ("spin", "pthread"):
        argv = [exe, "--threads", str(threads), "--rounds", str(rounds), "--work-us", str(work_us), "--barrier", mode]
        runs_of_mode = [measure(argv, cpus) for _ in range(runs)]
        measured[mode] = [wall for wall, _ in runs_of_mode]
        held_off += [share for _, share in runs_of_mode]
    kernel = machine.Machine(platform.release(), cpus, platform.libc_ver()[1] or None)
    simulated = simulate(threads, cpus, rounds, work_us, kernel)
    return Comparison(threads, cpus, rounds, work_us, kernel.slice_ms, measured, simulated, statistics.fmean(held_off))


def available_cpus() -> int:
    return len(os.sched_getaffinity(0))
