"""The local worker pool stops when asked, whatever its workers were doing."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from vcpulab.sweep import LocalExecutor

MESSAGE = 256 << 20  # bytes: a result far larger than a pipe holds


def _big_result() -> bytes:
    return b"x" * MESSAGE


def _in_write(pid: int) -> bool:
    """Whether the process is inside a write(2) (x86-64: system call 1; an idle worker waits in
    read(2)), i.e. sending its result: a pipe holds 64 KiB, so a large one takes many rounds
    of the reader."""
    try:
        return Path(f"/proc/{pid}/syscall").read_text().split()[0] == "1"
    except (OSError, IndexError):
        return False


def test_cancel_while_a_worker_writes_its_result_does_not_hang() -> None:
    # A worker killed half-way through sending its result left the pool's manager thread
    # waiting for the rest of the message for ever, and Ctrl-C hung in the pool's shutdown.
    ex = LocalExecutor(1)
    (worker,) = ex._pool._processes.values()
    ex._pool.submit(_big_result)
    deadline = time.monotonic() + 120
    while not _in_write(worker.pid):
        assert time.monotonic() < deadline, "the worker never started sending its result"
        time.sleep(0.001)
    closer = threading.Thread(target=ex.close, args=(True,), daemon=True)
    closer.start()
    closer.join(timeout=60)
    assert not closer.is_alive(), "LocalExecutor.close hung"
    assert not worker.is_alive()
