"""Real multithreaded programs, most from Debian's packages, traced, replayed, predicted and
mitigated as a user would (docs/bridge.md, "Real programs"). A program that is not installed is
installed with apt-get; where that cannot be done the test skips, saying why.

Each program: its output under the tracer is byte-identical to its output without (for ripgrep,
whose threads print in any order, the same lines), its trace replays natively and in a VM without
a deadlock, the replay reports the off-CPU time it cannot explain, and the native replay is close
to the measured time (loosely here: CI machines are shared; the figures on a quiet machine are in
docs/bridge.md)."""

from __future__ import annotations

import base64
import json
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import debian_install, debian_program, run_cli, vcpulab_command

# Times real programs on this machine: run alone, after the rest (make test).
pytestmark = pytest.mark.measures

REPO = Path(__file__).resolve().parents[2]


def data_file(tmp_path: Path, mib: int = 3) -> Path:
    """Incompressible-ish text: base64 of a fixed pseudo-random stream (the same on every run)."""
    rng = random.Random(26)
    path = tmp_path / "in.txt"
    path.write_bytes(base64.encodebytes(rng.randbytes(mib * 3 << 18)))
    return path


def program(binary: str, package: str) -> str:
    found, why = debian_program(binary, package)
    if found is None:
        pytest.skip(why)
    return found


def traced(argv: list[str], trace: Path, unordered: bool = False) -> None:
    """Traces ``argv`` into ``trace``; its output must be the untraced output."""
    plain = subprocess.run(argv, capture_output=True, check=True).stdout
    r = subprocess.run([*vcpulab_command(), "trace", "-o", str(trace), "--", *argv], capture_output=True, check=False)
    assert r.returncode == 0, r.stderr.decode()
    if unordered:
        assert sorted(r.stdout.splitlines()) == sorted(plain.splitlines())
    else:
        assert r.stdout == plain


def predicted(trace: Path, tmp_path: Path, seed: int = 1) -> dict:
    out = tmp_path / f"pred{seed}.json"
    p = run_cli("predict", trace, "--scenario", "UC,OC", "--seed", seed, "-o", out)
    assert p.code == 0, p.err
    pred = json.loads(out.read_text())
    rep = pred["trace"]["replay"]
    assert [x["scenario"] for x in pred["results"]] == ["native", "UC", "OC"]
    split = rep["held_off_ns"] + rep["blocked_untraced_ns"] + rep["unexplained_unsplit_ns"]
    assert rep["unexplained_ns"] == split, rep
    return pred


def fidelity(argv: list[str], tmp_path: Path) -> dict:
    out = tmp_path / "fid.json"
    r = run_cli("fidelity", "--runs", 2, "-o", out, "--", *argv)
    assert r.code == 0, r.err
    f = json.loads(out.read_text())
    assert f["cpu_error"] is not None and abs(f["cpu_error"]) < 0.5, f
    if f["wall_time_comparable"]:
        assert abs(f["error"]) < 0.5, f
    return f


def test_pigz_is_traced_predicted_and_mitigated(tmp_path: Path) -> None:
    """pigz's replay deadlocked on every trace (issue 26): its join_all waits once on a condition
    variable while several workers broadcast, then joins them holding the lock. Two traces, each
    replayed with its own seed; then mitigated (one round: this checks it runs, not the speedup)."""
    pigz = program("pigz", "pigz")
    argv = [pigz, "-p", "4", "-c", str(data_file(tmp_path))]
    for seed in (1, 2):
        trace = tmp_path / f"pigz{seed}.vtrace"
        traced(argv, trace)
        rep = predicted(trace, tmp_path, seed)["trace"]["replay"]
        assert rep["cmdline"][0].endswith("pigz") and rep["threads"] >= 5
        assert rep["wakeups_matched"] > 0 and rep["wakeups_tied"] >= rep["wakeups_matched"]
    fidelity(argv, tmp_path)
    report = tmp_path / "m.json"
    m = run_cli("mitigate", "--runs", 1, "--all", "-o", report, "--", *argv)
    assert m.code == 0, m.err
    mitigations = json.loads(report.read_text())["mitigations"]
    assert mitigations and all(x["not_predicted"] is None or "failed" not in x["not_predicted"] for x in mitigations)


