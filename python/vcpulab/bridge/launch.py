"""Running a real program under measurement: perf counters that follow it from its ``exec``,
its threads' CPU time sampled from ``/proc``, its resource usage at exit, and the machine's
TLB-shootdown interrupts around it.

::

    vcpulab                                   the program
    ───────                                   ───────────
    fork ───────────────────────────────────► waits on a pipe (affinity set, env ready)
    attach perf counters to its pid
    read /proc/interrupts (TLB line)
    release ────────────────────────────────► exec(argv)        counting starts
    every `sample_s`: /proc/PID/task/*/schedstat                threads run
    wait4 (pidfd) ◄──────────────────────────  exit
    read counters, /proc/interrupts, rusage

The program's stdin, stdout and stderr are this process's: its output is not touched.
"""

from __future__ import annotations

import errno
import os
import select
import shutil
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._vcpulab import PerfCounters

# madvise calls whose advice drops pages (MADV_DONTNEED 4, MADV_FREE 8;
# include/uapi/asm-generic/mman-common.h): what glibc's heap trimming calls (malloc/arena.c
# shrink_heap), unlike MADV_WILLNEED on a mapped input file, which the allocator's tunables
# cannot change. A tracefs filter on the tracepoint's `behavior` field.
TRIM_MADVISE = "syscalls:sys_enter_madvise if behavior == 4 || behavior == 8"

# Counted for every measured run; an event this machine cannot count is reported as such.
EVENTS = (
    "context-switches",
    "cpu-migrations",
    "page-faults",
    "sched:sched_process_fork",
    "syscalls:sys_enter_mmap",
    "syscalls:sys_enter_munmap",
    "syscalls:sys_enter_madvise",
    TRIM_MADVISE,
    "syscalls:sys_enter_mprotect",
    "syscalls:sys_enter_brk",  # the main arena's growth and trims (malloc.c sysmalloc / systrim)
    "syscalls:sys_enter_futex",
    "syscalls:sys_enter_sched_yield",
)


class LaunchError(Exception):
    """The program could not be started (not found, not executable, bad argument); ``code``
    is the exit status a shell would give (127 not found, 126 cannot run, 2 usage)."""

    def __init__(self, message: str, code: int = 126) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Sample:
    """One sampling interval of the program's threads."""

    t_s: float  # end of the interval, from the exec
    threads: int  # threads alive at its end
    running: float  # average threads on a CPU during the interval (Δ run time / Δt)
    waiting: float  # average threads runnable but waiting for a CPU (Δ run-queue wait / Δt)

    def held_off(self, cpus: int) -> float:
        """Average threads that waited for a CPU while the program ran on fewer than the
        ``cpus`` it was given: CPUs other processes held. (Waiting while the program's own
        threads filled its CPUs is the program's, not the machine's load.)"""
        return min(self.waiting, max(0.0, cpus - self.running))


# Above this share of held-off time (Measurement.held_off_share) a measured wall time says more
# about the machine's other load than about the program: commands that compare wall times with
# the simulator's (an idle machine) say so instead.
BUSY_HELD_OFF_SHARE = 0.1


@dataclass
class Measurement:
    """What one run of a real program measured."""

    argv: list[str]
    cpus: int  # CPUs the program was allowed to use
    status: int  # exit code (>= 0), or -signal if a signal ended it
    wall_s: float
    user_s: float
    sys_s: float
    voluntary_switches: int  # blocking: waits for a lock, an event, I/O
    involuntary_switches: int  # preemption
    max_rss_kib: int
    counters: dict[str, int | str]  # perf event → count, or → why it is unavailable
    tlb_shootdowns: int | None  # the whole machine's TLB-shootdown interrupts meanwhile
    samples: list[Sample] = field(default_factory=list)

    @property
    def cpu_s(self) -> float:
        return self.user_s + self.sys_s

    @property
    def held_off_s(self) -> float:
        """Thread time the program spent runnable but held off its CPUs by other processes
        (sampled from schedstat, see :meth:`Sample.held_off`): 0 on an idle machine, and what
        a busy machine adds to the wall time instead of CPU time."""
        total, last = 0.0, 0.0
        for s in self.samples:
            total += s.held_off(self.cpus) * (s.t_s - last)
            last = s.t_s
        return total

    @property
    def held_off_share(self) -> float:
        """:attr:`held_off_s` as a share of the program's runnable thread time (CPU time plus
        held off): how far other processes' load distorted this run's wall time."""
        held = self.held_off_s
        runnable = self.cpu_s + held
        return held / runnable if runnable > 0 else 0.0

    @property
    def exit_code(self) -> int:
        """The status as a shell reports it (128 + N for signal N)."""
        return self.status if self.status >= 0 else 128 - self.status

    def count(self, event: str) -> int | None:
        value = self.counters.get(event)
        return value if isinstance(value, int) else None

    def to_json(self) -> dict[str, Any]:
        return {
            "argv": self.argv,
            "cpus": self.cpus,
            "status": self.status,
            "wall_s": self.wall_s,
            "user_s": self.user_s,
            "sys_s": self.sys_s,
            "voluntary_switches": self.voluntary_switches,
            "involuntary_switches": self.involuntary_switches,
            "max_rss_kib": self.max_rss_kib,
            "counters": self.counters,
            "tlb_shootdowns": self.tlb_shootdowns,
            "held_off_s": self.held_off_s,
            "samples": [[s.t_s, s.threads, s.running, s.waiting] for s in self.samples],
        }


