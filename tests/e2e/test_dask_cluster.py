"""Sweeps on a real Dask cluster that outlives them: a scheduler and a worker process started
here on 127.0.0.1 (`dask scheduler`, `dask worker`), as a user runs them, and stopped here
whatever happens. The worker has two threads, so two tasks run at once in one process."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import Result, busy_spec, journaled, run_cli, spawn_cli, without_wall

# Baselines that are no selected cell's own run (UC's native run) and cells that feed others
# (OC's 1-VM reference is UC's own run): the sweep waits on summaries the worker reports.
SMALL = """\
[experiment]
workloads = ["lock", "barrier"]
scenarios = ["UC", "OC"]
vcpus = [2]
seeds = [1, 2]

[limits]
max_virtual_time = "20s"
"""

# Enough cells (each a tenth of a second or so) that a sweep is still running after it
# journaled its first result.
MANY_SEEDS = 24
MANY = busy_spec(MANY_SEEDS, 60000, '"UC"')


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Ends a process started in its own session, and everything in that session."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the worker's nanny and its worker process too
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The address of a running scheduler with one worker process of two threads."""
    from distributed import Client

    dask = str(Path(sys.executable).with_name("dask"))
    logs = tmp_path_factory.mktemp("dask")
    address = f"tcp://127.0.0.1:{_free_port()}"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for name, args in (
            ("scheduler", ["scheduler", "--host", "127.0.0.1", "--port", address.rsplit(":", 1)[1]]),
            ("worker", ["worker", address, "--host", "127.0.0.1", "--nworkers", "1", "--nthreads", "2"]),
        ):
            with open(logs / f"{name}.log", "wb") as log:
                procs.append(
                    subprocess.Popen(
                        [dask, *args, "--no-dashboard"],
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        cwd=logs,
                        start_new_session=True,
                    )
                )
            if name == "scheduler":
                client = Client(address, timeout="60s", set_as_default=False)
        client.wait_for_workers(1, timeout=120)
        client.close()
        yield address
    finally:
        for proc in reversed(procs):
            _stop(proc)


def vcpulab(*args: object, cwd: Path) -> Result:
    r = run_cli(*args, cwd=cwd, timeout=300)
    assert r.code == 0, r.err
    return r


def results(r: Result) -> list[dict[str, Any]]:
    return [without_wall(x) for x in r.json_lines()]


def stored_keys(cwd: Path, store: str) -> tuple[int, int]:
    """(rows, distinct cell keys) in a results directory."""
    r = vcpulab("query", store, "SELECT count(*) AS n, count(DISTINCT key) AS k FROM runs", "--format", "json", cwd=cwd)
    row = json.loads(r.out)
    return row["n"], row["k"]


def test_the_same_spec_twice_on_one_cluster(cluster: str, tmp_path: Path) -> None:
    # The worker keeps the plan of the first sweep (and what it simulated): the second sweep
    # of the same spec must still get every summary it waits for.
    (tmp_path / "small.toml").write_text(SMALL)
    inline = results(vcpulab("run", "small.toml", "--results", "inline", "-j", "1", "--json", cwd=tmp_path))
    assert len(inline) == 8
    for store in ("r1", "r2"):
        r = vcpulab("run", "small.toml", "--cluster", cluster, "--results", store, "--json", cwd=tmp_path)
        assert results(r) == inline, store
        assert stored_keys(tmp_path, store) == (8, 8)


def test_a_sweep_killed_on_a_cluster_resumes_there(cluster: str, tmp_path: Path) -> None:
    (tmp_path / "many.toml").write_text(MANY)
    reference = results(vcpulab("run", "many.toml", "--cluster", cluster, "--results", "ref", "--json", cwd=tmp_path))
    assert len(reference) == MANY_SEEDS

    proc = spawn_cli("run", "many.toml", "--cluster", cluster, "--results", "killed", cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        while not journaled(tmp_path / "killed"):
            assert proc.poll() is None, f"the sweep ended before storing a result: {proc.communicate()[1]!r}"
            assert time.monotonic() < deadline, "no result stored in time"
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "the sweep had already finished: make it longer"
    # Kept: the rows a flush committed plus those still in the journal (a flush moves lines
    # from the one into the other, so neither alone is a count).
    r = run_cli("query", "killed", "SELECT count(*) FROM runs", "--format", "csv", cwd=tmp_path)
    committed = int(r.out.splitlines()[1]) if r.code == 0 else 0
    assert 0 < committed + journaled(tmp_path / "killed") < MANY_SEEDS, (r.out, r.err)

    # The worker may still be running tasks of the killed sweep, and knows what it simulated.
    resumed = vcpulab("run", "many.toml", "--cluster", cluster, "--results", "killed", "--json", cwd=tmp_path)
    assert results(resumed) == reference
    assert stored_keys(tmp_path, "killed") == (MANY_SEEDS, MANY_SEEDS)
