"""`vcpulab run` with policy variants, [report] columns, [[published]] values and latency CDFs."""

from __future__ import annotations

import csv
import importlib.util
import re
from pathlib import Path

from conftest import RunCli

HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None

# `ep` makes no TLB shootdowns: the TLB metrics are missing and must show as such.
VARIANTS = """\
[experiment]
workloads = ["ep"]
scenarios = ["UC"]
vcpus = [2]
vary = {"vm.tlb" = ["ipi", "pv"]}

[report]
columns = ["tlb_latency_mean_us", "ipis_resched"]

[[published]]
metric = "tlb_latency_mean_us"
value = 1.0
source = "paper-A"
where = {scenario = "UC", "vm.tlb" = "pv"}

[[published]]
metric = "omega"
value = 2.0
source = "paper-B"
where = {scenario = "uc", "vm.tlb" = "ipi", vcpus = 2}

[[published]]
metric = "omega"
value = 1.0
source = "paper-C"
where = {scenario = "OC", "vm.tlb" = "pv"}
"""

# A small dedup-like workload whose heap trims make TLB shootdowns.
CDF = """\
[experiment]
workloads = ["churn"]
scenarios = ["UC"]
vcpus = [2]
vary = {"vm.tlb" = ["ipi", "pv"]}

[record]
tlb_samples = true

[report]
cdf = "tlb_latency"

[workloads.churn]
description = "allocate, compute, free: heap trims cause TLB shootdowns"
params = { items = 40, buffer = "96KiB", buffers = 3, work = "150us", handoff = "5us" }
objects = { queue = "mutex" }
program = [
  { repeat = { times = "$items", body = [
    { repeat = { times = "$buffers", body = [ { malloc = "$buffer" } ] } },
    { compute = { exp = "$work" } },
    { free = "$buffers" },
    { lock = "queue" },
    { compute = "$handoff" },
    { unlock = "queue" },
  ] } },
]
"""


def _row(out: str, *needles: str, after: str = "") -> list[str]:
    """The cells of the first table row containing every needle (after the text ``after``)."""
    out = out[out.index(after) :]
    line = next(line for line in out.splitlines() if all(n in line for n in needles))
    return [c.strip() for c in re.split("[│┃]", line)][1:-1]


def test_variants_columns_and_published(cli: RunCli, tmp_path: Path) -> None:
    spec = tmp_path / "variants.toml"
    spec.write_text(VARIANTS)
    r = cli("run", spec)
    assert r.code == 0, r.err
    assert r.err == ""
    header = _row(r.out, "workload", "scenario")
    assert header[0] == "variant"
    assert header[-2:] == ["tlb_latency_mean_us", "ipis_resched"]
    for label in ("vm.tlb=ipi", "vm.tlb=pv"):
        row = _row(r.out, label, "ep")
        assert row[-2:] == ["—", "0"]  # no shootdowns: no latency; no rescheduling IPIs either
    assert "Published comparison" in r.out
    assert "not measured" in _row(r.out, "paper-A")
    b = _row(r.out, "paper-B")
    assert b[0] == "omega"
    assert sorted(b[1].split(", ")) == ["scenario=uc", "vcpus=2", "vm.tlb=ipi"]
    assert b[3] == "2" and b[4].endswith("×") and b[5] == "1/1"
    assert "not run" in _row(r.out, "paper-C")
    assert "TLB shootdown latency CDF" not in r.out  # no [report] cdf


def test_json_lines_carry_variant_and_metrics_only(cli: RunCli, tmp_path: Path) -> None:
    spec = tmp_path / "variants.toml"
    spec.write_text(VARIANTS)
    r = cli("run", spec, "--json")
    assert r.code == 0, r.err
    results = r.json_lines()  # nothing but JSON on stdout
    assert [x["variant"] for x in results] == ["vm.tlb=ipi", "vm.tlb=pv"]
    assert all(isinstance(x["metrics"], dict) for x in results)
    assert "tlb_latency_mean_us" not in results[0]["metrics"]
    validate = cli("validate", spec, "--json")
    assert [c["variant"] for c in validate.json_lines()] == ["vm.tlb=ipi", "vm.tlb=pv"]


