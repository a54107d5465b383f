"""``vcpulab mitigate -- PROGRAM ARGS``: the application-level mitigations of TPDS §7 that need
no recompilation, tried on a real program natively and measured.

::

    a first baseline run ──► which mitigations apply (the binary's imports, the baseline's
                       │       trimming calls), and warms caches up (not measured)
                       ├─► one warm-up run of each variant (not measured)
                       └─► rounds: the baseline and every variant once each, in an order that
                           rotates every round (A B, B A, ...), until every paired speedup's
                           confidence interval is narrow enough
    table: speedup (paired: baseline and variant of the same round) with its 95 % CI,
           Δ madvise calls, Δ TLB shootdowns, Δ context switches, whether the program's output
           stayed the same; a variant that does not apply is "not applicable", not a speedup

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
from ..analysis import t_quantile
from .launch import TRIM_MADVISE, LaunchError, Measurement, run_measured
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
    # Whether it applies to this program and this baseline, and why (or why not).
    applies: Callable[[Binary, Measurement], tuple[bool, str]]

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


def _malloc_applies(b: Binary, m: Measurement) -> tuple[bool, str]:
    n = _count(m, TRIM_MADVISE, "syscalls:sys_enter_munmap")
    if n is None:
        return True, "trimming-call counts unavailable here: tried in case"
    rate = n / max(m.wall_s, 1e-9)
    what = f"{n:,} madvise(DONTNEED/FREE)+munmap calls, {rate:,.0f}/s"
    # The loader's and libc's few calls are not churn: ask for many, and often.
    if n < 1000 or rate < 100:
        return False, f"{what}: too few for heap trimming to matter (needs >= 1,000 at >= 100/s)"
    return True, f"{what}: heap trimming shoots down TLBs"


def _spin_applies(b: Binary, m: Measurement) -> tuple[bool, str]:
    spin = sorted(s for s in b.imports if s.startswith("pthread_spin_") and s.endswith("lock"))
    if spin:
        return True, f"imports {', '.join(spin)}"
    return False, "imports no pthread_spin_lock/trylock: the shim has nothing to replace"


def _omp_applies(b: Binary, m: Measurement) -> tuple[bool, str]:
    if b.uses_library("libgomp"):
        return True, "OpenMP program (libgomp)"
    return False, "does not use libgomp: OMP_WAIT_POLICY changes nothing"


def _merge_tunables(variable: str, extra: str) -> dict[str, str]:
    current = os.environ.get(variable)
    return {variable: f"{current}:{extra}" if current else extra}


def _preload(name: str) -> dict[str, str]:
    current = os.environ.get("LD_PRELOAD")
    lib = str(library(name))
    return {"LD_PRELOAD": f"{lib}:{current}" if current else lib}


APPLIES: dict[str, Callable[[Binary, Measurement], tuple[bool, str]]] = {
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
        """For one variant repeated alone: whether the CI of its mean wall time is narrow
        enough (or the runs or the budget are spent)."""
        n = len(runs.measurements)
        if n >= self.max_runs:
            return True
        if n >= 1 and spent_s >= self.budget_s and (n >= 2 or spent_s >= 2 * self.budget_s):
            return True
        if n < self.min_runs:
            return False
        hw, mean = runs.half_width(), statistics.fmean(runs.walls)
        return hw is not None and hw <= self.precision * mean

    def rounds_done(self, base: Runs, variants: Sequence[Runs], spent_s: float) -> bool:
        """For rounds of the baseline and ``variants``: whether every paired speedup's CI is
        within ``precision`` (relative), or the rounds or the budget (per variant, baseline
        included) are spent. Without variants, the baseline's own mean as :meth:`done`."""
        if not variants:
            return self.done(base, spent_s)
        n = len(base.measurements)
        budget = self.budget_s * (1 + len(variants))
        if n >= self.max_runs or (n >= 2 and spent_s >= budget) or (n >= 1 and spent_s >= 2 * budget):
            return True
        if n < self.min_runs:
            return False
        widths = [paired_log_ratio(base, v)[1] for v in variants]
        return all(w is not None and math.expm1(w) <= self.precision for w in widths)


def paired_log_ratio(base: Runs, variant: Runs) -> tuple[float, float | None]:
    """Mean of log(baseline wall / variant wall) over the rounds (run i of each is of round i),
    and its 95 % CI half-width (None with one round)."""
    if len(base.walls) != len(variant.walls):
        raise ValueError(f"{variant.name}: {len(variant.walls)} runs against the baseline's {len(base.walls)}: not paired")
    d = [math.log(b) - math.log(v) for b, v in zip(base.walls, variant.walls)]
    if len(d) < 2:
        return statistics.fmean(d), None
    return statistics.fmean(d), t_quantile(len(d)) * statistics.stdev(d) / math.sqrt(len(d))


