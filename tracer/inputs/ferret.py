#!/usr/bin/env python3
"""Synthetic query images for parsec.ferret (PARSEC 3.0 pkgs/apps/ferret, content-based image
similarity search: `ferret DB lsh QUERYDIR TOP_K DEPTH NTHREADS OUT`).

The real native input is input_native.tar: a database of 59,695 images (corel, LSH index) and
3,500 JPEG query images; neither is in the mirror. The mirror's input_simdev.tar has a database
of about 100 images and only 4 query JPEGs of 128 x 96, a few ms of work.

This generator writes QUERYDIR = OUTDIR/synq/ with 128 query images q000.jpg ... q127.jpg by
default (--scale X multiplies the count), each a 128 x 96 baseline JPEG (the simdev queries' size):
a sky-to-ground colour gradient, a handful of coloured ellipses and rectangles and fixed-seed
noise, so ferret's segmentation finds several regions of different colour and texture per image,
as it does in photographs. The JPEG writer is ours (4:4:4, one quantisation table, flat
length-8/length-4 Huffman tables: valid baseline JPEG, plain to decode). Same bytes every run.
The mirror's simdev database (corel/) is used unchanged: extract input_simdev.tar into OUTDIR too.

usage: python3 tracer/inputs/ferret.py OUTDIR [--scale X]
"""

import math
import os
import random
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # run as a script: _common is beside it
from _common import atomic_open, os_errors, parser, positive_scale  # noqa: E402

W, H, COUNT = 128, 96, 128
SEED = 20261207
# fmt: off
QBASE = [16, 11, 10, 16, 24, 40, 51, 61, 12, 12, 14, 19, 26, 58, 60, 55, 14, 13, 16, 24, 40, 57, 69, 56,
         14, 17, 22, 29, 51, 87, 80, 62, 18, 22, 37, 56, 68, 109, 103, 77, 24, 35, 55, 64, 81, 104, 113, 92,
         49, 64, 78, 87, 103, 121, 120, 101, 72, 92, 95, 98, 112, 100, 103, 99]
