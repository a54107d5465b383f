"""The memory model's outputs as a user sees them: a tiny NUMA sweep (canneal natively and in one
VM of 8 and 32 vCPUs, NUMA hidden and exposed: 8 cells, 32 vCPUs span two sockets) through
`vcpulab run`, which prints the memory table, and `vcpulab report`, whose page has the Memory
and NUMA section and whose memory.csv agrees with the stored metrics. The model's calibration is
for the Rust tests; only coarse, placement-level facts are checked here."""

from __future__ import annotations

import csv
import re
from pathlib import Path

from conftest import RunCli

SPEC = """\
[experiment]
workloads = ["parsec.canneal"]
scenarios = ["native", "UC"]
vcpus = [8, 32]
seeds = [1]
vary = { "vm.numa" = ["hidden", "exposed"] }
"""


def test_memory_table_and_report_section(cli: RunCli, tmp_path: Path) -> None:
    spec = tmp_path / "numa.toml"
    spec.write_text(SPEC)
    results = tmp_path / "results"
    r = cli("run", spec, "--results", results, timeout=300)
    assert r.code == 0, r.err
    assert "Traceback" not in r.err

    # The console table: 32 vCPUs span two sockets, so it is printed; native runs are identical
    # in both variants (one row, "all"), then one row per variant.
    lines = r.out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Memory and NUMA: CPI / remote / bandwidth"))
    table = "\n".join(lines[start : start + 12])
    assert re.search(r"native\s+│ all\s+│", table), table
    for variant in ("vm.numa=hidden", "vm.numa=exposed"):
        assert re.search(rf"UC\s+│ {re.escape(variant)}\s+│", table), table
    cells = re.findall(r"(\d+\.\d{3}) / (\d+)% / (\d+\.\d\d)", table)
    assert len(cells) == 3 * 2  # 3 rows × 2 vCPU counts

    r = cli("report", results, timeout=300)
    assert r.code == 0, r.err
    page = (results / "report.html").read_text()
    assert '<section id="memory"><h2>Memory and NUMA</h2>' in page
    assert '<a href="#memory">Memory and NUMA</a>' in page
    for label in ("CPI per vCPU count", "fraction of memory accesses served remotely"):
        assert f'aria-label="{label}"' in page
    assert '<a href="report_csv/memory.csv">memory.csv</a>' in page

    with open(results / "report_csv" / "memory.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 8  # every cell (one seed)
    by = {(r["scenario"], r["variant"], int(r["vcpus"])): r for r in rows}
    for row in rows:
        assert float(row["cpi"]) >= 1.0
        assert 0.0 <= float(row["remote_fraction"]) <= 1.0
        assert 0.0 <= float(row["memory_stall_share"]) < 1.0
    # 8 vCPUs fit one socket: nothing remote, nothing normalised (native has no remote access).
    for key, row in by.items():
        if key[2] == 8:
            assert float(row["remote_fraction"]) == 0.0 and row["remote_vs_native"] == "", key
    # At 32 vCPUs native has remote accesses; the guest that sees NUMA is at least as local as the
    # one that does not, and the VM runs are normalised to native.
    hidden, exposed = by[("UC", "vm.numa=hidden", 32)], by[("UC", "vm.numa=exposed", 32)]
    assert float(by[("native", "vm.numa=hidden", 32)]["remote_accesses"]) > 0
    assert float(hidden["remote_vs_native"]) >= float(exposed["remote_vs_native"]) > 0
    assert float(hidden["remote_fraction"]) >= float(exposed["remote_fraction"])
    assert float(hidden["cpi"]) >= float(exposed["cpi"])
    # The CSV and the console show the same CPI.
    assert f"{float(hidden['cpi']):.3f} / " in table
