"""Profiles checked against traces (issue 50, item 5; docs/profiles.md "Profiles against traces").

For each traced program and each thread count N it was traced at, two native cells of the
simulator, N threads on N CPUs of the default platform: the built-in profile (``parsec.dedup``)
and the trace's replay (``traced.parsec.dedup``). They are compared on the rates that decide
virtualization overheads; a rate more than :data:`RATE_TOLERANCE` off, or a median blocking
time more than :data:`MEDIAN_FACTOR` × off, is flagged. The real program's own counts (untraced
and traced, on the recording machine's CPUs) come from the manifest.

The profile models the native input and the trace a reduced one, so per-second rates and wait
durations differ with the input's scale. The growth of the counts with the thread count does
not ([Row.scale_free_flags]): the count at N over the count at the *base* row (4 threads, or the
first parallel row), since a barrier program keeps its number of episodes when its grid
shrinks and a pipeline's items all shrink alike. The growth of the synchronisation waits is
set beside the real program's own, twice: the condition-variable waits the tracer recorded in
it (``trace_info``), and its voluntary context switches, untraced, from the manifest. Where
wake-ups land is compared only between cells of like parallelism: a woken thread goes back to
its previous CPU when that CPU is idle, so the remote share follows the number of idle CPUs,
and with it the input's serial share.

    vcpulab workloads compare [--markdown docs/profiles.md] [--json out.json] [-j 2] [NAME ...]
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..bridge.predict import unmap_calls
from .manifest import Program, catalogue, resolve

RATE_TOLERANCE = 0.25
MEDIAN_FACTOR = 2.0
BEGIN = "<!-- profile-vs-trace:begin (vcpulab workloads compare --markdown docs/profiles.md) -->"
END = "<!-- profile-vs-trace:end -->"


@dataclass(frozen=True)
class Rates:
    """One native cell's rates (per second of its simulated wall time)."""

    wall_s: float
    parallelism: float
    blocks_per_s: float | None
    block_p50_us: float | None
    block_p90_us: float | None
    wakeups_per_s: float | None
    remote_share: float | None
    futex_per_s: float | None
    unmaps_per_s: float
    sync_blocks: float | None = None
    """Blocking waits on synchronisation objects in the whole run (``blocks_sync``): the
    growth's count, without the sleeps and memory waits of ``blocks``."""
    unmaps: float = 0.0
    """Unmapping calls (TLB shootdowns and local-only flushes) in the whole run."""


def _get(m: Mapping[str, Any], key: str) -> float | None:
    v = m.get(key)
    return float(v) if isinstance(v, (int, float)) else None


def rates(result: Mapping[str, Any]) -> Rates:
    m = result.get("metrics", {})
    wall = float(result["t_native_s"])

    def per_s(x: float | None) -> float | None:
        return None if x is None or wall <= 0 else x / wall

    wakeups = _get(m, "wakeups")
    remote = _get(m, "wakeups_remote")
    unmaps = unmap_calls(m)
    return Rates(
        wall_s=wall,
        parallelism=float(m.get("parallelism", 0.0)),
        blocks_per_s=per_s(_get(m, "blocks")),
        block_p50_us=_get(m, "block_p50_us"),
        block_p90_us=_get(m, "block_p90_us"),
        wakeups_per_s=per_s(wakeups),
        remote_share=(remote / wakeups) if wakeups and remote is not None else None,
        futex_per_s=per_s(_get(m, "futex_calls")),
        unmaps_per_s=unmaps / wall if wall > 0 else 0.0,
        sync_blocks=_get(m, "blocks_sync"),
        unmaps=unmaps,
    )


def native_spec(workloads: Sequence[str], threads: Sequence[int], seed: int = 1) -> dict[str, Any]:
    """Native cells of ``workloads`` at each thread count, as many CPUs as threads."""
    return {
        "experiment": {"workloads": list(workloads), "scenarios": ["native"], "vcpus": list(threads), "seeds": [seed]}
    }


def _simulate(spec: dict[str, Any]) -> list[dict[str, Any]]:
    from .. import simulate

    return simulate(spec)


