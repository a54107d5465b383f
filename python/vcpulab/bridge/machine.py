"""The kernel and C library of the machine a program was measured or traced on, as simulator
settings.

A native replay held against that machine's measurements (``predict``'s first line, ``fidelity``,
``mitigate``'s simulated column, ``oversubscription``) has to follow that machine's kernel, not
the Linux 4.15 of the default preset, where the two differ in a rule the simulator models:

| Linux | rule | setting |
| --- | --- | --- |
| ≥ 6.4 | anonymous page faults take their VMA's lock, not ``mmap_lock`` (``CONFIG_PER_VMA_LOCK``, arch/x86/mm/fault.c ``lock_vma_under_rcu``) | ``host.mm_locks = "per_vma_faults"`` |
| ≥ 6.17 | so does ``madvise(MADV_DONTNEED/FREE)`` within one VMA (mm/madvise.c ``get_lock_mode``) | ``host.mm_locks = "per_vma"`` |
| ≥ 6.6 | EEVDF: every task runs a base slice of 0.75 ms × (1 + ilog2(min(CPUs, 8))) (kernel/sched/fair.c ``sysctl_sched_base_slice``, scaled as the CFS tunables were) | ``host.sched_latency`` and ``host.min_granularity`` = that slice |

and its C library's malloc where the model follows glibc's version:

| glibc | rule | setting |
| --- | --- | --- |
| < 2.22 | a thread heap trims on every free that leaves a page above the pad | ``host.arena_trim = "always"`` (else ``"threshold"``) |
| ≥ 2.26 | a thread's first ``malloc`` allocates its tcache first, which creates its arena: 576 bytes (``char`` counts), 640 from 2.30 (``uint16_t`` counts) | ``host.tcache_bytes`` (0 before 2.26) |

The simulator's scheduler stays CFS (EEVDF's lag-based placement and virtual deadlines are not
modelled); it is given EEVDF's slice as its period and granularity. The costs stay the default
preset's. The VM scenarios of ``predict`` keep their preset's kernels: they predict the testbed,
not the traced machine.

The trace records both (format 4: ``uname -r`` and ``gnu_get_libc_version()`` in
PROCESS_START); an older trace has neither, and its native replay follows the default preset.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

BASE_SLICE_MS = 0.75  # EEVDF sysctl_sched_base_slice (kernel/sched/fair.c, v6.6), before scaling
PER_VMA_FAULTS = (6, 4)  # commit 0bff0aaea03e "x86/mm: try VMA lock-based page fault handling first"
PER_VMA_MADVISE = (6, 17)  # "mm: use per_vma lock for MADV_DONTNEED" (mm/madvise.c MADVISE_VMA_READ_LOCK)
EEVDF = (6, 6)  # commit 147f3efaa241 "sched/fair: Implement an EEVDF-like scheduling policy"
GLIBC_TRIM_THRESHOLD = (2, 22)  # commit c26efef979 (BZ #17195): heap_trim applies M_TRIM_THRESHOLD
GLIBC_TCACHE = (2, 26)  # NEWS 2.26: "A per-thread cache has been added to malloc"
GLIBC_U16_COUNTS = (2, 30)  # tcache counts uint16_t (640 bytes); the references found say 2.30 or 2.31


def base_slice_ms(cpus: int) -> float:
    """EEVDF's base slice on ``cpus`` CPUs (the "log" scaling of the scheduler tunables)."""
    return BASE_SLICE_MS * (1 + math.floor(math.log2(max(1, min(cpus, 8)))))


def version(release: str | None) -> tuple[int, int] | None:
    """(major, minor) of a kernel release such as ``6.18.44-fc``; None when it is not one."""
    m = re.match(r"(\d+)\.(\d+)", release or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


@dataclass(frozen=True)
class Machine:
    """The rules of the kernel ``release`` and of the C library ``libc`` (glibc's version) that
    the simulator models, on ``cpus`` CPUs."""

    release: str | None
    cpus: int
    libc: str | None = None

    @property
    def known(self) -> bool:
        return version(self.release) is not None

    @property
    def mm_locks(self) -> str:
        v = version(self.release)
        if v is None or v < PER_VMA_FAULTS:
            return "mmap_sem"
        return "per_vma" if v >= PER_VMA_MADVISE else "per_vma_faults"

    @property
    def slice_ms(self) -> float | None:
        """EEVDF's base slice, or None for a CFS kernel (the simulator's own tunables)."""
        v = version(self.release)
        return base_slice_ms(self.cpus) if v is not None and v >= EEVDF else None

    @property
    def tcache_bytes(self) -> int | None:
        """glibc's ``tcache_perthread_struct`` (0: none), or None for an unknown C library."""
        v = version(self.libc)
        if v is None:
            return None
        return 0 if v < GLIBC_TCACHE else 576 if v < GLIBC_U16_COUNTS else 640

    @property
    def arena_trim(self) -> str | None:
        v = version(self.libc)
        return None if v is None else "always" if v < GLIBC_TRIM_THRESHOLD else "threshold"

    def overrides(self) -> list[str]:
        """The spec overrides (``--set``) that make the simulated host this kernel and C library."""
        sets = [f'host.mm_locks="{self.mm_locks}"'] if self.known else []
        if self.slice_ms is not None:
            sets += [f'host.sched_latency="{self.slice_ms}ms"', f'host.min_granularity="{self.slice_ms}ms"']
        if self.tcache_bytes is not None:
            sets += [f"host.tcache_bytes={self.tcache_bytes}", f'host.arena_trim="{self.arena_trim}"']
        return sets

    def describe(self) -> str:
        """One phrase for the output: which rules the native replay follows."""
        if not self.known:
            return "traced kernel not recorded (trace format < 4): the default preset's Linux 4.15 rules"
        locks = {
            "mmap_sem": "faults and madvise under mmap_lock",
            "per_vma_faults": "page faults under per-VMA locks",
            "per_vma": "page faults and madvise under per-VMA locks",
        }[self.mm_locks]
        sched = f", EEVDF slice {self.slice_ms:g} ms" if self.slice_ms is not None else ", CFS"
        libc = f"; glibc {self.libc}'s malloc" if self.tcache_bytes is not None else ""
        return f"Linux {self.release}'s rules: {locks}{sched}{libc}"


def traced(replay: dict) -> Machine:
    """The kernel and C library a trace was recorded on (``trace_info(...)["replay"]``)."""
    return Machine(replay.get("kernel"), int(replay.get("cpus") or 1), replay.get("libc"))
