"""The HTML report (vcpulab.report: data, figures, sections, page), on synthetic stores written
without the simulator, so that every section, including the PLE window series the simulator
does not record yet, is exercised with known numbers."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Any

import pytest

from vcpulab import report
from vcpulab.report import Section, Table, build, figures, mechanisms, overhead
from vcpulab.report.common import Namer
from vcpulab.report.data import load, load_ple_series
from vcpulab.store import ResultsStore, run_row

SPEC = """[experiment]
workloads = ["w"]

[machine.costs]
exit_hlt = 900

[[published]]
metric = "ple_exits"
value = 4
source = "made up"
"""


def result(
    workload: str,
    scenario: str,
    vcpus: int,
    seed: int = 1,
    variant: str = "",
    *,
    samples: list[int] | None = None,
    ple: bool = False,
) -> dict[str, Any]:
    """A plausible result object: the native run takes 1 s at 2 vCPUs and scales by 1.5 per
    doubling; VMs add 10 % (UC) or 30 % (OC) of time and 5 % / 20 % of cycles."""
    t_native = 1.0 / (1.5 ** (vcpus.bit_length() - 2))
    c_native = t_native * vcpus * 1e9
    native = scenario == "native"
    factor = {"native": 0.0, "UC": 0.10, "OC": 0.30}[scenario]
    cyc = {"native": 0.0, "UC": 0.05, "OC": 0.20}[scenario]
    t_virt = None if native else t_native * (1 + factor) * (2 if scenario == "OC" else 1)
    dt = None if native else factor
    dr = None if native else cyc
    m = 2 if scenario == "OC" else 1
    guest = c_native * (1 + cyc * 0.6) * m
    host = 0 if native else int(c_native * cyc * 0.4 * m)
    busy = [int(c_native / vcpus * (1.5 if i == 0 else 0.9)) for i in range(vcpus)]
    tlb: dict[str, Any] = {"shootdowns": 0, "latency": {"count": 0}}
    if samples is not None:
        tlb = {
            "shootdowns": len(samples),
            "samples_ns": samples,
            "latency": {
                "count": len(samples),
                "mean_ns": sum(samples) / len(samples),
                "p50_ns": 4096,
                "p99_ns": 65536,
                "max_ns": max(samples),
            },
        }
    vms = []
    if not native:
        for vm in range(m):
            v: dict[str, Any] = {"vm": vm, "vcpus": [{"busy_ns": int(b * (1 + cyc))} for b in busy]}
            if ple:
                v["ple_window_series"] = [[0, 4096], [1_000_000, 8192], [2_000_000, 6144 + 1024 * vm]]
            vms.append(v)
    metrics: dict[str, Any] = {"parallelism": vcpus * 0.9, "sync_per_thread_s": 5.0}
    if samples is not None:
        metrics["tlb_shootdowns"] = len(samples)
    if not native:
        metrics["ple_exits"] = 3.0
    return {
        "workload": workload,
        "scenario": scenario,
        "vcpus": vcpus,
        "threads": vcpus,
        "oc_vms": 2,
        "seed": seed,
        "variant": variant,
        "workload_version": 1,
        "workload_hash": "h",
        "t_native_s": t_native,
        "t_virt_s": t_virt,
        "delta_eta_r": dr,
        "delta_eta_t": dt,
        "omega": None if native else (1 + dt) / (1 + dr),  # type: ignore[operator]
        "weighted_speedup": None if native else 1.0,
        "c_native_ns": c_native,
        "c_virt_ns": None if native else c_native * (1 + cyc),
        "guest_ns": int(guest),
        "host_ns": host,
        "events": 100,
        "duration_s": t_virt or t_native,
        "wall_s": 0.01,
        "exits": {} if native else {"HLT": 10, "MSR_WRITE_ICR": 5},
        "host_ns_by_reason": {} if native else {"HLT": host // 2, "SCHED": host - host // 2},
        "breakdown": {"user": {"compute": int(guest)}},
        "metrics": metrics,
        "instances": [{"name": f"vm{i}", "finish_s": t_virt or t_native} for i in range(m)],
        "run": {
            "core_busy_ns": busy,
            "vms": vms,
            "instances": [
                {
                    "name": "i0",
                    "compute_ns": int(c_native * 0.8),
                    "finish_ns": int((t_virt or t_native) * 1e9),
                    "tlb": tlb,
                }
            ],
        },
    }


def make_store(root: Path, results: list[dict[str, Any]], spec: str = SPEC) -> ResultsStore:
    store = ResultsStore(root)
    with store.writer() as w:
        w.save_spec("abc123", spec)
        rows = [
            run_row(r, key=f"k{i}", config_key=f"c{i}", spec_hash="abc123", version="0.1.0+test")
            for i, r in enumerate(results)
        ]
        w.append("runs", rows)
    return store


def sweep(
    workloads: tuple[str, ...] = ("a", "b"),
    scenarios: tuple[str, ...] = ("native", "UC", "OC"),
    vcpus: tuple[int, ...] = (2, 4),
    seeds: tuple[int, ...] = (1, 2),
    **kw: Any,
) -> list[dict[str, Any]]:
    return [result(w, s, n, seed, **kw) for w in workloads for n in vcpus for seed in seeds for s in scenarios]


@pytest.fixture(scope="module")
def full_store(tmp_path_factory: pytest.TempPathFactory) -> ResultsStore:
    """Workloads a and b in native, UC and OC at 2 and 4 vCPUs, seeds 1 and 2; workload c in
    UC and OC with two TLB variants, TLB samples and PLE window series."""
    rs = sweep()
    rs += [
        result("c", s, n, 1, v, samples=[1000 * (i + 1) for i in range(50)], ple=True)
        for s in ("UC", "OC")
        for n in (2, 4)
        for v in ("vm.tlb=ipi", "vm.tlb=pv")
    ]
    return make_store(tmp_path_factory.mktemp("full") / "res", rs)


@pytest.fixture(scope="module")
def full_report(full_store: ResultsStore) -> report.Report:
    return report.build_report(full_store)


# --- figures ----------------------------------------------------------------------------------


def test_svg_is_inline_ready_and_ids_are_unique_per_figure() -> None:
    panels = [figures.LinePanel("p", [figures.Line("a", [1, 2, 3], [1, 2, 2.5])], "x", "y", ideal=True)]
    svgs = []
    with figures.style():
        for prefix in ("f1", "f2"):
            svgs.append(figures.to_svg(figures.line_panels(panels), prefix, "a <label>"))
    for prefix, svg in zip(("f1", "f2"), svgs, strict=True):
        assert svg.startswith('<svg class="plot" role="img" aria-label="a &lt;label&gt;" ')
        assert "<?xml" not in svg and "DOCTYPE" not in svg and "<metadata" not in svg
        urls = set(re.findall(r"https?://[^\s\"')]+", svg))
        assert urls <= {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}, urls
        ids = re.findall(r'\bid="([^"]+)"', svg)
        assert ids and all(i.startswith(f"{prefix}-") for i in ids)
        refs = re.findall(r'href="#([^"]+)"', svg) + re.findall(r"url\(#([^)]+)\)", svg)
        assert refs and set(refs) <= set(ids)
    ids1 = set(re.findall(r'\bid="([^"]+)"', svgs[0]))
    assert not ids1 & set(re.findall(r'\bid="([^"]+)"', svgs[1]))


def test_thin_keeps_ends_and_limit() -> None:
    xs = list(range(10_000))
    tx, ty = figures.thin(xs, xs, 100)
    assert len(tx) == 100 and tx[0] == 0 and tx[-1] == 9999 and tx == ty
    assert figures.thin([1, 2], [3, 4], 100) == ([1, 2], [3, 4])


def test_every_figure_function_draws(tmp_path: Path) -> None:
    with figures.style():
        figs = [
            figures.box_plots(
                {"delta_eta_t": {(2, "UC"): [0.1, 0.2], (4, "UC"): [0.3]}, "omega": {(2, "UC"): [1.1]}},
                [2, 4],
                ["UC"],
                ["UC"],
            ),
            figures.overhead_bars([figures.OverheadBar("w", 0.1, 0.2, 0.05, 0.1, -0.01, 0.06, 0.02, 0.08)]),
            figures.stacked_bars([figures.StackPanel("UC", [2, 4], {"HLT": [0.1, 0.2], "SCHED": [0.0, 0.1]})], "%"),
            figures.rank_bars([figures.RankPanel("w", {"UC": [1.2, 0.9]}, [1.1, 0.9], ["UC"])], "ratio"),
            figures.range_dots([figures.RangePanel("UC", ["w"], {"2 vCPUs": [(1.0, 2.0, 30.0)]}, "µs")]),
        ]
        for i, fig in enumerate(figs):
            assert "<path" in figures.to_svg(fig, f"t{i}")


# --- tables and the page --------------------------------------------------------------------


def test_table_csv_and_html() -> None:
    t = Table(
        "x", ("name", "dt", "n", "none"), (("a<b", 0.1234, 12345, None),), shown=True, formats={"dt": "pct", "n": "int"}
    )
    assert list(csv.reader(io.StringIO(t.csv_text()))) == [["name", "dt", "n", "none"], ["a<b", "0.1234", "12345", ""]]
    html = t.html()
    assert "a&lt;b" in html and "+12.3%" in html and "12,345" in html and "—" in html
    with pytest.raises(ValueError, match="table name"):
        Table("Bad Name", ("a",), ())
    with pytest.raises(ValueError, match="values for"):
        Table("ok", ("a", "b"), ((1,),))


def test_page_lists_omitted_sections_with_their_note() -> None:
    page = report.build.Report(
        "T <1>",
        "sub",
        (
            Section("Shown", "shown", "<p>body</p>", (Table("data", ("a",), ((1,),)),)),
            Section.omit("Gone", "gone", "no native cells: needs scenario native"),
        ),
    ).html("out_csv")
    assert "<title>T &lt;1&gt;</title>" in page
    assert '<a href="#gone">Gone</a> (omitted)' in page
    assert "no native cells: needs scenario native" in page
    assert '<a href="out_csv/data.csv">data.csv</a>' in page
    assert "<script" not in page and "<link" not in page
    with pytest.raises(ValueError, match="anchor"):
        Section("x", "Bad Anchor")


# --- formulas ---------------------------------------------------------------------------------


def test_guest_host_split_per_measured_instance() -> None:
    cell = {"c_native_ns": 100.0, "guest_ns": 230, "host_ns": 20, "measured": 2}
    guest, host = overhead.split_parts(cell)
    assert guest == pytest.approx(0.15) and host == pytest.approx(0.10)
    assert overhead.split_parts({"c_native_ns": None, "guest_ns": 1, "host_ns": 1}) == (None, None)


def test_speedup_relative_to_smallest_count_and_efficiency() -> None:
    cells = [
        {
            "workload": "w",
            "scenario": "native",
            "variant": "",
            "vcpus": n,
            "threads": n,
            "oc_vms": 2,
            "seed": 1,
            "t_native_s": t,
            "t_virt_s": None,
        }
        for n, t in ((2, 1.0), (4, 0.6), (8, 0.4))
    ] + [
        {
            "workload": "w",
            "scenario": "OC",
            "variant": "",
            "vcpus": n,
            "threads": n,
            "oc_vms": 2,
            "seed": s,
            "t_native_s": 1.0,
            "t_virt_s": t,
        }
        for n, t in ((2, 2.0), (4, 1.0))
        for s in (1, 2)
    ]
    # The efficiency-based speedup is the simulator's (the stored eff_speedup column), averaged
    # over the seeds that have it.
    cells[5]["eff_speedup"] = 3.0  # OC, 4 vCPUs, seed 1
    cells[6]["eff_speedup"] = None  # seed 2: not recorded
    rec = mechanisms.speedup_records(cells, Namer(cells))
    native = {r["vcpus"]: r for r in rec if r["scenario"] == "native"}
    # speedup: t(n₀) / t(n), as `vcpulab run`; speedup_linear_to_n0: n₀ · t(n₀) / t(n).
    assert {n: r["speedup"] for n, r in native.items()} == pytest.approx({2: 1.0, 4: 1.0 / 0.6, 8: 1.0 / 0.4})
    assert {n: r["speedup_linear_to_n0"] for n, r in native.items()} == pytest.approx(
        {2: 2.0, 4: 2 * 1.0 / 0.6, 8: 2 * 1.0 / 0.4}
    )
    oc = {r["vcpus"]: r for r in rec if r["scenario"] == "OC"}
    assert oc[4]["speedup"] == pytest.approx(2.0) and oc[4]["seeds"] == 2
    assert oc[4]["speedup_linear_to_n0"] == pytest.approx(4.0)
    assert oc[4]["efficiency_speedup"] == pytest.approx(3.0)
    assert oc[2]["efficiency_speedup"] is None


# --- whole reports from synthetic stores ------------------------------------------------------


def anchors(rep: report.Report) -> dict[str, Section]:
    return {s.anchor: s for s in rep.sections}


def test_full_report_has_every_section(full_store: ResultsStore, tmp_path: Path) -> None:
    extra = Section("Diagnosis", "diagnosis", "<p>d</p>", (Table("diagnosis", ("a",), ((1,),)),))
    rep = report.build_report(full_store, title="T", extra_sections=[extra], command="vcpulab report x")
    by = anchors(rep)
    for a in (
        "overview",
        "distribution",
        "per-workload",
        "host-exits",
        "per-vcpu",
        "tlb",
        "ple-window",
        "speedup",
        "categories",
        "summary",
        "published",
        "diagnosis",
        "methods",
    ):
        assert a in by and not by[a].omitted, a
    for a in ("distribution", "per-workload", "host-exits", "per-vcpu", "tlb", "ple-window", "speedup"):
        assert '<svg class="plot"' in by[a].html, a
    order = [s.anchor for s in rep.sections]
    assert order.index("diagnosis") == len(order) - 2 and order[-1] == "methods"
    assert "vcpulab report x" in by["methods"].html and "exit_hlt = 900 ns" in by["methods"].html
    assert "[experiment]" in by["methods"].html  # the spec text, collapsed

    written = report.write_report(rep, tmp_path / "r.html")
    page = tmp_path / "r.html"
    assert written[0] == page and page.is_file()
    names = {p.name for p in (tmp_path / "r_csv").iterdir()}
    assert {
        "distribution.csv",
        "per_workload.csv",
        "host_exits.csv",
        "per_vcpu.csv",
        "tlb_latency.csv",
        "tlb_cdf.csv",
        "ple_window.csv",
        "speedup.csv",
        "categories.csv",
        "summary.csv",
        "published.csv",
        "diagnosis.csv",
        "methods.csv",
        "overview.csv",
    } == names
    text = page.read_text()
    assert text.count('<svg class="plot"') == text.count('<figure class="fig">') >= 7
    assert not re.search(r"""(?:src|href)\s*=\s*["']?https?:|url\(\s*["']?https?:|<script|<link""", text)


def test_per_workload_csv_holds_the_synthetic_overheads(full_report: report.Report) -> None:
    by = anchors(full_report)
    (table,) = by["per-workload"].tables
    rows = [dict(zip(table.columns, r, strict=True)) for r in table.rows]
    a_uc = next(r for r in rows if r["workload"] == "a" and r["scenario"] == "UC")
    assert a_uc["dt_avg"] == pytest.approx(0.10) and a_uc["dr_max"] == pytest.approx(0.05)
    assert a_uc["guest_avg"] == pytest.approx(0.03) and a_uc["host_avg"] == pytest.approx(0.02, rel=1e-6)
    a_oc = next(r for r in rows if r["workload"] == "a" and r["scenario"] == "OC")
    assert a_oc["guest_avg"] == pytest.approx(0.12) and a_oc["host_avg"] == pytest.approx(0.08, rel=1e-6)  # per VM


def test_per_vcpu_normalised_to_native_core_mean(full_report: report.Report) -> None:
    (table,) = anchors(full_report)["per-vcpu"].tables
    rows = [dict(zip(table.columns, r, strict=True)) for r in table.rows]
    top = next(r for r in rows if r["workload"] == "a" and r["scenario"] == "UC" and r["vcpus"] == 4 and r["rank"] == 1)
    # vCPU 0 does 1.5 × and the others 0.9 × of c/n natively, ×1.05 in UC; the native mean is 1.05 × c/n.
    assert top["vcpu"] == 0 and top["normalised"] == pytest.approx(1.5 * 1.05 / 1.05, rel=1e-6)
    assert top["native_normalised"] == pytest.approx(1.5 / 1.05, rel=1e-6)


def test_ple_window_series_is_read_and_drawn(full_store: ResultsStore, full_report: report.Report) -> None:
    series = load_ple_series(load(full_store))
    assert len(series) == 8
    oc = next(r for r in series if r["scenario"] == "OC")
    assert oc["series"] == [
        [(0, 4096.0), (1_000_000, 8192.0), (2_000_000, 6144.0)],
        [(0, 4096.0), (1_000_000, 8192.0), (2_000_000, 7168.0)],
    ]
    section = anchors(full_report)["ple-window"]
    (table,) = section.tables
    assert len(table.rows) == 3 * (4 + 4 * 2)  # 4 UC cells × 1 VM + 4 OC cells × 2 VMs, 3 points each
    assert section.html.count('<svg class="plot"') == 1


def test_sections_are_omitted_with_a_reason(tmp_path: Path) -> None:
    store = make_store(tmp_path / "uc", sweep(workloads=("a",), scenarios=("UC",), vcpus=(4,), seeds=(1,)))
    by = anchors(report.build_report(store))
    assert by["per-vcpu"].note == "no native cells: cycles per vCPU normalised to native needs scenario native"
    assert by["ple-window"].omitted and "[record] ple_window = true" in (by["ple-window"].note or "")
    assert by["tlb"].omitted and by["speedup"].omitted and "one vCPU count" in (by["speedup"].note or "")
    assert not by["distribution"].omitted and not by["host-exits"].omitted
    native_only = make_store(tmp_path / "nat", sweep(scenarios=("native",)))
    by = anchors(report.build_report(native_only))
    assert by["distribution"].omitted and by["per-workload"].omitted and not by["speedup"].omitted


def test_tlb_from_summaries_when_no_samples(tmp_path: Path) -> None:
    rs = [result("w", s, 4, samples=[1000, 2000, 5000]) for s in ("native", "UC")]
    for r in rs:
        del r["run"]["instances"][0]["tlb"]["samples_ns"]
    section = anchors(report.build_report(make_store(tmp_path / "s", rs)))["tlb"]
    assert not section.omitted and "latency summaries" in section.html
    (table,) = section.tables
    row = dict(zip(table.columns, table.rows[0], strict=True))
    assert row["source"] == "log2 summary" and row["max_us"] == 5.0 and row["p99_us"] == pytest.approx(65.536)


def test_empty_store_and_duplicate_names(tmp_path: Path) -> None:
    empty = ResultsStore(tmp_path / "empty")
    with empty.writer():
        pass
    with pytest.raises(report.ReportError, match="holds no results"):
        report.build_report(empty)
    store = make_store(tmp_path / "s", sweep(workloads=("a",), vcpus=(2,), seeds=(1,)))
    with pytest.raises(ValueError, match="named 'summary'"):
        report.build_report(store, extra_sections=[Section("Mine", "mine", "", (Table("summary", ("a",), ()),))])


def test_write_is_all_or_nothing(full_report: report.Report, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rep = full_report
    out = tmp_path / "out" / "r.html"
    out.parent.mkdir()
    report.write_report(rep, out)
    before = {p.name: p.read_bytes() for p in (out.parent / "r_csv").iterdir()}
    page_before = out.read_bytes()

    def boom(*_a: Any, **_k: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(build.Output, "write_bytes", boom)
    smaller = report.build.Report("x", "y", rep.sections[:2])
    with pytest.raises(OSError):
        report.write_report(smaller, out)
    assert out.read_bytes() == page_before
    assert {p.name: p.read_bytes() for p in (out.parent / "r_csv").iterdir()} == before
    assert sorted(p.name for p in out.parent.iterdir()) == ["r.html", "r_csv"]  # no temporary left

    fresh = tmp_path / "fresh" / "r.html"
    fresh.parent.mkdir()
    with pytest.raises(OSError):
        report.write_report(smaller, fresh)
    assert list(fresh.parent.iterdir()) == []


def test_output_checks(tmp_path: Path) -> None:
    with pytest.raises(report.ReportError, match="does not exist"):
        build.check_output(tmp_path / "missing" / "r.html")
    with pytest.raises(report.ReportError, match="is a directory"):
        build.check_output(tmp_path)
    (tmp_path / "r_csv").mkdir()
    (tmp_path / "r_csv" / "notes.txt").write_text("mine")
    with pytest.raises(report.ReportError, match="not a report's CSV folder"):
        build.check_output(tmp_path / "r.html")
    assert build.csv_dir_for(Path("a/report.html")) == Path("a/report_csv")