@dataclass(frozen=True)
class Row:
    program: str
    threads: int
    profile: Rates
    trace: Rates
    measured: Mapping[str, Any]
    """The manifest entry (untraced and traced counts of the real program)."""
    base: tuple[Rates, Rates, Mapping[str, Any]] | None = None
    """The profile's and the trace's cells and the manifest entry at the program's base thread
    count (:func:`base_threads`), for the growth of the counts; None up to the base row."""

    def flags(self) -> list[str]:
        out = []
        for label, p, t in (
            ("blocks/s", self.profile.blocks_per_s, self.trace.blocks_per_s),
            ("wake-ups/s", self.profile.wakeups_per_s, self.trace.wakeups_per_s),
            ("futex/s", self.profile.futex_per_s, self.trace.futex_per_s),
            ("unmaps/s", self.profile.unmaps_per_s, self.trace.unmaps_per_s),
            ("parallelism", self.profile.parallelism, self.trace.parallelism),
        ):
            if off(p, t, RATE_TOLERANCE):
                out.append(label)
        p50p, p50t = self.profile.block_p50_us, self.trace.block_p50_us
        if p50p and p50t and max(p50p / p50t, p50t / p50p) > MEDIAN_FACTOR:
            out.append("block p50")
        return out

    def growth(self) -> dict[str, tuple[float | None, float | None]]:
        """How the counts grow from the base row: ``blocks`` and ``unmaps`` as (profile, trace),
        ``real blocks`` as (recorded condvar waits, untraced context switches)."""
        if self.base is None:
            return {}
        bp, bt, bm = self.base
        p, t = self.profile, self.trace
        return {
            "blocks": (_grown(p.sync_blocks, bp.sync_blocks), _grown(t.sync_blocks, bt.sync_blocks)),
            "real blocks": (
                _grown(_field(self.measured, "recorded", "cond_waits"), _field(bm, "recorded", "cond_waits")),
                _grown(_field(self.measured, "untraced", "vol_ctxsw"), _field(bm, "untraced", "vol_ctxsw")),
            ),
            "unmaps": (_grown(p.unmaps, bp.unmaps), _grown(t.unmaps, bt.unmaps)),
        }

    def scale_free_flags(self) -> list[str]:
        """The differences the input's scale cannot explain:
        - the profile's waits growing more than :data:`RATE_TOLERANCE` off the real program's:
          its condition-variable waits as recorded, else its voluntary context switches
          untraced, else the trace's replay; or the profile making too few waits at the base
          row to grow from (fewer than :data:`MIN_COUNT`) where the real program makes enough;
        - its unmapping calls growing more than that off the trace's;
        - where wake-ups land, more than :data:`SHARE_POINTS` apart, between cells of like
          parallelism (within :data:`RATE_TOLERANCE`) with at least :data:`MIN_COUNT` wake-ups."""
        out = []
        p, t = self.profile, self.trace
        rp, rt = p.remote_share, t.remote_share
        like = not off(p.parallelism, t.parallelism, RATE_TOLERANCE)
        counted = min((p.wakeups_per_s or 0.0) * p.wall_s, (t.wakeups_per_s or 0.0) * t.wall_s) >= MIN_COUNT
        if rp is not None and rt is not None and like and counted and abs(rp - rt) > SHARE_POINTS:
            out.append("remote wake-ups")
        g = self.growth()
        if g:
            truth = next((x for x in (*g["real blocks"], g["blocks"][1]) if x is not None), None)
            for label, (gp, gt) in (("waits", (g["blocks"][0], truth)), ("unmaps", g["unmaps"])):
                if gp is not None and gt is not None and abs(gp / gt - 1.0) > RATE_TOLERANCE:
                    out.append(f"{label} growth")
            if g["blocks"][0] is None and any(x is not None for x in g["real blocks"]):
                out.append("waits growth")  # the real program synchronises; the profile hardly
        return out


SHARE_POINTS = 0.25
"""Two shares of remote wake-ups this many points apart are flagged."""
MIN_COUNT = 20.0
"""A growth is measured only from a base of at least this many events in the run: below, a
handful of waits (thread creation and join) make any ratio noise."""


def _grown(count: float | None, base: float | None) -> float | None:
    if count is None or base is None or base < MIN_COUNT:
        return None
    return count / base


def _field(entry: Mapping[str, Any], run: str, key: str) -> float | None:
    """``entry[run][key]`` of a manifest entry, as a number (None if absent)."""
    return _get(entry.get(run) or {}, key)


def recorded(path: Path) -> dict[str, float]:
    """What the tracer recorded in the real program: its condition-variable waits (each matched
    with the wake-up that ended it), the structure the profile's waits model."""
    from .._vcpulab import trace_info

    return {"cond_waits": float(json.loads(trace_info(str(path), None))["replay"]["wakeups_matched"])}


BASE_THREADS = 4


def base_threads(counts: Sequence[int]) -> int | None:
    """The row the counts' growth is measured from: 4 threads where traced, else the first
    parallel row (1 thread has no synchronisation to grow from)."""
    parallel = sorted(n for n in counts if n > 1)
    return BASE_THREADS if BASE_THREADS in parallel else (parallel[0] if parallel else None)