# fmt: on
Q = [max(1, (q + 1) // 2) for q in QBASE]  # about quality 75
ZIGZAG = sorted(range(64), key=lambda i: (i // 8 + i % 8, (i % 8) if (i // 8 + i % 8) % 2 == 0 else (i // 8)))
COS = [
    [(math.sqrt(0.5) if u == 0 else 1.0) * 0.5 * math.cos((2 * x + 1) * u * math.pi / 16) for x in range(8)]
    for u in range(8)
]
DC_SYMS = list(range(12))  # code length 4
AC_SYMS = [0x00, 0xF0] + [(r << 4) | s for r in range(16) for s in range(1, 11)]  # code length 8
DC_CODE = {s: (i, 4) for i, s in enumerate(DC_SYMS)}
AC_CODE = {s: (i, 8) for i, s in enumerate(AC_SYMS)}


class Bits:
    def __init__(self):
        self.out, self.acc, self.n = bytearray(), 0, 0

    def put(self, code, length):
        self.acc = (self.acc << length) | code
        self.n += length
        while self.n >= 8:
            self.n -= 8
            b = (self.acc >> self.n) & 0xFF
            self.out.append(b)
            if b == 0xFF:
                self.out.append(0)
        self.acc &= (1 << self.n) - 1

    def flush(self):
        if self.n:
            self.put((1 << (8 - self.n)) - 1, 8 - self.n)
        return bytes(self.out)


def magnitude(v):
    s = abs(v).bit_length()
    return s, (v if v >= 0 else v + (1 << s) - 1)


def fdct(block):
    rows = [[sum(c[x] * block[y * 8 + x] for x in range(8)) for c in COS] for y in range(8)]
    return [sum(COS[v][y] * rows[y][u] for y in range(8)) for v in range(8) for u in range(8)]


def encode_block(bits, block, pred):
    coef = fdct(block)
    q = [int(round(coef[ZIGZAG[k]] / Q[ZIGZAG[k]])) for k in range(64)]
    s, b = magnitude(q[0] - pred)
    bits.put(*DC_CODE[s])
    if s:
        bits.put(b, s)
    run = 0
    for k in range(1, 64):
        v = q[k]
        if v == 0:
            run += 1
            continue
        while run > 15:
            bits.put(*AC_CODE[0xF0])
            run -= 16
        s, b = magnitude(v)
        bits.put(*AC_CODE[(run << 4) | s])
        bits.put(b, s)
        run = 0
    if run:
        bits.put(*AC_CODE[0x00])
    return q[0]


def jpeg(w, h, rgb):
    ycc = []
    for i in range(0, len(rgb), 3):
        r, g, b = rgb[i], rgb[i + 1], rgb[i + 2]
        ycc.append(
            (
                0.299 * r + 0.587 * g + 0.114 * b - 128,
                -0.168736 * r - 0.331264 * g + 0.5 * b,
                0.5 * r - 0.418688 * g - 0.081312 * b,
            )
        )
    bits, pred = Bits(), [0, 0, 0]
    for by in range(0, h, 8):
        for bx in range(0, w, 8):
            for c in range(3):
                blk = [ycc[min(h - 1, by + y) * w + min(w - 1, bx + x)][c] for y in range(8) for x in range(8)]
                pred[c] = encode_block(bits, blk, pred[c])

    def seg(m, body):
        return b"\xff" + bytes([m]) + struct.pack(">H", len(body) + 2) + body

    def dht(tc, th, lens, syms):
        return bytes([(tc << 4) | th]) + bytes(lens) + bytes(syms)

    dc_lens = [0, 0, 0, len(DC_SYMS)] + [0] * 12
    ac_lens = [0] * 7 + [len(AC_SYMS)] + [0] * 8
    return (
        b"\xff\xd8"
        + seg(0xE0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00")
        + seg(0xDB, b"\x00" + bytes(Q[ZIGZAG[k]] for k in range(64)))
        + seg(0xC0, struct.pack(">BHHB", 8, h, w, 3) + b"\x01\x11\x00\x02\x11\x00\x03\x11\x00")
        + seg(0xC4, dht(0, 0, dc_lens, DC_SYMS) + dht(1, 0, ac_lens, AC_SYMS))
        + seg(0xDA, b"\x03\x01\x00\x02\x00\x03\x00\x00\x3f\x00")
        + bits.flush()
        + b"\xff\xd9"
    )


def picture(rng, w, h):
    sky = [rng.randrange(60, 200) for _ in range(3)]
    ground = [rng.randrange(20, 160) for _ in range(3)]
    horizon = rng.randrange(h // 4, 3 * h // 4)
    shapes = []
    for _ in range(rng.randrange(3, 7)):
        shapes.append(
            (
                rng.random() < 0.5,
                rng.uniform(0, w),
                rng.uniform(0, h),
                rng.uniform(6, w / 3),
                rng.uniform(6, h / 3),
                [rng.randrange(0, 256) for _ in range(3)],
                rng.uniform(0, 25),
            )
        )
    px = bytearray()
    for y in range(h):
        t = y / h
        base = sky if y < horizon else ground
        for x in range(w):
            col = [base[c] * (0.7 + 0.6 * t if y < horizon else 1.2 - 0.4 * t) for c in range(3)]
            for ell, cx, cy, rx, ry, sc, tex in shapes:
                dx, dy = (x - cx) / rx, (y - cy) / ry
                if (dx * dx + dy * dy < 1) if ell else (abs(dx) < 1 and abs(dy) < 1):
                    col = [sc[c] + tex * math.sin(0.9 * x + 0.7 * y + c) for c in range(3)]
            n = rng.gauss(0, 6)
            px += bytes(max(0, min(255, int(col[c] + n))) for c in range(3))
    return px


def main(argv=None):
    p = parser(
        __doc__,
        "multiply the number of query images, 128 (default 1)",
        outdir_help="directory to write synq/ into (created if missing)",
    )
    a = p.parse_args(argv)
    positive_scale("ferret.py", a.scale)
    n = max(1, int(round(COUNT * a.scale)))
    rng = random.Random(SEED)
    with os_errors("ferret.py", a.outdir):
        d = os.path.join(a.outdir, "synq")
        os.makedirs(d, exist_ok=True)
        for i in range(n):
            with atomic_open(os.path.join(d, f"q{i:03d}.jpg"), "wb") as f:
                f.write(jpeg(W, H, picture(rng, W, H)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