def resolve(argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """The executable ``argv[0]`` names (searched in PATH like a shell), or a LaunchError."""
    if not argv:
        raise LaunchError("no program given (usage: vcpulab COMMAND [OPTIONS] -- PROGRAM [ARGS...])", 2)
    name = argv[0]
    if os.sep in name:
        path = Path(name)
        if not path.exists():
            raise LaunchError(f"{name}: no such file", 127)
        if path.is_dir() or not os.access(path, os.X_OK):
            raise LaunchError(f"{name}: not an executable file")
        return name
    found = shutil.which(name, path=(env or os.environ).get("PATH"))
    if found is None:
        raise LaunchError(f"{name}: command not found", 127)
    return found


def tlb_shootdowns() -> int | None:
    """The machine's TLB-shootdown interrupts so far (the ``TLB`` line of /proc/interrupts)."""
    try:
        with open("/proc/interrupts", encoding="ascii", errors="replace") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name.strip() == "TLB":
                    return sum(int(x) for x in rest.split() if x.isdigit())
    except OSError:
        return None
    return None


def _schedstat(pid: int) -> tuple[int, int, int]:
    """(threads, Σ run time ns, Σ run-queue wait ns) over the threads of ``pid``."""
    threads = run = wait = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0, 0, 0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                fields = f.read().split()
        except OSError:
            continue  # the thread ended meanwhile
        threads += 1
        run += int(fields[0])
        wait += int(fields[1])
    return threads, run, wait


def run_measured(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cpus: int | None = None,
    sample_s: float = 0.01,
    events: Sequence[str] = EVENTS,
    stdin: int | None = None,
    stdout: int | None = None,
) -> Measurement:
    """Runs ``argv`` to completion under measurement (see the module's diagram). ``cpus``
    restricts it to the first that many CPUs this process may use; ``env`` replaces the
    environment; ``stdin`` and ``stdout`` (file descriptors) replace its standard input and
    output."""
    program = resolve(argv, env)
    allowed = sorted(os.sched_getaffinity(0))
    if cpus is not None:
        if not 1 <= cpus <= len(allowed):
            raise LaunchError(f"--cpus must be between 1 and {len(allowed)} (the CPUs available here; got {cpus})", 2)
        allowed = allowed[:cpus]
    environment = dict(os.environ if env is None else env)
    gate_r, gate_w = os.pipe()
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:  # the child: wait for the counters, then become the program
        try:
            os.close(gate_w)
            os.close(err_r)
            os.read(gate_r, 1)
            os.close(gate_r)
            os.sched_setaffinity(0, allowed)
            if stdin is not None:
                os.dup2(stdin, 0)
            if stdout is not None:
                os.dup2(stdout, 1)
            os.execve(program, list(argv), environment)
        except OSError as e:
            os.write(err_w, f"{e.errno}:{e.strerror}".encode())
        finally:
            os._exit(127)
    os.close(gate_r)
    os.close(err_w)
    # SIGINT and SIGTERM (raised here as KeyboardInterrupt by the CLI's handlers) stop the
    # program and whatever it started before they propagate: nothing outlives the command.
    # (Ctrl-C at a terminal reaches the program directly as well.)
    try:
        try:
            counters = PerfCounters(pid, list(events))
            tlb_before = tlb_shootdowns()
        except BaseException:
            os.kill(pid, signal.SIGKILL)  # never let it run unmeasured
            os.waitpid(pid, 0)
            pid = 0
            raise
        start = time.monotonic()
        os.write(gate_w, b"x")
        os.close(gate_w)
        gate_w = -1
        failure = os.read(err_r, 512)  # empty once the exec succeeded (the pipe closes on exec)
        os.close(err_r)
        err_r = -1
        if failure:
            os.waitpid(pid, 0)
            pid = 0
            code, _, why = failure.decode(errors="replace").partition(":")
            raise LaunchError(
                f"{argv[0]}: cannot run it: {why or os.strerror(int(code) if code.isdigit() else errno.EIO)}"
            )
        samples, (status, rusage, end) = _sample_until_exit(pid, start, sample_s)
        pid = 0
        tlb_after = tlb_shootdowns()
        counts = counters.read()
    except BaseException as e:
        if pid:
            default = signal.SIGINT if isinstance(e, KeyboardInterrupt) else signal.SIGKILL
            stop_program(pid, getattr(e, "signum", default))
        raise
    finally:
        for fd in (gate_w, err_r):
            if fd >= 0:
                os.close(fd)
    return Measurement(
        argv=list(argv),
        cpus=len(allowed),
        status=os.waitstatus_to_exitcode(status),
        wall_s=end - start,
        user_s=rusage.ru_utime,
        sys_s=rusage.ru_stime,
        voluntary_switches=rusage.ru_nvcsw,
        involuntary_switches=rusage.ru_nivcsw,
        max_rss_kib=rusage.ru_maxrss,
        counters=counts,
        tlb_shootdowns=None if tlb_before is None or tlb_after is None else tlb_after - tlb_before,
        samples=samples,
    )


def _sample_until_exit(pid: int, start: float, sample_s: float) -> tuple[list[Sample], tuple[int, Any, float]]:
    samples: list[Sample] = []
    pidfd = os.pidfd_open(pid)
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    try:
        last_t, (_, last_run, last_wait) = start, _schedstat(pid)
        while True:
            if poller.poll(sample_s * 1000):
                break
            now = time.monotonic()
            threads, run, wait = _schedstat(pid)
            if threads:
                dt = now - last_t
                # Threads that ended during the interval take their last slice with them: a
                # sum can fall, and a fall is not negative parallelism.
                samples.append(
                    Sample(now - start, threads, max(0, run - last_run) / 1e9 / dt, max(0, wait - last_wait) / 1e9 / dt)
                )
            last_t, last_run, last_wait = now, run, wait
        _, status, rusage = os.wait4(pid, 0)
        end = time.monotonic()
    finally:
        os.close(pidfd)
    return samples, (status, rusage, end)


# How long a program stopped by SIGINT/SIGTERM of vcpulab gets to exit on its own (the tracer
# flushes its buffers then) before it and its descendants are killed.
STOP_GRACE_S = 1.0


def stop_program(pid: int, signum: int = signal.SIGTERM, grace_s: float = STOP_GRACE_S) -> None:
    """Ends the program ``pid`` (a child of this process, not yet reaped) and every process
    it started: sends them ``signum``, waits up to ``grace_s`` for the program to exit, then
    kills what is left with SIGKILL and reaps the program. A further interruption meanwhile
    only cuts the grace short."""
    import psutil

    def family() -> list[psutil.Process]:
        try:
            program = psutil.Process(pid)
            return [program, *program.children(recursive=True)]
        except psutil.Error:
            return []

    procs = family()
    for p in procs:
        try:
            p.send_signal(signum)
        except psutil.Error:
            pass
    # Wait for the program, noting the descendants it starts meanwhile (once it has exited,
    # its orphans are no longer its children). psutil checks that a pid still names the
    # process it saw, so a reused pid is never hit.
    deadline = time.monotonic() + (grace_s if signum != signal.SIGKILL else 0.0)
    try:
        while procs and procs[0].is_running() and time.monotonic() < deadline:
            seen = {p.pid for p in procs}
            procs += [p for p in family() if p.pid not in seen]
            psutil.wait_procs(procs[:1], timeout=0.05)
    except KeyboardInterrupt:
        pass
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
    try:
        psutil.wait_procs([p for p in procs if p.pid != pid], timeout=grace_s)
    except KeyboardInterrupt:
        pass