@pytest.mark.parametrize(
    ("binary", "package", "args", "mib"),
    [
        ("xz", "xz-utils", ["-T2", "-c"], 1),  # ~0.4 s
        ("zstd", "zstd", ["-T2", "-c", "-q"], 12),  # ~0.05 s: shorter runs' CPU times are noise on a busy machine
        ("sort", "coreutils", ["--parallel=2", "-S", "1M"], 3),
    ],
    ids=["xz", "zstd", "sort"],
)
def test_a_pthreads_program(binary: str, package: str, args: list[str], mib: int, tmp_path: Path) -> None:
    argv = [program(binary, package), *args, str(data_file(tmp_path, mib))]
    trace = tmp_path / "p.vtrace"
    traced(argv, trace)
    predicted(trace, tmp_path)
    fidelity(argv, tmp_path)


def test_a_rust_program_whose_waits_are_futex_calls(tmp_path: Path) -> None:
    """ripgrep: Rust's std synchronises with futex(2) through libc's syscall(), which the tracer
    records; its threads print matches in any order."""
    rg = program("rg", "ripgrep")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    rng = random.Random(7)
    for i in range(300):
        words = [rng.choice(["alpha", "beta", "gamma", "struct", "delta"]) for _ in range(2000)]
        (corpus / f"f{i}.txt").write_text(" ".join(words))
    argv = [rg, "-j", "2", "-c", "struct", str(corpus)]
    trace = tmp_path / "rg.vtrace"
    traced(argv, trace, unordered=True)
    predicted(trace, tmp_path)


GLIB_POOL = r"""
/* A GLib thread pool: the main thread pushes rounds of tasks to 4 workers and collects their
 * results from an asynchronous queue. GLib's GMutex and GCond wait with futex(2) through
 * syscall() (glib/gthread-posix.c), not through pthreads. */
#include <glib.h>
#include <stdint.h>
#include <stdio.h>

static GAsyncQueue *results;

static uint64_t work(uint64_t n) {
    uint64_t x = n;
    for (uint64_t i = 0; i < n; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; }
    return x;
}

static void task(gpointer data, gpointer user) {
    (void)user;
    uintptr_t i = (uintptr_t)data;
    g_async_queue_push(results, GSIZE_TO_POINTER(work(60000 + (i % 7) * 20000) | 1));
}

int main(void) {
    results = g_async_queue_new();
    GThreadPool *pool = g_thread_pool_new(task, NULL, 4, TRUE, NULL);
    uint64_t sum = 0;
    for (uintptr_t round = 0; round < 60; round++) {
        for (uintptr_t i = 0; i < 8; i++) g_thread_pool_push(pool, (gpointer)(round * 8 + i + 1), NULL);
        for (int i = 0; i < 8; i++) sum ^= GPOINTER_TO_SIZE(g_async_queue_pop(results));
    }
    g_thread_pool_free(pool, FALSE, TRUE);
    printf("%llu\n", (unsigned long long)sum);
    return 0;
}
"""


def test_a_glib_program_whose_waits_are_futex_calls(tmp_path: Path) -> None:
    """Its waits were invisible (no pthread call), so the replay ran its workers as never
    blocking; now they are FUTEX records, replayed as waits."""

    def glib_dev() -> bool:
        return subprocess.run(["pkg-config", "--exists", "glib-2.0"], capture_output=True).returncode == 0

    if shutil.which("pkg-config") is None and (why := debian_install("pkg-config", lambda: bool(shutil.which("pkg-config")))):
        pytest.skip(why)
    if why := debian_install("libglib2.0-dev", glib_dev):
        pytest.skip(why)
    src = tmp_path / "pool.c"
    src.write_text(GLIB_POOL)
    exe = tmp_path / "pool"
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "glib-2.0"], capture_output=True, text=True, check=True)
    subprocess.run(["gcc", "-O2", "-o", str(exe), str(src), *flags.stdout.split()], check=True, capture_output=True)
    trace = tmp_path / "pool.vtrace"
    traced([str(exe)], trace)
    rep = predicted(trace, tmp_path)["trace"]["replay"]
    assert rep["futex_waits"] > 0 and rep["wakeups_matched"] > 0, rep
    f = fidelity([str(exe)], tmp_path)
    assert f["warning"] is None, f
