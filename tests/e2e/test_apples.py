"""`vcpulab run examples/apples.toml` at reduced size, as a user runs it: the APPLES tables, the
classification and the window plot (docs/apples.md). The shapes themselves are asserted by the
Rust test crates/vcpulab-sim/tests/it/apples.rs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VCPULAB = Path(sys.executable).with_name("vcpulab")

# kspin at full size (its cells take ~0.1 s) and a smaller hackbench. Smaller kspin runs can fall
# into a directed-yield storm at small fixed windows (docs/apples.md, "Yield storms"): the event
# limit keeps a regression from hanging the test.
REDUCED = [
    "--set",
    'experiment.workloads=["kspin", "hackbench"]',
    "--set",
    "experiment.seeds=[1]",
    "--set",
    "workloads.hackbench.params.loops=20",
    "--set",
    "limits.max_events=50000000",
]


def test_apples_example_prints_the_tables_and_plots_the_window(tmp_path: Path) -> None:
    png = tmp_path / "window.png"
    out = subprocess.run(
        [str(VCPULAB), "run", str(ROOT / "examples/apples.toml"), *REDUCED, "--window-out", str(png)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    text = out.stdout
    for title in ("Performance relative to KVM", "Average PLE inefficiency", "Spinlock-intensive?"):
        assert title in text, text
    for variant in ("fixed 512", "fixed 32768", "APLE", "HVS", "APPLES"):
        assert variant in text
    kspin_oc = next(
        line
        for line in text.splitlines()
        if "kspin" in line and "OC" in line and "%" in line and ("yes" in line or "no" in line)
    )
    assert "yes" in kspin_oc, kspin_oc
    assert png.stat().st_size > 10_000
    assert png.with_suffix(".csv").read_text().startswith("variant,workload,scenario,vcpus,seed,t_ms,window_cycles")


def test_any_vm_can_use_the_apples_policies_from_the_command_line(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            str(VCPULAB),
            "run",
            "--workload",
            "kspin",
            "--scenario",
            "OC",
            "--vcpus",
            "4",
            "--set",
            "workloads.kspin.params.iterations=300",
            "--set",
            'vm.ple.window_policy="aple"',
            "--set",
            'vms.1.ple.yield_policy="hvs_reversed"',
            "--json",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    import json

    row = json.loads(out.stdout.splitlines()[0])
    vms = row["run"]["vms"]
    assert [v["window_policy"] for v in vms] == ["aple", "aple"]
    assert [v["yield_policy"] for v in vms] == ["kvm", "hvs_reversed"]
    assert "ple_inefficiency" in row["metrics"]
