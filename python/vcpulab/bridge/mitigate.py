"""``vcpulab mitigate -- PROGRAM ARGS``: the application-level mitigations of TPDS §7 that need
no recompilation, tried on a real program natively and measured.

::

    baseline runs ──► which mitigations apply (the binary's imports, the baseline's counts)
                  └─► each applicable one: the same program, with its environment changed
                      (GLIBC_TUNABLES, LD_PRELOAD, OMP_WAIT_POLICY), run as often as the
                      confidence interval needs
    table: speedup with its 95 % CI, Δ madvise calls, Δ TLB shootdowns, Δ context switches,
           and whether the program's output stayed the same

Every number is a measurement of this machine.
"""

from __future__ import annotations

import hashlib
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from .. import mitigations
from ..analysis import student_t, t_quantile
from .launch import LaunchError, Measurement, run_measured
from .native import library


@dataclass(frozen=True)
class Binary:
    """What the dynamic linker will bind for a program: the libraries it names (DT_NEEDED)
    and the symbols it imports. Empty when it is not a dynamically linked ELF file."""

    path: str
    elf: bool
    needed: frozenset[str] = frozenset()
    imports: frozenset[str] = frozenset()

    def uses_library(self, stem: str) -> bool:
        return any(n == stem or n.startswith(stem + ".so") for n in self.needed)


def inspect_binary(path: str) -> Binary:
    from elftools.common.exceptions import ELFError
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile

    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            needed: set[str] = set()
            imports: set[str] = set()
            for section in elf.iter_sections():
                if isinstance(section, DynamicSection):
                    needed.update(str(tag.needed) for tag in section.iter_tags() if tag.entry.d_tag == "DT_NEEDED")  # type: ignore[attr-defined]
            dynsym = elf.get_section_by_name(".dynsym")
            if dynsym is not None:
                for sym in dynsym.iter_symbols():  # type: ignore[attr-defined]
                    if sym["st_shndx"] == "SHN_UNDEF" and sym.name:
                        imports.add(sym.name.split("@")[0])
            return Binary(path, True, frozenset(needed), frozenset(imports))
    except (ELFError, OSError):
        return Binary(path, False)


@dataclass(frozen=True)
class Mitigation:
    """A mitigation of the catalogue (:data:`vcpulab.mitigations.CATALOGUE`) that a real
    program can have through its environment, and when ``mitigate`` tries it."""

    entry: mitigations.Mitigation
    # Why it applies to this program and this baseline, or None.
    applies: Callable[[Binary, Measurement], str | None]

    @property
    def id(self) -> str:
        return self.entry.id

    @property
    def name(self) -> str:
        return self.entry.id

    @property
    def cause(self) -> str:
        return self.entry.cause

    @property
    def what(self) -> str:
        return self.entry.what

    @property
    def simulated(self) -> tuple[str, ...]:
        """The same change to a replayed trace (spec overrides of workload ``app``), empty when
        the simulator does not model it."""
        return self.entry.replay_overrides("app") or ()

    def env(self) -> dict[str, str]:
        """The environment changes (given where the native libraries are)."""
        out: dict[str, str] = {}
        for change in self.entry.environment:
            if change.action == "append":
                out.update(_merge_tunables(change.variable, change.value))
            elif change.action == "preload":
                out.update(_preload(change.value))
            else:
                out[change.variable] = change.value
        return out


def _count(m: Measurement, *events: str) -> int | None:
    counts = [m.count(e) for e in events]
    return None if any(c is None for c in counts) else sum(c or 0 for c in counts)


def _malloc_applies(b: Binary, m: Measurement) -> str | None:
    n = _count(m, "syscalls:sys_enter_madvise", "syscalls:sys_enter_munmap")
    if n is None:
        return "madvise/munmap counts unavailable here: tried in case"
    rate = n / max(m.wall_s, 1e-9)
    # The loader's and libc's few calls are not churn: ask for many, and often.
    if n < 1000 or rate < 100:
        return None
    return f"{rate:,.0f} madvise+munmap calls/s: heap trimming shoots down TLBs"


