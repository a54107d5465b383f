"""Table sections of the report: the TPDS categorization, the summary with confidence
intervals, published values next to the simulated ones, and the methods section."""

from __future__ import annotations

import html
import platform
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from .. import analysis
from .common import gamma_text, how, inline, what
from .data import StoreData, spec_settings
from .page import Section, Table, paragraph
from .published import Published, compare_published, where_text

COLLAPSE_ROWS = 60
"""Tables longer than this are shown collapsed (``<details>``)."""


def _shown(table: Table, label: str) -> str:
    if len(table.rows) > COLLAPSE_ROWS:
        return f"<details><summary>{html.escape(label)} ({len(table.rows)} rows)</summary>{table.html()}</details>"
    return table.html()


def _config_column(rows: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """The ``config`` column, when the store has several configurations of one cell
    (``analysis`` then labels every row; docs/results.md)."""
    return ("config",) if any(r.get("config") for r in rows) else ()


def _legend(data: StoreData, rows: Sequence[Mapping[str, Any]]) -> str:
    """What each configuration label stands for (nothing without the column)."""
    return "".join(paragraph(line) for line in analysis.config_legend(data.store, rows))


# --- (8) categorization -----------------------------------------------------------------------


def categorization(data: StoreData, rows: Sequence[Mapping[str, Any]], th: analysis.Thresholds) -> Section:
    title, anchor = "Overhead categories", "categories"
    if not rows:
        return Section.omit(title, anchor, "no cells to categorize")
    records = [{**r, "categories": ", ".join(r["categories"]) or None} for r in rows]
    cols = (
        "workload",
        "variant",
        *_config_column(rows),
        "vcpus",
        "threads",
        "dt_uc",
        "dr_uc",
        "guest_part",
        "host_part",
        "dt_oc",
        "dt_oc2",
        "categories",
        "parallelism",
        "sync_per_thread_s",
        "scalability_type",
    )
    headers = {
        "dt_uc": "δη_t UC",
        "dr_uc": "δη_r UC",
        "guest_part": "guest part",
        "host_part": "host part",
        "dt_oc": "δη_t OC",
        "dt_oc2": "δη_t OC2",
        "sync_per_thread_s": "sync/thread/s",
        "scalability_type": "type",
        "vcpus": "vCPUs",
    }
    formats = {c: "pct" for c in ("dt_uc", "dr_uc", "guest_part", "host_part", "dt_oc", "dt_oc2")} | {
        "vcpus": "int",
        "threads": "int",
        "scalability_type": "int",
        "categories": "text",
        "variant": "text",
    }
    table = Table.of("categories", records, cols, shown=True, headers=headers, formats=formats)
    counts: dict[str, int] = {}
    for r in rows:
        if r["dt_uc"] is None:
            names = ["not decided (no UC cell)"]
        else:
            names = r["categories"] or ["none (not negligible, below every threshold)"]
        for c in names:
            counts[c] = counts.get(c, 0) + 1
    tally = "; ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
    body = (
        what(
            "Each (workload, variant, vCPU count) in the TPDS overhead categories (TPDS §6) and the DIS ch.4 "
            "scalability type, as `vcpulab categorize` prints them."
        )
        + paragraph(f"Configurations per category: {tally}.")
        + table.html()
        + _legend(data, rows)
        + how(
            f"From the means over seeds. high guest: UC's guest part (G − C_p)/C_p > {th.guest:.0%}; high host: UC's "
            f"host part H/C_p > {th.host:.0%}; high overcommit: δη_t in OC or OC2 exceeds UC's by more than "
            f"{th.overcommit:.0%}; negligible: none of these and δη_t < {th.negligible:.0%} in every stored scenario "
            "(thresholds: `vcpulab categorize --help`; docs/results.md). A category needing a scenario that is not "
            f"stored is not decided. Type: parallelism ≥ {th.high_parallelism:.0%} of the vCPUs is high, ≥ one "
            f"voluntary switch per thread per {th.slice_ms:g} ms is high synchronization; 1 high/low, 2 low/high, 3 "
            "high/high, 4 low/low."
        )
    )
    return Section(title, anchor, body, (table,))


# --- (9) summary ------------------------------------------------------------------------------


def summary(data: StoreData, confidence: float = 0.95) -> Section:
    title, anchor = "Summary with confidence intervals", "summary"
    metrics = [m for m in analysis.SUMMARY_METRICS if data.has(m)]
    rows = analysis.summary(data.store, metrics, confidence) if metrics else []
    if not rows:
        return Section.omit(title, anchor, "no cells to summarize")
    cols = ["workload", "variant", *_config_column(rows), "scenario", "vcpus", "threads", "oc_vms", "repetitions"]
    for m in metrics:
        cols += [m, f"{m}_ci"]
    headers = {"oc_vms": "k", "repetitions": "n", "vcpus": "vCPUs"} | {f"{m}_ci": "± CI" for m in metrics}
    formats = {"vcpus": "int", "threads": "int", "oc_vms": "int", "repetitions": "int"}
    for m in metrics:
        kind = "pct" if m.startswith("delta_eta") else ("s" if m.endswith("_s") else "ratio")
        formats[m] = kind
        formats[f"{m}_ci"] = "pct_pts" if kind == "pct" else kind
    records = [
        {
            **r,
            **{
                f"{m}_ci": (
                    r[f"{m}_ci"] * 100 if r[f"{m}_ci"] is not None and m.startswith("delta_eta") else r[f"{m}_ci"]
                )
                for m in metrics
            },
        }
        for r in rows
    ]
    shown = Table.of("summary_shown", records, cols, headers=headers, formats=formats)
    table = Table.of("summary", rows, cols)
    body = (
        what(
            "Per configuration, the mean of each metric over its repetitions (seeds) and the half-width of its "
            f"{confidence:.0%} confidence interval, as `vcpulab summary` prints them."
        )
        + _shown(shown, "Summary")
        + _legend(data, rows)
        + how(
            "Half-width = t(1 − α/2, n − 1) · s / √n with s the sample standard deviation and t Student's quantile; "
            "none with one repetition. δη half-widths are in percentage points. The CSV has the plain values (ratios)."
        )
    )
    return Section(title, anchor, body, (table,))


# --- published values -------------------------------------------------------------------------


def published(data: StoreData) -> Section | None:
    """Published values from the specs' ``[[published]]`` next to the simulated means; None
    when no spec has any (the section is then left out entirely: it is not a standard figure)."""
    import json

    entries: list[tuple[str, Published, dict[str, Any]]] = []
    for spec_hash, text in data.specs.items():
        settings = spec_settings(text)
        for p in settings.get("published") or ():
            try:
                entries.append(
                    (
                        spec_hash,
                        Published(
                            str(p["metric"]), float(p["value"]), str(p.get("source", "")), dict(p.get("where") or {})
                        ),
                        settings,
                    )
                )
            except (KeyError, TypeError, ValueError):
                continue
    if not entries:
        return None
    rows = []
    for spec_hash, p, settings in entries:
        results = [
            json.loads(t)
            for (t,) in data.con.execute("SELECT result_json FROM runs WHERE spec_hash = ?", [spec_hash]).fetchall()
        ]
        (c,) = compare_published([p], results, settings)
        rows.append(
            {
                "metric": p.metric,
                "where": where_text(p.where),
                "simulated": c.simulated,
                "published": p.value,
                "ratio": c.ratio,
                "runs": f"{c.measured}/{c.matched}",
                "status": c.status,
                "source": p.source,
                "spec_hash": spec_hash,
            }
        )
    cols = ("metric", "where", "simulated", "published", "ratio", "runs", "status", "source", "spec_hash")
    table = Table.of(
        "published", rows, cols, shown=True, formats={"ratio": "ratio", "runs": "text"}, headers={"ratio": "sim/pub"}
    )
    body = (
        what(
            "Values from the literature that the specs name ([[published]]), next to the mean simulated value of the "
            "cells they select."
        )
        + table.html()
        + how(
            "simulated: the mean over the matching cells that measured the metric (runs: measured/matching), as "
            "`vcpulab run` shows it."
        )
    )
    return Section("Published values", "published", body, (table,))


# --- (10) methods -----------------------------------------------------------------------------


def _kv(pairs: Sequence[tuple[str, str]]) -> str:
    return (
        '<dl class="kv">' + "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in pairs) + "</dl>"
    )


def _settings_text(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    """A TOML table flattened to (dotted key, value) pairs."""
    out: list[tuple[str, str]] = []
    if isinstance(value, Mapping):
        for k, v in value.items():
            out += _settings_text(v, f"{prefix}.{k}" if prefix else str(k))
    else:
        out.append((prefix, str(value)))
    return out


def methods(data: StoreData, generated: str, command: str) -> Section:
    """Machine, costs, seeds, versions, specs, environment; how to cite."""
    from .. import __version__
    from .._vcpulab import build_id

    versions: dict[str, int] = {}
    for c in data.cells:
        versions[c.get("vcpulab_version") or "?"] = versions.get(c.get("vcpulab_version") or "?", 0) + 1
    seeds = sorted({c["seed"] for c in data.cells})
    try:
        import matplotlib

        mpl = matplotlib.__version__
    except ImportError:  # pragma: no cover - build_report needs it
        mpl = "not installed"
    import duckdb

    env = [
        ("generated", generated),
        ("command", command),
        ("results directory", str(data.store.root.resolve())),
        ("report made by", f"vcpulab {__version__} (build {build_id()})"),
        ("Python", f"{platform.python_implementation()} {sys.version.split()[0]}"),
        ("platform", platform.platform()),
        ("libraries", f"duckdb {duckdb.__version__}, matplotlib {mpl}"),
    ]
    rows = [{"item": k, "value": v} for k, v in env]
    body = what("How these results were produced, so that they can be checked, regenerated and cited.")
    body += "<h3>This report</h3>" + _kv(env)
    body += "<h3>Simulator builds</h3>"
    body += paragraph(
        "The build id of the simulator (crate version + a fingerprint of its source) that ran the cells; a changed "
        "model never reuses results of another build."
    )
    body += _kv([(v, f"{n} cells") for v, n in sorted(versions.items())])
    rows += [{"item": "simulator build", "value": f"{v} ({n} cells)"} for v, n in sorted(versions.items())]
    body += "<h3>Seeds</h3>" + paragraph(
        f"{len(seeds)} repetition{'s' if len(seeds) != 1 else ''}: seeds {', '.join(map(str, seeds))}. Every random "
        "stream of a run derives from its seed; the same spec, seed and build give bit-identical results."
    )
    rows.append({"item": "seeds", "value": " ".join(map(str, seeds))})
    body += "<h3>Specs</h3>"
    counts: dict[str, int] = {}
    for c in data.cells:
        counts[c.get("spec_hash") or "?"] = counts.get(c.get("spec_hash") or "?", 0) + 1
    for spec_hash, n in sorted(counts.items()):
        text = data.specs.get(spec_hash)
        body += f"<h3>spec <code>{html.escape(spec_hash)}</code> ({n} cells)</h3>"
        rows.append({"item": "spec", "value": f"{spec_hash} ({n} cells)"})
        if text is None:
            body += paragraph(f"specs/{spec_hash}.toml is missing from the results directory.", "note")
            continue
        settings = spec_settings(text)
        machine = {k: v for k, v in (settings.get("machine") or {}).items() if k != "costs"}
        costs = (settings.get("machine") or {}).get("costs") or {}
        body += _kv(
            [
                (
                    "machine",
                    ", ".join(f"{k} = {v}" for k, v in machine.items())
                    or "the default (the TPDS testbed: 4 sockets × 20 cores, 2.4 GHz, SMT off)",
                ),
                ("costs", ", ".join(f"{k} = {v} ns" for k, v in costs.items()) or "the defaults (docs/costs.md)"),
                (
                    "settings",
                    "; ".join(
                        f"{k} = {v}"
                        for k, v in _settings_text(
                            {
                                x: y
                                for x, y in settings.items()
                                if x in ("host", "guest", "vm", "vms", "record", "limits")
                            }
                        )
                    )
                    or "the defaults",
                ),
            ]
        )
        for k, v in machine.items():
            rows.append({"item": f"{spec_hash} machine.{k}", "value": str(v)})
        for k, v in costs.items():
            rows.append({"item": f"{spec_hash} machine.costs.{k}", "value": str(v)})
        body += (
            "<details><summary>The materialised spec "
            f"(specs/{html.escape(spec_hash)}.toml)</summary><pre>{html.escape(text)}</pre></details>"
        )
    body += paragraph(
        "Fields a spec does not set take the defaults of the simulator build that ran it: the machine and cost table "
        "in docs/spec.md and docs/costs.md of that version.",
        "how",
    )
    body += "<h3>Metrics</h3>" + paragraph(
        "δη_r = (C_v − C_p)/C_p (extra cycles), δη_t = (t_v·γ_v − t_p·γ_p)/(t_p·γ_p) (time efficiency lost; γ: the "
        "share of the cores a run is entitled to), ω = (1 + δη_t)/(1 + δη_r). " + gamma_text(data.cells),
        "how",
    )
    body += "<h3>How to cite</h3>"
    builds = ", ".join(sorted(versions))
    hashes = ", ".join(sorted(counts))
    body += (
        "<p>"
        + inline(
            f"Simulated with vcpulab (build {builds}) from spec {hashes} with seeds {', '.join(map(str, seeds))}; "
            "methodology and metrics (δη_r, δη_t, ω) after Schildermans, Shan, Aerts, Jackrel and Ding, "
            "“Virtualization Overhead of Multithreading in X86 State-of-the-Art & Remaining Challenges”, IEEE TPDS "
            "32(10), 2021. To regenerate: `vcpulab run RESULTS/specs/<hash>.toml --results DIR` with the same build, "
            "then `vcpulab report DIR`."
        )
        + "</p>"
    )
    table = Table.of("methods", rows, ("item", "value"))
    return Section("Methods", "methods", body, (table,))