def off(p: float | None, t: float | None, tol: float) -> bool:
    """Whether the profile's ``p`` is more than ``tol`` away from the trace's ``t`` (relative to
    the trace; two rates below 1 per second are equal)."""
    if p is None or t is None:
        return False
    if max(abs(p), abs(t)) < 1.0:
        return False
    return t == 0 or abs(p / t - 1.0) > tol


def compare(programs: Sequence[Program], jobs: int = 2) -> list[Row]:
    """The rows of ``programs`` (those with traces): each program's profile and trace, natively
    at every thread count it was traced at."""
    chosen = [p for p in programs if p.traces]
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = list(pool.map(_program_cells, chosen))
    rows = []
    for program, (cells, counts) in zip(chosen, results, strict=True):
        by = {(r["workload"], int(r["threads"])): r for r in cells}
        base: tuple[Rates, Rates, Mapping[str, Any]] | None = None
        first = base_threads(program.thread_counts)
        for t in sorted(program.traces, key=lambda t: t.threads):
            prof, trace = by.get((program.profile, t.threads)), by.get((program.workload, t.threads))
            if prof is None or trace is None:
                continue
            entry = {**t.entry, "recorded": counts[t.threads]}
            cell = (rates(prof), rates(trace))
            rows.append(Row(program.name, t.threads, *cell, entry, base))
            if t.threads == first:
                base = (*cell, entry)
    return rows


def _program_cells(program: Program) -> tuple[list[dict[str, Any]], dict[int, dict[str, float]]]:
    """In a worker: the program's native cells (profile and trace at each traced thread count)
    and what the tracer recorded in each of its traces."""
    cells = _simulate(native_spec([program.profile, program.workload], program.thread_counts))
    return cells, {t.threads: recorded(program.directory / t.file) for t in program.traces}


SCALING_BEGIN = "<!-- trace-scaling:begin (vcpulab workloads compare --scaling docs/real-programs.md) -->"
SCALING_END = "<!-- trace-scaling:end -->"


