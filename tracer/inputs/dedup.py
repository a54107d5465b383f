#!/usr/bin/env python3
"""Make a synthetic input for PARSEC 3.0 dedup (parsec.dedup): OUTDIR/input.tar.

The real native input is FC-6-x86_64-disc1.iso (a 672 MB Fedora Core 6 install disc image);
simlarge..simsmall are tars of system files (media.dat, 184/94/31 MB). Those are third-party
data and far too large for a ~1 s run here, so this is a substitute that keeps dedup's
character at a small size: a tar archive (deterministic: fixed seed, fixed names, mtimes and
owners, the same bytes on every machine and Python 3 version) of synthetic "system files"
in which about half of the data reappears (whole files copied, and files assembled from
pieces of earlier files at shifted offsets), and which compresses with gzip by about 1.8x
(config/log-like text mixed with skewed binary runs). Note: PARSEC dedup itself reports only
about 4% duplicate chunks on it (it finds duplicates only across its 2 MB coarse fragments at
matching alignment), not the ~50% the data holds.

Default size about 8 MiB; --scale X multiplies it.
"""

import io
import os
import random
import sys
import tarfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # run as a script: _common is beside it
from _common import fail, parser, write_output  # noqa: E402

BASE_BYTES = 8 << 20
SEED = 20261207


def make_vocab(rng):
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    weights = [13, 9, 8, 8, 7, 7, 6, 6, 6, 4, 4, 3, 3, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1]
    vocab = set()
    while len(vocab) < 4000:
        n = rng.choice((2, 3, 3, 4, 4, 5, 5, 6, 7, 8, 9, 11))
        vocab.add("".join(rng.choices(letters, weights, k=n)))
    return sorted(vocab)


def unique_blob(rng, vocab, cum, size, bw):
    """size bytes: config/log-like text lines mixed with skewed binary runs."""
    out = bytearray()
    while len(out) < size:
        if rng.random() < 0.35:
            out += bytes(rng.choices(range(256), cum_weights=bw, k=rng.randint(256, 4096)))
        else:
            words = rng.choices(vocab, cum_weights=cum, k=rng.randint(3, 10))
            if rng.random() < 0.3:
                words[0] = words[0].capitalize()
            line = " ".join(words)
            r = rng.random()
            if r < 0.3:
                line = f"{line.replace(' ', '_')}={rng.randrange(100000):d}"
            elif r < 0.5:
                line = f"/{'/'.join(words[:3])}: {rng.randrange(1000):d}.{rng.randrange(100):02d} {line}"
            out += (line + "\n").encode()
    return bytes(out[:size])


def build(scale):
    rng = random.Random(SEED)
    vocab = make_vocab(rng)
    cum, acc = [], 0.0
    for i in range(len(vocab)):
        acc += 1.0 / (i + 1) ** 0.9
        cum.append(acc)
    perm = list(range(256))
    rng.shuffle(perm)
    w = [0.0] * 256
    for rank, byte in enumerate(perm):
        w[byte] = 0.8**rank
    bw, acc = [], 0.0
    for x in w:
        acc += x
        bw.append(acc)
    target = int(BASE_BYTES * scale)
    files, uniques, total, n = [], [], 0, 0
    # first half: unique files; second half: files made of the first half's data (whole
    # copies and pieces at new offsets) with a little new data between the pieces
    while total < target:
        if total < target // 2:
            data = unique_blob(rng, vocab, cum, rng.randint(4 << 10, 192 << 10), bw)
            uniques.append(data)
        elif rng.random() < 0.6:
            data = rng.choice(uniques)
        else:
            parts = []
            for _ in range(rng.randint(2, 5)):
                src = rng.choice(uniques)
                a = rng.randrange(len(src))
                parts.append(src[a : a + rng.randint(8 << 10, 64 << 10)])
                if rng.random() < 0.5:
                    parts.append(unique_blob(rng, vocab, cum, rng.randint(100, 3000), bw))
            data = b"".join(parts)
        d = f"usr/share/synth/d{n % 37:02d}"
        files.append((f"{d}/f{n:05d}.dat", data))
        total += len(data)
        n += 1
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 1700000000
            info.mode = 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def main(argv):
    p = parser(
        __doc__,
        "size multiplier (default 1.0 = about 8 MiB)",
        raw=False,
        metavars=True,
        epilog="writes OUTDIR/input.tar (about 8 MiB x SCALE)",
    )
    a = p.parse_args(argv)
    if not 0.01 <= a.scale <= 100:
        fail("dedup.py", "--scale must be between 0.01 and 100")
    path = write_output("dedup.py", a.outdir, "input.tar", lambda: build(a.scale))
    print(f"{path}: {os.path.getsize(path):d} bytes")


if __name__ == "__main__":
    main(sys.argv[1:])
