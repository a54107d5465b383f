"""Shared helpers: run the installed ``vcpulab`` command the way a user would."""

from __future__ import annotations

import errno
import fcntl
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]

# pytest-xdist's workers (make test runs most tests with `pytest -n`) carry COLUMNS=80 and
# LINES=24 in their environment, which the commands the tests start would take for a
# terminal's size; the tests run them as pipes, as serial pytest does.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)

RESULT_KEYS = frozenset(
    """workload scenario vcpus threads seed t_native_s t_virt_s delta_eta_r delta_eta_t omega
    weighted_speedup c_native_ns c_virt_ns exits host_ns_by_reason guest_ns host_ns events
    duration_s wall_s instances breakdown""".split()
)

# Built-ins the tests and the quickstart rely on (the full list is whatever `vcpulab workloads` says).
CORE_WORKLOADS = frozenset({"ep", "lock", "barrier", "spinbarrier", "forkjoin", "kspin"})


def vcpulab_command() -> list[str]:
    """The console script installed beside this interpreter, else ``python -m vcpulab``."""
    script = Path(sys.executable).with_name("vcpulab")
    return [str(script)] if script.exists() else [sys.executable, "-m", "vcpulab"]


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json_lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.out.splitlines() if line.strip()]


RunCli = Callable[..., Result]


def run_cli(
    *args: object,
    cwd: Path | None = None,
    timeout: float = 600,
    env_extra: dict[str, str] | None = None,
    preexec_fn: Callable[[], None] | None = None,
) -> Result:
    env = dict(os.environ)
    env.pop("VCPULAB_DEBUG", None)
    if cwd is None:
        # `vcpulab run SPEC` stores into results/<spec name> under the working directory: keep
        # each call's store apart, and out of the repository.
        env["VCPULAB_RESULTS"] = tempfile.mkdtemp(prefix="vcpulab-results-")
    env.update(env_extra or {})
    proc = subprocess.run(
        vcpulab_command() + [str(a) for a in args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=preexec_fn,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def as_from_a_terminal() -> None:
    """Run in a child before it executes (``preexec_fn``): SIGINT at its default, as a command
    started from a terminal has it. A suite run in the background has SIGINT ignored; a command
    inherits that and rightly keeps ignoring it, so a test's Ctrl-C would do nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def spawn_cli(
    *args: object, cwd: Path, stdout: int = subprocess.DEVNULL, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """Starts ``vcpulab ARGS`` without waiting, in a session of its own (so a test can signal
    or kill it with everything it started), no input, stderr (text) to read, and SIGINT as
    from a terminal (:func:`as_from_a_terminal`)."""
    return subprocess.Popen(
        vcpulab_command() + [str(a) for a in args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=as_from_a_terminal,
    )


@pytest.fixture
def ctrl_c() -> Iterator[None]:
    """For a test that sends SIGINT to its own process: the default handler (KeyboardInterrupt)
    while it runs, even when the suite runs with SIGINT ignored (in the background)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def journaled(store: Path) -> int:
    """Results a sweep has written to the journal of results directory ``store`` and not yet
    committed to a part (a torn last line does not count)."""
    journal = store / "journal.jsonl"
    return journal.read_text().count("\n") if journal.exists() else 0


@pytest.fixture
def cli(tmp_path: Path) -> RunCli:
    """``cli("run", "--workload", "ep")`` runs vcpulab in a fresh directory."""

    def run(*args: object, cwd: Path | None = None, timeout: float = 600) -> Result:
        return run_cli(*args, cwd=cwd or tmp_path, timeout=timeout)

    return run


def one_line_error(r: Result, code: int = 2) -> str:
    """The single line of a command's error (exit ``code``, ``vcpulab: error: ...``, no
    traceback)."""
    assert r.code == code, (r.code, r.out, r.err)
    lines = r.err.splitlines()
    assert len(lines) == 1, r.err
    assert lines[0].startswith("vcpulab: error: ") and "Traceback" not in r.err
    return lines[0]


@functools.cache
def syscall_counts_missing() -> str | None:
    """Why this machine cannot count system calls with perf tracepoints (tracefs not mounted,
    no permission), as ``vcpulab`` itself reports it; None when it can. `make test` mounts
    tracefs when it may (root); elsewhere the tests that need the counts skip with this reason."""
    from vcpulab.bridge.launch import run_measured

    event = "syscalls:sys_enter_madvise"
    m = run_measured(["true"], events=[event])
    return None if m.count(event) is not None else f"no system-call counts here: {m.counters[event]}"


def busy_spec(seeds: int, times: int, scenarios: str = '"native", "UC"') -> str:
    """A spec of ``seeds`` cells per scenario of a workload of ``times`` short lock-protected
    sections (60,000: about a tenth of a second of simulation), for tests that stop a sweep
    part-way and need it still running after its first result."""
    return f"""\
[experiment]
workloads = ["busy"]
scenarios = [{scenarios}]
vcpus = [2]
seeds = [{", ".join(str(s) for s in range(1, seeds + 1))}]

[workloads.busy]
description = "many short lock-protected sections"
objects = {{ m = "mutex" }}
program = [{{ repeat = {{ times = {times}, body = [
    {{ compute = "10us" }}, {{ lock = "m" }}, {{ compute = "1us" }}, {{ unlock = "m" }},
] }} }}]
"""


def without_wall(result: dict[str, Any]) -> dict[str, Any]:
    """A result minus the fields measured on the host (not part of the deterministic output)."""
    return {k: v for k, v in result.items() if k != "wall_s"}


def debian_install(package: str, present: Callable[[], bool]) -> str | None:
    """Installs Debian's ``package`` with apt-get unless ``present()`` (the test machines run as
    root and reach Debian's mirrors): None when it is there afterwards, else why not. apt-get's
    package list may be missing or stale on a fresh machine: updated once, then retried."""
    if present():
        return None
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return f"{package} is not installed and this user cannot apt-get install it"
    # One apt-get at a time: tests run in parallel (pytest -n) would find dpkg's lock taken.
    with open(Path(tempfile.gettempdir()) / "vcpulab-tests-apt.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _apt_get_install(package, present)


def _apt_get_install(package: str, present: Callable[[], bool]) -> str | None:
    if present():
        return None
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", package]
    proc = subprocess.run(install, capture_output=True, text=True, env=env, timeout=900)
    if proc.returncode != 0:
        subprocess.run(["apt-get", "update"], capture_output=True, text=True, env=env, timeout=600)
        proc = subprocess.run(install, capture_output=True, text=True, env=env, timeout=900)
    if present():
        return None
    return (
        f"{package} is not installed and apt-get install -y --no-install-recommends {package} exited "
        f"{proc.returncode}: {proc.stderr.strip()[-300:]}"
    )


def debian_program(binary: str, package: str) -> tuple[str | None, str]:
    """``binary`` on the PATH, installed from Debian's ``package`` when absent
    (:func:`debian_install`): (its path, "") or (None, why it could not be had)."""
    why = debian_install(package, lambda: shutil.which(binary) is not None)
    found = shutil.which(binary)
    return (found, "") if found else (None, why or f"{binary} is not on the PATH after installing {package}")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs mounted for the test (needs root, as CI runs)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root (CI runs as root)")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield disk
    finally:
        if subprocess.run(["umount", str(disk)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(disk)], check=True)


def fill(disk: Path) -> Path:
    """Fills the file system of ``disk`` up to its last page; returns the filler file."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
    return filler
