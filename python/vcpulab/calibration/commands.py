"""The ``sensitivity`` and ``calibrate`` commands (their parsers and handlers)."""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Any

from rich.table import Table

from .. import render
from ..atomic import write_bytes_atomic
from ..store import ResultsStore
from ..text import json_text, printable
from .rows import CalibrationError, Evaluator, find_row, preset_estimates


def add_commands(commands: Any, jobs: Any, seeds: Any, count: Any) -> None:
    """Adds ``sensitivity`` and ``calibrate`` to the CLI's subcommands."""
    s = commands.add_parser(
        "sensitivity",
        help="how a published row moves with each estimated cost of its testbed",
        description="Simulate one published row (ID:N, its [[published]] entry N of experiments/published/ID.toml) "
        "with each estimated value of its testbed's preset at its lower and upper bound, and print per parameter "
        "the row's value at both, the elasticity, and the single value within the bounds that would reach the "
        "published figure ('what would it take'). Stores the analysis as RESULTS/sensitivity/ID_N.json: "
        "`vcpulab report RESULTS` draws it as a tornado figure. See docs/calibration.md.",
        epilog="example: vcpulab sensitivity S4U-T1:1 --seeds 1,2,3 --param machine.costs.exit_hlt",
    )
    s.add_argument("row", metavar="ROW", help="ID:N (ID alone when the experiment has one judged row)")
    _common(s, jobs, seeds)
    s.add_argument("--no-what-if", action="store_true", help="skip the search for the value that reaches the target")
    s.add_argument("--figure", metavar="FILE.png", help="also draw the tornado figure to FILE.png")
    s.set_defaults(func=cmd_sensitivity)

    c = commands.add_parser(
        "calibrate",
        help="fit a testbed's estimated costs, within their bounds, to its calibration rows",
        description="Fit the values the preset marks as estimates (all numeric ones, or those named with --param) "
        "to the testbed's calibration rows (experiments/calibration.toml, or --rows), within each value's declared "
        "bounds, with scipy's derivative-free Powell method. Deterministic; every evaluation is stored in the "
        "results directory, so running the same command again after an interruption continues. Writes the "
        "calibrated preset (a spec overlay with the fitted values, their bounds, the residuals and the rows used) "
        "to calibrated/PRESET-cal.toml or --out. See docs/calibration.md.",
        epilog="example: vcpulab calibrate S4U-2S --param machine.costs.exit_msr_icr --seeds 1,2,3",
    )
    c.add_argument("preset", metavar="PRESET", help="the testbed preset (vcpulab platforms)")
    c.add_argument(
        "--rows",
        action="append",
        default=[],
        metavar="ID:N",
        help="a calibration row; repeatable (default: the preset's set in experiments/calibration.toml)",
    )
    _common(c, jobs, seeds)
    c.add_argument("--max-evals", type=count, default=60, metavar="N", help="evaluations at most (default: 60)")
    c.add_argument(
        "-o", "--out", metavar="FILE", help="the calibrated preset to write (default: calibrated/PRESET-cal.toml)"
    )
    c.set_defaults(func=cmd_calibrate)


def _common(p: argparse.ArgumentParser, jobs: Any, seeds: Any) -> None:
    p.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY",
        help="an estimated value to vary, as its spec path (e.g. machine.costs.vcpu_switch); repeatable "
        "(default: every numeric estimate of the preset)",
    )
    p.add_argument("--quick", action="store_true", help="apply the experiments' [reproduce] quick overrides")
    p.add_argument(
        "--suite", metavar="DIR", help=f"the suite directory (default: {os.path.join('experiments', 'published')})"
    )
    p.add_argument(
        "--seeds", type=seeds, metavar="LIST", help="the seeds to run, e.g. 1,2,3 (default: the experiment's)"
    )
    p.add_argument(
        "--results",
        metavar="DIR",
        help="the results directory (default: the suite's, results/reproduce or results/reproduce-quick): "
        "evaluations already stored there are read, not re-run",
    )
    p.add_argument("-j", "--jobs", type=jobs, metavar="N", help="local worker processes (default: all cores)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON document")


def _results_dir(args: argparse.Namespace) -> str:
    return str(
        args.results
        or os.path.join(
            os.environ.get("VCPULAB_RESULTS") or "results", "reproduce-quick" if args.quick else "reproduce"
        )
    )


def _evaluator(args: argparse.Namespace, results: str) -> Evaluator:
    from ..sweep import make_executor

    return Evaluator(
        ResultsStore(results),
        lambda: make_executor(args.jobs, None),
        quick=args.quick,
        seeds=tuple(args.seeds or ()),
        progress=sys.stderr.isatty(),
    )


def cmd_sensitivity(args: argparse.Namespace) -> int:
    from .. import reproduce
    from ..cli import CliError, _check_writable, sweep_failures
    from . import sensitivity

    try:
        suite = reproduce.load_suite(args.suite or reproduce.default_suite())
        row = find_row(suite, args.row)
        if not row.preset:
            raise CalibrationError(f"{row.name}: its spec names no platform preset")
        params = preset_estimates(row.preset, args.param)
    except (reproduce.SuiteError, CalibrationError) as e:
        raise CliError(str(e)) from None
    if not params:
        raise CliError(f"{row.name}: preset {row.preset} has no numeric estimate to vary")
    if args.figure is not None:
        _check_writable(args.figure, option="--figure")
    results = _results_dir(args)
    ev = _evaluator(args, results)
    with sweep_failures(results), render.step_progress(sys.stderr.isatty() and not ev.progress) as steps:
        try:
            out = sensitivity.run(row, params, ev, what_if=not args.no_what_if, step=steps.done)
        except CalibrationError as e:
            raise CliError(str(e)) from None
    name = re.sub(r"[^A-Za-z0-9.-]+", "_", row.name)
    stored = Path(results) / "sensitivity" / f"{name}.json"
    stored.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(stored, (json_text(out.to_json()) + "\n").encode("utf-8"))
    if args.figure is not None:
        _draw(out, args.figure)
    if args.json:
        print(json_text(out.to_json()))
    else:
        console = render.stdout_console()
        console.print(_table(out))
    sys.stderr.write(
        f"vcpulab: {ev.runs} cells run; stored {printable(str(stored))}"
        + (f"; drew {printable(args.figure)}" if args.figure else "")
        + "\n"
    )
    return 0


