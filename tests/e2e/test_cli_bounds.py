"""Every wait the CLI makes is bounded and every one ends on SIGINT or SIGTERM: bench's
duration, characterize-sim's simulation, -j's worker count, --cluster's address and its wait
for workers; and the odd ways a command is started (stdout closed, stdout a pipe that closes)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import one_line_error, run_cli, spawn_cli, vcpulab_command

# A characterize-sim run of many seconds: the lock workload with a thousand times its iterations.
LONG_CHARACTERIZE = (
    "characterize-sim",
    "lock",
    "--cpus",
    "4",
    "--set",
    "workloads.lock.params.iterations=3000000",
    "--set",
    'limits.max_virtual_time="100000s"',
)


@pytest.mark.parametrize("seconds", ["inf", "1e400", "nan", "-1", "0", "3601"])
def test_bench_seconds_are_bounded(seconds: str) -> None:
    line = one_line_error(run_cli("bench", "--seconds", seconds, timeout=60))
    assert "--seconds: expected a positive number of seconds up to 3600" in line


def _started(proc: subprocess.Popen[str], wait_s: float = 1.5) -> None:
    """Gives ``proc`` time to be inside its simulation (it must still be running)."""
    time.sleep(wait_s)
    assert proc.poll() is None, proc.communicate()


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
@pytest.mark.parametrize("args", [("bench", "--seconds", "600"), LONG_CHARACTERIZE], ids=["bench", "characterize-sim"])
def test_a_signal_ends_a_simulation_command(tmp_path: Path, args: tuple[str, ...], signum: int, code: int) -> None:
    proc = spawn_cli(*args, cwd=tmp_path, stdout=subprocess.PIPE)
    try:
        _started(proc)
        proc.send_signal(signum)
        # The simulation checks for signals every few thousand events: it stops at once, not at
        # the end of the run (minutes away); the bound only keeps a broken build from hanging.
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == code, err
    assert err.splitlines()[-1].startswith("vcpulab: error: interrupted") and "Traceback" not in err
    assert out == ""


@pytest.mark.parametrize("jobs", ["0", "100000", str(8 * (os.cpu_count() or 1) + 1)])
def test_jobs_are_bounded(jobs: str) -> None:
    for command in (("run", "--workload", "lock", "--scenario", "UC"), ("reproduce", "LOCK-1")):
        line = one_line_error(run_cli(*command, "-j", jobs, timeout=60))
        assert "--jobs: expected 1 to" in line and "worker processes" in line


@pytest.mark.parametrize(
    ("address", "says"),
    [
        ("not a url", "expected a Dask scheduler address"),
        ("http://127.0.0.1:8787", "that is a web address"),
        ("tcp://127.0.0.1:99999", "expected a Dask scheduler address"),
        ("tcp://127.0.0.1", "expected a Dask scheduler address"),
    ],
)
def test_cluster_addresses_are_checked_before_connecting(tmp_path: Path, address: str, says: str) -> None:
    start = time.monotonic()
    r = run_cli("run", "--workload", "lock", "--scenario", "UC", "--cluster", address, cwd=tmp_path, timeout=120)
    line = one_line_error(r)
    assert line.startswith("vcpulab: error: --cluster: ") and says in line
    assert "Client" not in r.err
    assert time.monotonic() - start < 60  # no connection attempt (Dask's own waits 10-20 s)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_a_scheduler_without_workers_is_waited_for_a_bounded_time(tmp_path: Path) -> None:
    address = f"tcp://127.0.0.1:{_free_port()}"
    dask = str(Path(sys.executable).with_name("dask"))
    with open(tmp_path / "scheduler.log", "wb") as log:
        scheduler = subprocess.Popen(
            [dask, "scheduler", "--host", "127.0.0.1", "--port", address.rsplit(":", 1)[1], "--no-dashboard"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 120
        while b"Scheduler at" not in (tmp_path / "scheduler.log").read_bytes():
            assert scheduler.poll() is None and time.monotonic() < deadline, (tmp_path / "scheduler.log").read_text()
            time.sleep(0.1)
        r = run_cli(
            "run", "--workload", "lock", "--scenario", "UC", "--cluster", address,
            cwd=tmp_path, timeout=300, env_extra={"VCPULAB_CLUSTER_WAIT_S": "2"},
        )  # fmt: skip
    finally:
        os.killpg(scheduler.pid, signal.SIGKILL)
        scheduler.wait()
    assert r.code == 2, r.err
    note, error = r.err.splitlines()
    assert note.startswith("vcpulab: note: the Dask scheduler at") and "waiting up to 2 s" in note
    assert (
        error.startswith("vcpulab: error: --cluster: the Dask scheduler at") and "has no workers (waited 2 s)" in error
    )


def test_a_closed_stdout_is_one_line_error() -> None:
    for args in (("workloads",), ("run", "--workload", "lock", "--scenario", "UC", "--vcpus", "2")):
        proc = subprocess.run(
            vcpulab_command() + list(args),
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            close_fds=True,
            preexec_fn=lambda: os.close(1),
        )
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr == (
            "vcpulab: error: standard output is closed (vcpulab prints its results there; "
            "redirect it to a file or /dev/null)\n"
        )


def test_a_reader_that_goes_away_ends_the_run_quietly(tmp_path: Path) -> None:
    # `vcpulab run ... --json | head -c 100`: the pipe closes after 100 bytes of the first row.
    cmd = vcpulab_command() + [
        "run", "--workload", "lock", "--scenario", "UC,OC", "--vcpus", "2,4", "--seed", "1,2,3", "--json",
    ]  # fmt: skip
    writer = subprocess.Popen(
        cmd, cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert writer.stdout is not None and writer.stderr is not None
    head = writer.stdout.read(100)
    writer.stdout.close()
    err = writer.stderr.read()
    writer.wait(timeout=300)
    assert len(head) == 100
    assert err == b""
    assert writer.returncode == 141  # as a shell reports a pipeline's writer ended by SIGPIPE
