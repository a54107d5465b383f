"""`vcpulab characterize -- PROGRAM`: real programs measured on this machine, through the CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import run_cli, syscall_counts_missing

# Times real programs on this machine: run alone, after the rest (make test).
pytestmark = pytest.mark.measures

# A program with a known number of each event: N madvise(MADV_DONTNEED) and munmap calls, T
# threads each computing ~W ms, output on stdout, exit status from argv.
PROGRAM = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
static double work_ms;
static void *spin(void *arg) {
    (void)arg;
    struct timespec a, b;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    volatile unsigned long x = 1;
    for (;;) {
        for (int i = 0; i < 100000; i++) x = x * 6364136223846793005UL + 1;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
        if ((b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6 >= work_ms) break;
    }
    return NULL;
}
int main(int argc, char **argv) {
    int n = atoi(argv[1]), threads = atoi(argv[2]), status = atoi(argv[4]);
    work_ms = atof(argv[3]);
    for (int i = 0; i < n; i++) {
        char *p = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        p[0] = 1;
        madvise(p, 8192, MADV_DONTNEED);
        munmap(p, 8192);
    }
    pthread_t t[64];
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, spin, NULL);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    printf("done %d\n", n);
    return status;
}
"""


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("prog")
    src = d / "prog.c"
    src.write_text(PROGRAM)
    exe = d / "prog"
    subprocess.run(["gcc", "-O1", "-pthread", "-o", str(exe), str(src)], check=True)
    return exe


def test_counts_and_output_of_a_real_program(program: Path, tmp_path: Path) -> None:
    out = tmp_path / "c.json"
    r = run_cli("characterize", "-o", out, "--", program, 500, 1, 50, 0)
    assert r.code == 0, r.err
    assert r.out == "done 500\n"  # the program's stdout, untouched
    assert "scalability type" in r.err and "madvise" in r.err
    c = json.loads(out.read_text())
    m = c["measurement"]
    assert m["status"] == 0 and m["argv"][1:] == ["500", "1", "50", "0"]
    assert m["cpus"] == len(os.sched_getaffinity(0))
    assert 0.04 <= m["user_s"] + m["sys_s"] <= 2.0 and m["wall_s"] >= 0.04
    assert c["scalability_type"] in (1, 2, 3, 4)
    missing = syscall_counts_missing()
    if missing:
        assert isinstance(m["counters"]["syscalls:sys_enter_madvise"], str)  # the reason, not a count
        pytest.skip(missing)
    counts = m["counters"]
    # The program's own calls, plus the few of the loader and libc (glibc madvises an exiting
    # thread's stack away).
    assert 500 <= counts["syscalls:sys_enter_madvise"] <= 502
    assert 500 <= counts["syscalls:sys_enter_munmap"] <= 520
    assert counts["sched:sched_process_fork"] == 1  # one thread


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_parallelism_follows_the_cpus_given(program: Path, tmp_path: Path) -> None:
    both, one = tmp_path / "2.json", tmp_path / "1.json"
    assert run_cli("characterize", "--cpus", 2, "-o", both, "--", program, 0, 2, 300, 0).code == 0
    assert run_cli("characterize", "--cpus", 1, "-o", one, "--", program, 0, 2, 300, 0).code == 0
    c2, c1 = json.loads(both.read_text()), json.loads(one.read_text())
    assert c2["measurement"]["cpus"] == 2 and c1["measurement"]["cpus"] == 1
    assert c2["parallelism"] > 1.5, c2["parallelism"]  # two busy threads on two CPUs
    assert c1["parallelism"] <= 1.05, c1["parallelism"]
    assert c2["high_parallelism"] and c1["high_parallelism"]  # ≥ 75 % of the CPUs given, both
    # On one CPU the two threads take turns: one is runnable while the other runs. (Not compared:
    # preemption counts, which other processes' load raises in both runs.)
    assert c1["waiting_threads"] > 0.5


def test_exit_status_and_signals_pass_through(program: Path, tmp_path: Path) -> None:
    r = run_cli("characterize", "--", program, 0, 0, 0, 3)
    assert r.code == 3 and r.out == "done 0\n"
    assert "exit status 3" in r.err
    r = run_cli("characterize", "--", "sh", "-c", "kill -TERM $$")
    assert r.code == 128 + 15 and "signal 15" in r.err


def test_bad_programs_get_one_line_errors(tmp_path: Path) -> None:
    r = run_cli("characterize", "--", "no-such-program-xyz")
    assert r.code == 127 and r.err.strip() == "vcpulab: error: no-such-program-xyz: command not found"
    r = run_cli("characterize", "--", tmp_path / "missing")
    assert r.code == 127 and "no such file" in r.err and len(r.err.strip().splitlines()) == 1
    text = tmp_path / "text"
    text.write_text("not a program\n")
    r = run_cli("characterize", "--", text)
    assert r.code == 126 and "not an executable file" in r.err
    text.chmod(0o755)
    r = run_cli("characterize", "--", text)  # executable bit, but no interpreter line: exec fails
    assert r.code == 126 and "cannot run it" in r.err, r.err
    r = run_cli("characterize")
    assert r.code == 2 and "no program given" in r.err
    r = run_cli("characterize", "--cpus", 0, "--", "true")
    assert r.code == 2 and "--cpus" in r.err
    r = run_cli("characterize", "--cpus", 4096, "--", "true")
    assert r.code == 2 and "--cpus must be between 1 and" in r.err
    out = tmp_path / "c.json"
    r = run_cli("characterize", "-o", out, "--", "no-such-program-xyz")
    assert r.code == 127 and not out.exists()  # no partial output


@pytest.mark.skipif(shutil.which("xz") is None, reason="xz is not installed")
def test_a_debian_program_characterized_byte_identical(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.write_bytes(b"".join(b"line %d of some compressible text\n" % i for i in range(200_000)))
    plain = subprocess.run(["xz", "-T2", "-c", str(data)], capture_output=True, check=True).stdout
    r = subprocess.run(
        [*__import__("conftest").vcpulab_command(), "characterize", "--", "xz", "-T2", "-c", str(data)],
        capture_output=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == plain
