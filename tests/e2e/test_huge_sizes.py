"""Traces of huge allocations and mappings: a size no x86-64 program could have had succeed
(beyond the 128 TiB of the 47-bit user address space, or a calloc product that overflows) is
a one-line format error naming the file, the byte offset and the record (exit 2); a legal but
huge one (1 TiB) is replayed with its page-granular kernel work in bulk, in a time that does
not grow with its pages (it was 193 s for 1 TiB, a page batch at a time)."""

from __future__ import annotations

import struct
import subprocess
import time
import zlib
from pathlib import Path

import pytest

from conftest import vcpulab_command

BASE = 5_000_000


def _record(kind: int, t: int, body: bytes) -> bytes:
    return struct.pack("<BBHQ", kind, 0, 12 + len(body), t) + body


def _trace(*records: bytes) -> bytes:
    """A version-4 trace of one thread: its process start, thread start, then ``records``."""
    header = b"\x89VTRACE\n" + struct.pack("<HHIQI", 4, 32, 0, 1_700_000_000_000_000_000, 42)
    header += struct.pack("<I", zlib.crc32(header))
    cmd = b"./app\0"
    start = struct.pack("<QIIIHHQQ", 7, 100, 1, 8, 0, len(cmd), BASE, 99) + cmd
    start += b"6.1.0\0".ljust(64, b"\0") + b"2.36\0".ljust(16, b"\0")
    main = [
        _record(0x01, 0, start),
        _record(0x02, 1, struct.pack("<QIIIIQ", 1, 100, 0, 0, 0, 0xABC)),
        *records,
    ]
    payload = b"".join(main)
    head = b"VTBK" + struct.pack("<IIIQIII", len(payload), 100, 100, BASE, 0, len(main), 0)
    return header + head + struct.pack("<I", zlib.crc32(head + payload)) + payload


def _malloc(size: int) -> bytes:
    return _trace(_record(0x20, 2000, struct.pack("<QQ", size, 0x5000)))


def _predict(tmp_path: Path, data: bytes, timeout: float) -> tuple[subprocess.CompletedProcess[str], float]:
    (tmp_path / "t.vtrace").write_bytes(data)
    began = time.monotonic()
    proc = subprocess.run(
        [*vcpulab_command(), "predict", "t.vtrace", "--scenario", "UC", "--vcpus", "2"],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return proc, time.monotonic() - began


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (_malloc(2**64 - 1), "impossible MALLOC record 2 of block 0: size 18446744073709551615 bytes"),
        (_malloc((1 << 47) + 1), "impossible MALLOC record 2 of block 0: size 140737488355329 bytes"),
        (
            _trace(_record(0x22, 2000, struct.pack("<QQQ", 531, 0x7F00_0000_0000, 0x5000))),
            "impossible CALLOC record 2 of block 0: nmemb × size 74147765642330112 bytes",
        ),
        (
            _trace(_record(0x22, 2000, struct.pack("<QQQ", 1 << 32, 1 << 32, 0x5000))),
            "nmemb 4294967296 × size 4294967296 overflows 64 bits",
        ),
        (
            _trace(_record(0x32, 2000, struct.pack("<QQQii", 1000, 0x5000, 1 << 48, 4, 0))),
            "impossible MADVISE record 2 of block 0: len 281474976710656 bytes",
        ),
    ],
    ids=["malloc-2^64-1", "malloc-128TiB+1", "calloc-531x0x7f0000000000", "calloc-overflow", "madvise-256TiB"],
)
def test_a_size_beyond_the_user_address_space_is_a_one_line_format_error(
    tmp_path: Path, data: bytes, field: str
) -> None:
    proc, _ = _predict(tmp_path, data, timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    # The file, the byte offset (the record's: the last one), the record and what was expected.
    offset = _last_record_at(data)
    assert lines[0].startswith("vcpulab: error: ") and f"t.vtrace: byte {offset}: " in lines[0], lines[0]
    assert field in lines[0] and "expected " in lines[0] and "128 TiB" in lines[0], lines[0]
    assert "Traceback" not in proc.stderr and not proc.stdout.strip()


def _last_record_at(data: bytes) -> int:
    """The offset of the last record of ``data``'s one block."""
    at = 32 + 40
    while True:
        length = struct.unpack_from("<H", data, at + 2)[0]
        if at + length >= len(data):
            return at
        at += length


def test_a_1_tib_malloc_is_replayed_in_bulk(tmp_path: Path) -> None:
    # 2^28 pages faulted in: 193 s of wall time a page batch at a time; now pieces of 2^16
    # pages past the first 2^18. The bound is generous: the point is that it no longer grows
    # with the size.
    proc, took = _predict(tmp_path, _malloc(1 << 40), timeout=120)
    assert proc.returncode in (0, 3), proc.stderr
    assert "Traceback" not in proc.stderr
    assert took < 60, f"predict of a 1 TiB malloc took {took:.0f} s"


def test_a_huge_madvise_is_replayed_in_bulk(tmp_path: Path) -> None:
    # madvise(MADV_DONTNEED) of 64 TiB (2^34 pages; more than a minute before): legal, and
    # modelled in bulk (its simulated time runs to the virtual-time limit, exit 3, or ends).
    data = _trace(_record(0x32, 2000, struct.pack("<QQQii", 1000, 0x5000, 64 << 40, 4, 0)))
    proc, took = _predict(tmp_path, data, timeout=120)
    assert proc.returncode in (0, 3), proc.stderr
    assert "Traceback" not in proc.stderr
    assert took < 60, f"predict of a 64 TiB madvise took {took:.0f} s"