def _spin_applies(b: Binary, m: Measurement) -> str | None:
    spin = sorted(s for s in b.imports if s.startswith("pthread_spin_") and s.endswith("lock"))
    return f"imports {', '.join(spin)}" if spin else None


def _omp_applies(b: Binary, m: Measurement) -> str | None:
    return "OpenMP program (libgomp)" if b.uses_library("libgomp") else None


def _merge_tunables(variable: str, extra: str) -> dict[str, str]:
    current = os.environ.get(variable)
    return {variable: f"{current}:{extra}" if current else extra}


def _preload(name: str) -> dict[str, str]:
    current = os.environ.get("LD_PRELOAD")
    lib = str(library(name))
    return {"LD_PRELOAD": f"{lib}:{current}" if current else lib}


APPLIES: dict[str, Callable[[Binary, Measurement], str | None]] = {
    "malloc-trim": _malloc_applies,
    "spin-then-block": _spin_applies,
    "omp-passive": _omp_applies,
}
"""When ``mitigate`` tries each mitigation of the catalogue that has an environment transform."""

CATALOGUE: tuple[Mitigation, ...] = tuple(
    Mitigation(m, APPLIES[m.id]) for m in mitigations.CATALOGUE if m.environment and m.id in APPLIES
)


@dataclass
class Runs:
    """The repeated runs of one variant (the baseline or a mitigation)."""

    name: str
    env: dict[str, str]
    measurements: list[Measurement] = field(default_factory=list)
    outputs: set[str] = field(default_factory=set)  # SHA-256 of each run's stdout

    @property
    def walls(self) -> list[float]:
        return [m.wall_s for m in self.measurements]

    def mean(self, value: Callable[[Measurement], float | int | None]) -> float | None:
        xs = [value(m) for m in self.measurements]
        if not xs or any(x is None for x in xs):
            return None
        return statistics.fmean(float(x) for x in xs if x is not None)

    def half_width(self) -> float | None:
        """Half-width of the 95 % confidence interval of the mean wall time."""
        n = len(self.measurements)
        if n < 2:
            return None
        return t_quantile(n) * statistics.stdev(self.walls) / math.sqrt(n)


@dataclass(frozen=True)
class Policy:
    """How often to repeat a variant: at least ``min_runs``; then until the 95 % CI of the
    mean wall time is within ``precision`` of the mean, ``max_runs`` or ``budget_s``."""

    min_runs: int = 3
    max_runs: int = 10
    precision: float = 0.05
    budget_s: float = 60.0

    @classmethod
    def fixed(cls, runs: int) -> Policy:
        """Exactly ``runs`` runs."""
        return cls(min_runs=runs, max_runs=runs, precision=0.0, budget_s=math.inf)

    def done(self, runs: Runs, spent_s: float) -> bool:
        n = len(runs.measurements)
        if n >= self.max_runs:
            return True
        if n >= 1 and spent_s >= self.budget_s and (n >= 2 or spent_s >= 2 * self.budget_s):
            return True
        if n < self.min_runs:
            return False
        hw, mean = runs.half_width(), statistics.fmean(runs.walls)
        return hw is not None and hw <= self.precision * mean


def repeat(
    name: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    policy: Policy,
    cpus: int | None,
    on_run: Callable[[str, Measurement], None] = lambda n, m: None,
) -> Runs:
    runs = Runs(name, dict(env))
    full_env = {**os.environ, **env}
    start = time.monotonic()
    while not policy.done(runs, time.monotonic() - start):
        with tempfile.TemporaryFile() as out, open(os.devnull, "rb") as devnull:
            m = run_measured(argv, env=full_env, cpus=cpus, stdin=devnull.fileno(), stdout=out.fileno())
            out.seek(0)
            digest = hashlib.file_digest(out, "sha256").hexdigest()
        if m.status != 0:
            raise LaunchError(
                f"{name}: the program failed (exit status {m.exit_code}) — nothing to compare", m.exit_code or 1
            )
        runs.measurements.append(m)
        runs.outputs.add(digest)
        on_run(name, m)
    return runs