def _num(x: float | None) -> str:
    return "—" if x is None else f"{x:.4g}"


def _table(out: Any) -> Table:
    t = Table(
        title=f"{out.row}: {out.what} ({out.metric}; preset {out.preset}) — simulated {_num(out.value)}, "
        f"target {_num(out.target)}",
        title_justify="left",
    )
    for col in ("parameter", "value", "bounds", "at low", "at high", "elasticity", "needed"):
        t.add_column(col, justify="left" if col == "parameter" else "right")
    for e in out.ranked():
        needed = _num(e.needed) if e.needed is not None else (e.note or "—")
        t.add_row(
            e.key,
            _num(e.value),
            f"[{_num(e.low)}, {_num(e.high)}]",
            _num(e.at_low),
            _num(e.at_high),
            _num(e.elasticity),
            needed,
        )
    return t


def _draw(out: Any, path: str) -> None:
    from ..report import figures as F
    from ..report.sensitivity import SHOWN

    bars = [
        F.TornadoBar(e.key.rsplit(".", 1)[-1], e.at_low, e.at_high)
        for e in out.ranked()[:SHOWN]
        if e.at_low is not None and e.at_high is not None
    ]
    with F.style():
        fig = F.tornado(f"{out.row}: {out.what}", bars, out.value, out.target, out.metric)
        import io

        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=120)
    write_bytes_atomic(path, buf.getvalue())


def cmd_calibrate(args: argparse.Namespace) -> int:
    import shlex

    from .. import reproduce
    from .._vcpulab import platforms
    from ..cli import CliError, _check_writable, sweep_failures
    from . import fit

    names = {str(p["name"]).casefold(): str(p["name"]) for p in platforms()}
    preset = names.get(args.preset.casefold())
    if preset is None:
        raise CliError(
            f"calibrate: unknown preset '{args.preset}' (expected one of {', '.join(sorted(names.values()))})"
        )
    try:
        suite = reproduce.load_suite(args.suite or reproduce.default_suite())
        rows, rule = list(args.rows), "named with --rows"
        if not rows:
            path = fit.calibration_path(suite.root)
            chosen = fit.load_sets(path).get(preset.casefold())
            if chosen is None:
                raise CalibrationError(f"{path}: no calibration set for {preset} (name rows with --rows ID:N)")
            rows, rule = list(chosen.rows), chosen.rule
        fit.calibration_rows(suite, preset, rows)
        params = preset_estimates(preset, args.param)
    except (reproduce.SuiteError, CalibrationError) as e:
        raise CliError(str(e)) from None
    if not params:
        raise CliError(f"calibrate: preset {preset} has no numeric estimate to fit")
    out_path = args.out or os.path.join("calibrated", f"{preset}-cal.toml")
    if args.out is None:
        Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    _check_writable(out_path, option="--out")
    results = _results_dir(args)
    ev = _evaluator(args, results)
    command = shlex.join(["vcpulab", *getattr(args, "argv", ["calibrate", preset])])
    with sweep_failures(results), render.step_progress(sys.stderr.isatty() and not ev.progress) as steps:
        steps.total(args.max_evals + 1)
        try:
            found = fit.fit(suite, preset, rows, rule, params, ev, max_evals=args.max_evals, step=steps.done)
        except CalibrationError as e:
            raise CliError(str(e)) from None
    text = fit.calibrated_toml(found, f"{preset}-cal", command)
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(out_path, text.encode("utf-8"))
    if args.json:
        from dataclasses import asdict

        print(json_text(asdict(found)))
    else:
        render.stdout_console().print(_fit_table(found))
    sys.stderr.write(f"vcpulab: {found.evaluations} evaluations, {ev.runs} cells run; wrote {printable(out_path)}\n")
    return 0


def _fit_table(f: Any) -> Table:
    t = Table(
        title=f"{f.preset}: objective {f.start_objective:.4g} -> {f.objective:.4g} ({f.evaluations} evaluations)",
        title_justify="left",
    )
    for col in ("value", "preset", "fitted", "bounds", "at a bound"):
        t.add_column(col, justify="left" if col == "value" else "right")
    for v in f.values:
        t.add_row(v.key, _num(v.start), _num(v.value), f"[{_num(v.low)}, {_num(v.high)}]", v.at_bound or "")
    r = Table(title="calibration rows", title_justify="left")
    for col in ("row", "simulated", "residual", "before"):
        r.add_column(col, justify="left" if col == "row" else "right")
    for name in f.rows:
        y, res = f.residuals.get(name, (None, None))
        _, res0 = f.start_residuals.get(name, (None, None))
        r.add_row(name, _num(y), _num(res), _num(res0))
    from rich.console import Group

    return Group(t, r)  # type: ignore[return-value]