def test_cdf_table_and_files(cli: RunCli, tmp_path: Path) -> None:
    spec = tmp_path / "cdf.toml"
    spec.write_text(CDF)
    out = tmp_path / "out" / "lat.csv"
    out.parent.mkdir()
    r = cli("run", spec, "--cdf-out", out)
    assert r.code == 0, r.err
    assert "TLB shootdown latency CDF (µs)" in r.out
    cdf_title = "TLB shootdown latency CDF (µs)"
    header = _row(r.out, "samples", "p50", after=cdf_title)
    assert header == ["variant", "workload", "scenario", "vCPUs", "samples", "p10", "p50", "p90", "p99", "max"]
    counts = {}
    for label in ("vm.tlb=ipi", "vm.tlb=pv"):
        row = _row(r.out, label, "churn", after=cdf_title)
        counts[label] = int(row[4].replace(",", ""))
        quantiles = [float(v.replace(",", "")) for v in row[5:]]
        assert counts[label] > 0
        assert quantiles == sorted(quantiles) and quantiles[0] > 0

    with out.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["variant", "scenario", "workload", "vcpus", "seed", "latency_us", "cdf"]
    for label, n in counts.items():
        mine = [row for row in rows if row["variant"] == label]
        assert len(mine) == n
        cells = {(row["scenario"], row["workload"], row["vcpus"], row["seed"]) for row in mine}
        assert cells == {("UC", "churn", "2", "1")}
        latencies = [float(row["latency_us"]) for row in mine]
        assert latencies == sorted(latencies)
        cdf = [float(row["cdf"]) for row in mine]
        assert cdf == sorted(cdf) and cdf[-1] == 1.0

    png = out.with_suffix(".png")
    if HAS_MATPLOTLIB:
        assert png.read_bytes().startswith(b"\x89PNG")
        assert r.err == ""
        assert sorted(p.name for p in out.parent.iterdir()) == ["lat.csv", "lat.png"]
    else:
        assert not png.exists()
        assert r.err.count("\n") == 1 and "matplotlib" in r.err and "Traceback" not in r.err
        assert sorted(p.name for p in out.parent.iterdir()) == ["lat.csv"]


def test_cdf_out_with_json_keeps_stdout_json(cli: RunCli, tmp_path: Path) -> None:
    spec = tmp_path / "cdf.toml"
    spec.write_text(CDF)
    out = tmp_path / "lat.csv"
    r = cli("run", spec, "--json", "--cdf-out", out)
    assert r.code == 0, r.err
    assert len(r.json_lines()) == 2
    assert out.read_text().startswith("variant,scenario,workload,vcpus,seed,latency_us,cdf\n")


def test_cdf_out_needs_a_cdf_report(cli: RunCli, tmp_path: Path) -> None:
    spec = tmp_path / "variants.toml"
    spec.write_text(VARIANTS)
    r = cli("run", spec, "--cdf-out", tmp_path / "lat.csv")
    assert r.code == 2
    assert r.out == ""
    assert r.err.startswith("vcpulab: error: --cdf-out needs [report] cdf") and r.err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["variants.toml"]


def test_cdf_out_bad_paths(cli: RunCli, tmp_path: Path) -> None:
    spec = tmp_path / "cdf.toml"
    spec.write_text(CDF)
    for bad, message in (
        (tmp_path / "lat.png", "name the CSV file"),
        (tmp_path / "missing" / "lat.csv", "does not exist"),
        (tmp_path, "is a directory"),
    ):
        r = cli("run", spec, "--cdf-out", bad)
        assert r.code == 2, bad
        assert r.err.startswith("vcpulab: error:") and message in r.err and r.err.count("\n") == 1
        assert r.out == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cdf.toml"]