def scaling_markdown(programs: Sequence[Program], low: int = 2, high: int = 64, jobs: int = 2) -> str:
    """The replay of each program's ``low``-thread trace on ``low`` CPUs against its
    ``high``-thread trace on ``high`` CPUs: both were recorded on the same few CPUs, so the
    second's per-thread CPU times were measured while many threads shared each CPU. For a
    program whose per-thread work is fixed by its input (a static partition), total CPU time
    should not change and the run time should fall by about high/low times its parallel share."""
    specs = [native_spec([p.workload], [t]) for p in programs for t in (low, high)]
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = [cells[0] for cells in pool.map(_simulate, specs)]
    lines = [
        SCALING_BEGIN,
        "",
        f"| program | CPU s, {low} threads / {high} threads | CPU ratio | run time s, {low} on {low} CPUs / {high} on {high} CPUs | speedup | parallelism, {low} / {high} |",  # noqa: E501
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for i, program in enumerate(programs):
        a, b = results[2 * i], results[2 * i + 1]
        ca, cb = float(a["c_native_ns"]) / 1e9, float(b["c_native_ns"]) / 1e9
        ta, tb = float(a["t_native_s"]), float(b["t_native_s"])
        pa, pb = a.get("metrics", {}).get("parallelism", 0.0), b.get("metrics", {}).get("parallelism", 0.0)
        lines.append(
            f"| `{program.workload}` | {ca:.3f} / {cb:.3f} | {cb / ca:.2f} | {ta:.4f} / {tb:.4f} | {ta / tb:.1f}× | {pa:.1f} / {pb:.1f} |"  # noqa: E501
        )
    lines += ["", SCALING_END]
    return "\n".join(lines)


def _f(x: float | None, fmt: str = ",.0f") -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def _pair(p: float | None, t: float | None, fmt: str = ",.0f") -> str:
    return f"{_f(p, fmt)} / {_f(t, fmt)}"


def _measured_rate(entry: Mapping[str, Any], run: str, key: str) -> float | None:
    v, wall = _field(entry, run, key), _field(entry, run, "wall_s")
    return v / wall if v is not None and wall else None


def markdown(rows: Sequence[Row]) -> str:
    lines = [
        BEGIN,
        "",
        "Each cell is *profile / trace*: the built-in profile and the trace's replay, natively in the",
        f"simulator, N threads on N CPUs of the default platform. **Flags**: a rate more than {RATE_TOLERANCE:.0%} off,",  # noqa: E501
        f"or a median blocking time more than {MEDIAN_FACTOR:g}× off. *Real, untraced / traced*: the program's",
        "own futex and trimming-madvise calls per second on the recording machine (2 CPUs), from the",
        "manifest: the untraced run is the truth, the traced one shows the tracer's perturbation.",
        "*Sync waits ×base* (profile / trace / real recorded / real untraced) and *unmaps ×base*",
        f"(profile / trace): the count in the whole run over the count at {BASE_THREADS} threads (or the first",
        f"parallel row); — where that base has fewer than {MIN_COUNT:g} events. *Real recorded*: the real",
        "program's condition-variable waits as the tracer recorded them; *real untraced*: its voluntary",
        "context switches in the untraced runs. **Scale-free flags**: the profile's growth more than",
        f"{RATE_TOLERANCE:.0%} off the real program's (the trace's where there is no real count), or remote",
        f"wake-up shares more than {SHARE_POINTS:.0%} apart between cells of like parallelism; the",
        "input's scale cannot explain these (see below the table).",
        "",
        "| program | N | run time s | parallelism | blocks/s | block p50 µs | block p90 µs | wake-ups/s | remote wake-ups | futex/s | unmaps/s | sync waits ×base | unmaps ×base | real futex/s untraced / traced | real trims/s untraced / traced | per-second flags | scale-free flags |",  # noqa: E501
        "| --- | ---: | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        p, t = r.profile, r.trace
        growth = r.growth()
        lines.append(
            "| "
            + " | ".join(
                [
                    f"`{r.program}`",
                    str(r.threads),
                    _pair(p.wall_s, t.wall_s, ".3f"),
                    _pair(p.parallelism, t.parallelism, ".1f"),
                    _pair(p.blocks_per_s, t.blocks_per_s),
                    _pair(p.block_p50_us, t.block_p50_us, ",.1f"),
                    _pair(p.block_p90_us, t.block_p90_us, ",.1f"),
                    _pair(p.wakeups_per_s, t.wakeups_per_s),
                    _pair(p.remote_share, t.remote_share, ".0%"),
                    _pair(p.futex_per_s, t.futex_per_s),
                    _pair(p.unmaps_per_s, t.unmaps_per_s),
                    " / ".join(
                        _f(x, ".1f")
                        for x in (*growth.get("blocks", (None,) * 2), *growth.get("real blocks", (None,) * 2))
                    ),
                    _pair(*growth.get("unmaps", (None, None)), ".1f"),
                    _pair(
                        _measured_rate(r.measured, "untraced", "futex"), _measured_rate(r.measured, "traced", "futex")
                    ),
                    _pair(
                        _measured_rate(r.measured, "untraced", "madvise_trim"),
                        _measured_rate(r.measured, "traced", "madvise_trim"),
                    ),
                    ", ".join(r.flags()) or "—",
                    ", ".join(r.scale_free_flags()) or "—",
                ]
            )
            + " |"
        )
    lines += ["", END]
    return "\n".join(lines)


TRUST_BEGIN = "<!-- trace-trust:begin (vcpulab workloads compare --trust docs/real-programs.md) -->"
TRUST_END = "<!-- trace-trust:end -->"


def _ratio(a: Any, b: Any) -> str:
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return "—"
    return f"{a:,.0f} / {b:,.0f}" + (f" ({b / a:.2f}×)" if a else "")


def trust_markdown(programs: Sequence[Program]) -> str:
    """How far each trace can be trusted, from the manifests: the native replay's error against
    the untraced runs (CPU time always; wall time when the machine was not busy), and the
    program's own counts untraced against traced, with the replay's unmapping calls."""
    lines = [
        TRUST_BEGIN,
        "",
        "| program | N | untraced wall s (busy) | untraced CPU s | traced CPU s | replayed CPU s | CPU error | wall error | futex untraced / traced | blocking switches untraced / traced | trims untraced / traced | munmap untraced / traced | replay unmapping calls |",  # noqa: E501
        "| --- | ---: | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for p in programs:
        for t in p.traces:
            e = t.entry
            u, tr, r = e.get("untraced", {}), e.get("traced", {}), e.get("replay", {})
            busy = u.get("held_off_share", 0.0)
            wall_err = r.get("wall_error")
            lines.append(
                "| "
                + " | ".join(
                    [
                        f"`{p.name}`",
                        str(t.threads),
                        f"{u.get('wall_s', 0):.3f} ({busy:.0%})",
                        f"{u.get('user_s', 0) + u.get('sys_s', 0):.3f}",
                        f"{tr.get('user_s', 0) + tr.get('sys_s', 0):.3f}",
                        f"{r.get('cpu_s', 0):.3f}",
                        _f(r.get("cpu_error"), "+.1%"),
                        (_f(wall_err, "+.1%") + ("" if busy <= 0.1 else " (busy)")) if wall_err is not None else "—",
                        _ratio(u.get("futex"), tr.get("futex")),
                        _ratio(u.get("vol_ctxsw"), tr.get("vol_ctxsw")),
                        _ratio(u.get("madvise_trim"), tr.get("madvise_trim")),
                        _ratio(u.get("munmap"), tr.get("munmap")),
                        _f(r.get("unmap_calls")),
                    ]
                )
                + " |"
            )
    lines += ["", TRUST_END]
    return "\n".join(lines)


PROGRAMS_BEGIN = "<!-- traced-programs:begin (vcpulab workloads compare --trust docs/real-programs.md) -->"
PROGRAMS_END = "<!-- traced-programs:end -->"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def programs_markdown(programs: Sequence[Program]) -> str:
    """The traced programs from their manifests: build facts, input, thread counts, trace sizes."""
    lines = [
        PROGRAMS_BEGIN,
        "",
        "| program | threads traced | xz size | build (gcc 12.2) | input here | native input, and why this one differs |",  # noqa: E501
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for p in programs:
        size = sum(int(t.entry.get("bytes", 0)) for t in p.traces)
        mark = "" if p.replayable else " (not replayed: " + _cell(p.info.get("not_replayable", "")) + ")"
        lines.append(
            f"| `traced.{p.name}`{mark} | {', '.join(str(n) for n in p.thread_counts)} | {size / 1e6:.2f} MB | "
            f"{_cell(p.info.get('cflags', ''))} | {_cell(p.info.get('input', ''))} | {_cell(p.info.get('native_input', ''))} |"  # noqa: E501
        )
    lines += ["", PROGRAMS_END]
    return "\n".join(lines)


def splice(doc: str, block: str, begin: str = BEGIN, end: str = END, heading: str = "Profiles against traces") -> str:
    """``doc`` with the generated block between ``begin`` and ``end`` replaced (or appended
    under ``heading``)."""
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
    if pattern.search(doc):
        return pattern.sub(lambda _: block, doc)
    return doc.rstrip("\n") + f"\n\n## {heading} (generated)\n\n" + block + "\n"


def to_json(rows: Sequence[Row]) -> list[dict[str, Any]]:
    return [
        {
            "program": r.program,
            "threads": r.threads,
            "profile": vars(r.profile),
            "trace": vars(r.trace),
            "flags": r.flags(),
            "growth": r.growth(),
            "scale_free_flags": r.scale_free_flags(),
        }
        for r in rows
    ]


def add_arguments(p: Any) -> None:
    p.add_argument("names", nargs="*", metavar="NAME", help="traced programs (default: all)")
    p.add_argument("--markdown", type=Path, help="splice the table into this Markdown file (docs/profiles.md)")
    p.add_argument("--json", type=Path, help="also write the rows as JSON")
    p.add_argument(
        "--trust", type=Path, help="instead, splice the trust table (from the manifests) into this Markdown file"
    )
    p.add_argument(
        "--scaling",
        type=Path,
        help="instead, splice the 2-against-64-thread replay check of NAMEs into this Markdown file",
    )
    p.add_argument("-j", "--jobs", type=int, choices=range(1, 65), default=2, metavar="N", help="processes (default 2)")


def run(args: Any) -> int:
    from ..atomic import Output

    programs = catalogue()
    chosen = [resolve(n, programs) for n in args.names] if args.names else programs
    if args.scaling:
        block = scaling_markdown(chosen, jobs=args.jobs)
        Output(args.scaling).write_bytes(
            splice(
                args.scaling.read_text(),
                block,
                SCALING_BEGIN,
                SCALING_END,
                "Replays above the recording machine's CPU count",
            ).encode()
        )
        return 0
    if args.trust:
        text = splice(
            args.trust.read_text(), trust_markdown(chosen), TRUST_BEGIN, TRUST_END, "How far each trace can be trusted"
        )
        text = splice(text, programs_markdown(chosen), PROGRAMS_BEGIN, PROGRAMS_END, "The traced programs")
        Output(args.trust).write_bytes(text.encode())
        return 0
    rows = compare(chosen, args.jobs)
    block = markdown(rows)
    if args.markdown:
        Output(args.markdown).write_bytes(splice(args.markdown.read_text(), block).encode())
    else:
        print(block)
    if args.json:
        Output(args.json).write_bytes(json.dumps(to_json(rows), indent=1).encode())
    return 0