def run_once(argv: Sequence[str], name: str, env: Mapping[str, str], cpus: int | None) -> tuple[Measurement, str]:
    """One measured run with ``env`` added: (its measurement, SHA-256 of its stdout). A run
    that fails is an error: there is nothing to compare."""
    with tempfile.TemporaryFile() as out, open(os.devnull, "rb") as devnull:
        m = run_measured(argv, env={**os.environ, **env}, cpus=cpus, stdin=devnull.fileno(), stdout=out.fileno())
        out.seek(0)
        digest = hashlib.file_digest(out, "sha256").hexdigest()
    if m.status != 0:
        raise LaunchError(f"{name}: the program failed (exit status {m.exit_code}) — nothing to compare", m.exit_code or 1)
    return m, digest


def repeat(
    name: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    policy: Policy,
    cpus: int | None,
    on_run: Callable[[str, Measurement], None] = lambda n, m: None,
) -> Runs:
    """One variant alone, as often as ``policy`` asks (``fidelity``'s untraced runs)."""
    runs = Runs(name, dict(env))
    start = time.monotonic()
    while not policy.done(runs, time.monotonic() - start):
        m, digest = run_once(argv, name, env, cpus)
        runs.measurements.append(m)
        runs.outputs.add(digest)
        on_run(name, m)
    return runs


def interleaved(
    argv: Sequence[str],
    base: Runs,
    variants: Sequence[Runs],
    policy: Policy,
    cpus: int | None,
    on_run: Callable[[str, Measurement], None] = lambda n, m: None,
) -> None:
    """Measures the baseline and ``variants`` (empty :class:`Runs` naming each variant and its
    environment) against each other without order bias: one warm-up run of each variant first
    (not kept: the first run of a program with a new environment pays for cold caches and
    library loading), then rounds in which each runs once, in an order rotated by one every
    round (A B C, B C A, C A B, ...), until :meth:`Policy.rounds_done`. A variant's run i and
    the baseline's run i are of the same round: the speedup is paired."""
    for v in variants:
        m, _ = run_once(argv, v.name, v.env, cpus)
        on_run(f"{v.name} (warm-up, not kept)", m)
    everyone = [base, *variants]
    start = time.monotonic()
    r = 0
    while not policy.rounds_done(base, variants, time.monotonic() - start):
        for j in range(len(everyone)):
            v = everyone[(r + j) % len(everyone)]
            m, digest = run_once(argv, v.name, v.env, cpus)
            v.measurements.append(m)
            v.outputs.add(digest)
            on_run(v.name, m)
        r += 1


@dataclass
class Comparison:
    """A mitigation against the baseline."""

    mitigation: Mitigation
    reason: str
    runs: Runs
    # Paired: the geometric mean over the rounds of baseline wall / variant wall. For a variant
    # that does not apply, the ratio measured anyway (noise, not a speedup).
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
    # False when its hook finds nothing to act on in this program (run only on request, --all).
    applies: bool = True

    @property
    def agrees(self) -> bool | None:
        """Whether the simulated speedup is within the measured one's interval (the intervals
        overlap); None when there is no simulated speedup or no measured interval."""
        return agrees(self.speedup_ci, self.predicted, self.predicted_ci)

    @property
    def remark(self) -> str | None:
        """When the simulation and the measurement disagree: by how much, and what the
        simulation's model of the mitigation leaves out (its catalogue entry's ``model``)."""
        if not self.applies or self.agrees is not False or self.predicted is None or self.speedup_ci is None:
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


def compare(base: Runs, mit: Mitigation, reason: str, runs: Runs, applies: bool = True) -> Comparison:
    """Speedup = exp(mean over the rounds of log(baseline wall / mitigated wall)), paired by
    round (:func:`interleaved`); its 95 % CI is the t interval of that mean (an interval of the
    ratio)."""
    mean, half = paired_log_ratio(base, runs)
    ci = None if half is None else (math.exp(mean - half), math.exp(mean + half))
    same = None if len(base.outputs) > 1 else runs.outputs == base.outputs
    return Comparison(mit, reason, runs, math.exp(mean), ci, same, applies=applies)


def applicable(binary: Binary, baseline: Measurement, everything: bool) -> list[tuple[Mitigation, str, bool]]:
    """(mitigation, why, whether it applies) for the catalogue's mitigations that apply; with
    ``everything``, the others too (tried on request, reported as not applicable)."""
    chosen = []
    for mit in CATALOGUE:
        applies, why = mit.applies(binary, baseline)
        if applies:
            chosen.append((mit, why, True))
        elif everything:
            chosen.append((mit, why, False))
    return chosen
