"""`vcpulab run` with `[report] scalability` and `spread` on a small DIS-style experiment: the
fork-join benchmark natively and overcommitted, over 1 and 2 vCPUs, next to two co-runners, with
and without asymmetric vCPUs. The sections must appear, agree with the results written with
--out, and hold plausible numbers (the policy's effect itself is for the Rust tests)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import RunCli

SPEC = """\
[experiment]
workloads = ["forkjoin_imbalanced"]
scenarios = ["native", "OC"]
vcpus = [1, 2]
oc_vms = 2
vary = { "experiment.corunner" = ["cpuhog", "hackbench"] }

[[experiment.variants]]
name = "symmetric"

[[experiment.variants]]
name = "asym"
set = { "host.asymmetric.allocation" = true, "host.asymmetric.latency" = true, "host.asymmetric.resolver" = true }

[report]
baseline = "symmetric"
scalability = true
spread = "experiment.corunner"
"""

SMALL = ["--set", "workloads.forkjoin_imbalanced.params.iterations=20"]

PAIR = re.compile(r"(\d+\.\d\d) / (\d+\.\d\d)")
PERCENT = re.compile(r"(-?\d+\.\d)%")


def section(text: str, title: str) -> list[str]:
    """The lines of the table titled ``title`` (up to the next blank line)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


def test_scalability_spread_and_asymmetric_sections(cli: RunCli, tmp_path: Path) -> None:
    spec = tmp_path / "scaling.toml"
    spec.write_text(SPEC)
    out = tmp_path / "results.jsonl"
    png = tmp_path / "speedup.png"
    r = cli("run", spec, *SMALL, "--no-store", "--out", out, "--scaling-out", png, timeout=120)
    assert r.code == 0, r.err
    assert "Traceback" not in r.err
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(results) == 16

    # Speedup curves: one row per (scenario, variant), "measured / efficiency-based" per count.
    speedup = section(r.out, "Speedup over vCPU counts: measured / efficiency-based")
    rows = [line for line in speedup if "forkjoin_imbalanced" in line]
    assert len(rows) == 8
    for line in rows:
        (m1, e1), (m2, e2) = PAIR.findall(line)
        assert m1 == "1.00"
        assert 1.2 < float(m2) <= 2.0, line  # two vCPUs help, but not beyond ideal
        # The efficiency-based speedup may pass the ideal a little in a VM: it counts the time a
        # vCPU borrows beyond its per-core allocation, which the host's task groups hand a VM's
        # busy vCPU while its sibling idles (docs/scalability.md).
        ideal = 2.0 if "native" in line else 2.2
        assert 0.5 < float(e1) <= 1.2 and 1.0 < float(e2) <= ideal, line
        # The printed speedup is t(1) / t(2) of the results.
        scenario = "native" if "native" in line else "OC"
        variant = next(v for v in {x["variant"] for x in results} if f" {v} " in line)
        t = {
            x["vcpus"]: x["t_native_s"] if scenario == "native" else x["t_virt_s"]
            for x in results
            if x["scenario"] == scenario and x["variant"] == variant
        }
        assert m2 == f"{t[1] / t[2]:.2f}", line

    # Decomposition: useful + busy-wait + overhead + unused − borrowed = 100 % (to rounding).
    decomposition = section(r.out, "Efficiency decomposition")
    rows = [line for line in decomposition if "forkjoin_imbalanced" in line]
    assert len(rows) == 16
    for line in rows:
        useful, busy, overhead, unused, borrowed = map(float, PERCENT.findall(line))
        assert abs(useful + busy + overhead + unused - borrowed - 100) < 0.5, line

    # Spread over the co-runner: natively it does not matter; overcommitted it does.
    spread = section(r.out, "Performance spread over experiment.corunner")
    rows = [line for line in spread if "forkjoin_imbalanced" in line]
    assert len(rows) == 8  # (native, OC) × 2 vCPU counts × 2 variants
    assert "experiment.corunner: cpuhog, hackbench" in " ".join(spread)  # the same values everywhere: in the caption
    for line in rows:
        cv = float(PERCENT.findall(line)[-1])
        assert 0 <= cv < 50, line
        if "native" in line:
            assert cv == 0, line
        if "symmetric" in line:
            assert line.rstrip(" │").endswith("1.000"), line  # the baseline against itself
    assert any(float(PERCENT.findall(line)[-1]) > 0 for line in rows if " OC " in line)

    # Asymmetric vCPUs: only the asym variants, with every component on.
    asym = section(r.out, "Asymmetric vCPUs")
    rows = [line for line in asym if line.startswith("│ asym")]
    assert len(rows) == 2
    assert all("A+L+R" in line for line in rows)
    assert not any(line.startswith("│ symmetric") for line in asym)

    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.with_suffix(".csv").read_text().startswith("workload,scenario,variant,vcpus,runs,t_mean_s,speedup")
