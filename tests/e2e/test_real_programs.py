"""Real multithreaded programs from Debian's packages, traced, predicted and mitigated as a user
would (docs/bridge.md, "Real programs"). A program that is not installed is installed with
apt-get; where that cannot be done the test skips, saying why."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import debian_program, run_cli, vcpulab_command


def data_file(tmp_path: Path, mib: int = 3) -> Path:
    """Incompressible-ish text: base64 of a fixed pseudo-random stream (the same on every run)."""
    import base64
    import random

    rng = random.Random(26)
    path = tmp_path / "in.txt"
    path.write_bytes(base64.encodebytes(rng.randbytes(mib * 3 << 18)))
    return path


def program(binary: str, package: str) -> str:
    found, why = debian_program(binary, package)
    if found is None:
        pytest.skip(why)
    return found


def test_pigz_is_traced_predicted_and_mitigated(tmp_path: Path) -> None:
    """pigz's replay deadlocked on every trace (issue 26): its join_all waits once on a condition
    variable while several workers broadcast, then joins them holding the lock."""
    pigz = program("pigz", "pigz")
    data = data_file(tmp_path)
    argv = [pigz, "-p", "4", "-c", str(data)]
    plain = subprocess.run(argv, capture_output=True, check=True).stdout
    for i in range(3):
        trace = tmp_path / f"pigz{i}.vtrace"
        r = subprocess.run([*vcpulab_command(), "trace", "-o", str(trace), "--", *argv], capture_output=True, check=False)
        assert r.returncode == 0, r.stderr.decode()
        assert r.stdout == plain
        out = tmp_path / f"pred{i}.json"
        p = run_cli("predict", trace, "--scenario", "UC", "--scenario", "OC", "--seed", i + 1, "-o", out)
        assert p.code == 0, p.err
        pred = json.loads(out.read_text())
        rep = pred["trace"]["replay"]
        assert rep["cmdline"][0].endswith("pigz") and rep["threads"] >= 5
        assert rep["wakeups_matched"] > 0 and rep["wakeups_tied"] >= rep["wakeups_matched"]
        assert [x["scenario"] for x in pred["results"]] == ["native", "UC", "OC"]
    report = tmp_path / "m.json"
    m = run_cli("mitigate", "--runs", 2, "--all", "-o", report, "--", *argv)
    assert m.code == 0, m.err
    mitigations = json.loads(report.read_text())["mitigations"]
    assert mitigations and all(x["not_predicted"] is None or "failed" not in x["not_predicted"] for x in mitigations)
