"""SIGINT and SIGTERM end everything a command started: worker processes, the traced or
measured program and its children, within a few seconds; they leave no temporary file, keep
what the store committed, and exit 130 / 143 with one line. Each command is started in a
session of its own, so whatever it started (and not re-parented elsewhere) is found by its
session id."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from conftest import REPO, busy_spec, journaled, run_cli, spawn_cli

# Times how fast commands end on a signal: run alone, after the rest (make test).
pytestmark = pytest.mark.measures

# Many cells of a tenth of a second or so: still running long after the first is stored.
SEEDS = 200
SPEC = busy_spec(SEEDS, 60000)

CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}


def session(sid: int) -> list[psutil.Process]:
    """The live (not zombie) processes of session ``sid``."""
    found = []
    for p in psutil.process_iter():
        try:
            if os.getsid(p.pid) == sid and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (OSError, psutil.Error):
            continue
    return found


@pytest.fixture
def start() -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Starts ``vcpulab ARGS`` in a session of its own; whatever is left of the session is
    killed at the end of the test."""
    started: list[subprocess.Popen[str]] = []

    def run(*args: object, cwd: Path) -> subprocess.Popen[str]:
        proc = spawn_cli(*args, cwd=cwd)
        started.append(proc)
        return proc

    yield run
    for proc in started:
        for p in session(proc.pid):
            p.kill()
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def wait_until(condition: Callable[[], bool], proc: subprocess.Popen[str], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            pytest.fail(f"the command ended (code {proc.returncode}) before {what}: {proc.communicate()[1]}")
        if time.monotonic() > deadline:
            pytest.fail(f"not {what} after {timeout} s")
        time.sleep(0.02)


def stop(proc: subprocess.Popen[str], signum: int) -> str:
    """Sends ``signum`` to the command alone; its stderr once it has ended (a hang fails)."""
    proc.send_signal(signum)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running 60 s after {signal.Signals(signum).name}")
    return err


def assert_nothing_left(sid: int) -> None:
    """No process of the session is alive a few seconds after the command ended."""
    deadline = time.monotonic() + 5
    while (left := session(sid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, [(p.pid, p.name()) for p in left]


@pytest.mark.parametrize("jobs", [1, 2])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_a_sweep_and_its_workers(
    start: Callable[..., subprocess.Popen[str]], tmp_path: Path, signum: int, jobs: int
) -> None:
    (tmp_path / "many.toml").write_text(SPEC)
    proc = start("run", "many.toml", "--results", "store", "-j", jobs, cwd=tmp_path)
    if jobs > 1:
        wait_until(lambda: len(psutil.Process(proc.pid).children()) >= jobs, proc, "its workers started")
    wait_until(lambda: journaled(tmp_path / "store") > 0, proc, "a cell was stored")
    err = stop(proc, signum)
    assert proc.returncode == CODES[signum], err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("vcpulab: error: interrupted"), err
    assert "run the same command again" in lines[0]
    assert ("SIGTERM" in lines[0]) == (signum == signal.SIGTERM)
    assert_nothing_left(proc.pid)
    store = tmp_path / "store"
    assert not [p for p in store.rglob("*") if p.name.endswith(".tmp")]
    # What finished is kept.
    r = run_cli("query", store, "SELECT count(*) FROM runs", "--format", "csv", cwd=tmp_path)
    assert r.code == 0 and 0 < int(r.out.splitlines()[1]) < 2 * SEEDS, (r.out, r.err)


def test_workers_die_with_a_killed_parent(start: Callable[..., subprocess.Popen[str]], tmp_path: Path) -> None:
    (tmp_path / "many.toml").write_text(SPEC)
    proc = start("run", "many.toml", "--results", "store", "-j", 2, cwd=tmp_path)
    wait_until(lambda: len(psutil.Process(proc.pid).children()) >= 2, proc, "its workers started")
    wait_until(lambda: journaled(tmp_path / "store") > 0, proc, "a cell was stored")
    proc.kill()  # no clean-up can run
    proc.communicate(timeout=60)
    assert_nothing_left(proc.pid)


@pytest.fixture(scope="module")
def tracer() -> None:
    """libvtrace.so, built as `make native` builds it."""
    subprocess.run(["make", "-s", "-C", str(REPO), "native"], check=True, capture_output=True)


# A program that starts another and waits: both must be ended, not only the one vcpulab started.
SLEEPER = ["sh", "-c", "sleep 300 & sleep 300; wait"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_a_traced_program_and_removes_the_temporary_trace(
    start: Callable[..., subprocess.Popen[str]], tracer: None, tmp_path: Path, signum: int
) -> None:
    proc = start("trace", "-o", "out.vtrace", "--", *SLEEPER, cwd=tmp_path)
    wait_until(lambda: any(tmp_path.glob(".out.vtrace.*.tmp")), proc, "the tracer created its file")
    wait_until(lambda: len(session(proc.pid)) >= 4, proc, "the program started its children")  # vcpulab, sh, 2 sleeps
    err = stop(proc, signum)
    assert proc.returncode == CODES[signum], err
    assert len(err.splitlines()) == 1 and err.startswith("vcpulab: error: interrupted"), err
    assert_nothing_left(proc.pid)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_a_measured_program(
    start: Callable[..., subprocess.Popen[str]], tmp_path: Path, signum: int
) -> None:
    proc = start("characterize", "--", *SLEEPER, cwd=tmp_path)
    wait_until(lambda: len(session(proc.pid)) >= 4, proc, "the program started its children")
    err = stop(proc, signum)
    assert proc.returncode == CODES[signum], err
    assert len(err.splitlines()) == 1 and err.startswith("vcpulab: error: interrupted"), err
    assert_nothing_left(proc.pid)