@dataclass
class Comparison:
    """A mitigation against the baseline."""

    mitigation: Mitigation
    reason: str
    runs: Runs
    speedup: float
    speedup_ci: tuple[float, float] | None
    # Whether the program's stdout was the same as the baseline's (None: the baseline's own
    # runs printed different things, e.g. timings, so there is nothing to compare).
    same_output: bool | None
    # The simulator's speedup for the same change, replaying a trace of the baseline natively
    # (None: not modelled, or not predicted).
    predicted: float | None = None
    # Why ``predicted`` is None: "not modelled", "not asked for (--no-predict)", or the reason the
    # baseline's trace could not be replayed.
    not_predicted: str | None = None
    # The interval of ``predicted`` (None: one deterministic replay, a point).
    predicted_ci: tuple[float, float] | None = None

    @property
    def agrees(self) -> bool | None:
        """Whether the simulated speedup is within the measured one's interval (the intervals
        overlap); None when there is no simulated speedup or no measured interval."""
        return agrees(self.speedup_ci, self.predicted, self.predicted_ci)

    @property
    def remark(self) -> str | None:
        """When the simulation and the measurement disagree: by how much, and what the
        simulation's model of the mitigation leaves out (its catalogue entry's ``model``)."""
        if self.agrees is not False or self.predicted is None or self.speedup_ci is None:
            return None
        lo, hi = self.speedup_ci
        side = "more" if self.predicted < lo else "less"
        return (
            f"{self.mitigation.name}: measured {self.speedup:.2f}× [{lo:.2f}, {hi:.2f}] but simulated "
            f"{self.predicted:.2f}×, outside the measured 95 % CI: the program gains {side} here than in the "
            f"simulation, which does not model everything: {self.mitigation.entry.model}"
        )


def agrees(
    measured_ci: tuple[float, float] | None,
    simulated: float | None,
    simulated_ci: tuple[float, float] | None = None,
) -> bool | None:
    """Whether a simulated value (or its interval ``simulated_ci``) overlaps the measured
    interval ``measured_ci``; None when either is missing (one run has no interval)."""
    if measured_ci is None or simulated is None:
        return None
    lo, hi = simulated_ci if simulated_ci is not None else (simulated, simulated)
    return lo <= measured_ci[1] and hi >= measured_ci[0]


def compare(base: Runs, mit: Mitigation, reason: str, runs: Runs) -> Comparison:
    """Speedup = mean baseline wall / mean mitigated wall; its 95 % CI from Welch's interval
    on the difference of the mean log wall times (so the interval is of the ratio)."""
    a = [math.log(x) for x in base.walls]
    b = [math.log(x) for x in runs.walls]
    speedup = statistics.fmean(base.walls) / statistics.fmean(runs.walls)
    ci = None
    if len(a) >= 2 and len(b) >= 2:
        va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
        diff = statistics.fmean(a) - statistics.fmean(b)
        se = math.sqrt(va + vb)
        if se == 0:
            ci = (math.exp(diff), math.exp(diff))
        else:
            dof = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
            t = student_t(dof)
            ci = (math.exp(diff - t * se), math.exp(diff + t * se))
    same = None if len(base.outputs) > 1 else runs.outputs == base.outputs
    return Comparison(mit, reason, runs, speedup, ci, same)


def applicable(binary: Binary, baseline: Measurement, everything: bool) -> list[tuple[Mitigation, str]]:
    """The catalogue's mitigations that apply (all of them with ``everything``)."""
    chosen = []
    for mit in CATALOGUE:
        reason = mit.applies(binary, baseline)
        if reason is not None:
            chosen.append((mit, reason))
        elif everything:
            chosen.append((mit, "tried on request (--all)"))
    return chosen
