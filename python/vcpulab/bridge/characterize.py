"""``vcpulab characterize -- PROGRAM ARGS``: a real program, run natively on this machine,
described by the features that decide how it fares in VMs (DIS ch.4; TPDS §2, §6): workload
parallelism, synchronization frequency and the scalability type they give, and the rates of
the events that cost most once virtualized (context switches, TLB shootdowns, memory-map
calls, futex calls). Everything is measured here; nothing is simulated.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from ..analysis import Thresholds, scalability_type
from .launch import Measurement

# Memory-management calls that can shoot down other CPUs' TLB entries (TPDS §6).
MM_CALLS = ("munmap", "madvise", "mprotect")


@dataclass
class Characterization:
    """The DIS ch.4 features of a measured run, and the rates behind them."""

    measurement: Measurement
    parallelism: float  # average threads on a CPU or held off one by other load: (CPU + held off) / wall
    parallelism_p90: float | None  # 90th percentile over the sampling intervals
    waiting: float | None  # average threads runnable but waiting for a CPU (sampled)
    threads: float | None  # average threads alive (sampled)
    sync_per_thread_s: float  # voluntary context switches per thread per second
    scalability_type: int
    high_parallelism: bool
    high_sync: bool
    thresholds: Thresholds

    def rate(self, n: int | None) -> float | None:
        return None if n is None else n / max(self.measurement.wall_s, 1e-9)

    def to_json(self) -> dict[str, Any]:
        m = self.measurement
        return {
            "measurement": m.to_json(),
            "parallelism": self.parallelism,
            "parallelism_p90": self.parallelism_p90,
            "waiting_threads": self.waiting,
            "threads": self.threads,
            "high_parallelism": self.high_parallelism,
            "sync_per_thread_s": self.sync_per_thread_s,
            "sync_threshold_per_s": 1000.0 / self.thresholds.slice_ms,
            "high_sync": self.high_sync,
            "scalability_type": self.scalability_type,
            "rates_per_s": {
                "voluntary_switches": self.rate(m.voluntary_switches),
                "involuntary_switches": self.rate(m.involuntary_switches),
                "tlb_shootdowns_machine": self.rate(m.tlb_shootdowns),
                **{
                    call: self.rate(m.count(f"syscalls:sys_enter_{call}"))
                    for call in ("mmap", *MM_CALLS, "futex", "sched_yield")
                },
            },
        }


def characterize(m: Measurement, th: Thresholds | None = None) -> Characterization:
    """The features of measured run ``m`` with the cut-offs ``th`` (75 % of the CPUs; one
    block per time slice)."""
    th = th or Thresholds()
    wall = max(m.wall_s, 1e-9)
    # The threads on a CPU, plus those other processes held off the CPUs the program was
    # given: on an idle machine this is CPU time / wall time; on a busy one it is what the
    # program would have run, not what the other load left it.
    parallelism = (m.cpu_s + m.held_off_s) / wall
    # Per interval, at most the CPUs given: the threads' run times are read one after the
    # other, so an interval's Δ run time / Δt can exceed them by the reading's jitter (a p90 of
    # 2.13 on 2 CPUs was reported).
    running = [min(float(m.cpus), s.running + s.held_off(m.cpus)) for s in m.samples]
    threads = statistics.fmean(s.threads for s in m.samples) if m.samples else None
    # Blocks per thread per second: the threads alive on average share the voluntary switches.
    sync = m.voluntary_switches / wall / max(threads or 1.0, 1.0)
    kind = scalability_type(parallelism, sync, m.cpus, th)
    assert kind is not None
    return Characterization(
        measurement=m,
        parallelism=parallelism,
        parallelism_p90=_quantile(running, 0.9),
        waiting=statistics.fmean(s.waiting for s in m.samples) if m.samples else None,
        threads=threads,
        sync_per_thread_s=sync,
        scalability_type=kind,
        high_parallelism=parallelism >= th.high_parallelism * m.cpus,
        high_sync=sync >= 1000.0 / th.slice_ms,
        thresholds=th,
    )


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
