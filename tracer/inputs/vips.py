#!/usr/bin/env python3
"""Synthetic input for parsec.vips (PARSEC 3.0 pkgs/apps/vips, `vips im_benchmark IN.v OUT.v`).

The real native input is orion_18000x18000.v: an 18000 x 18000 photograph in VIPS's own .v format,
LABQ-coded (4 uchar bands packing L 10 bits, a 11 bits, b 11 bits), about 1.2 GB; simdev/test use
barbados_256x288.v (the same format, 256 x 288), which finishes in a few ms here, too small to size.

This generator writes synthetic.v: the same format and coding (LABQ, Intel byte order, a plain
64-byte header, no XML extension) at 1536 x 1536 by default (--scale X multiplies both sides, at
least 256 x 256), so im_benchmark does the same work per pixel (LabQ->Lab, crop, affine shrink,
colour transforms, a white-surround mask, ifthenelse, sharpen) on a photo-like image: smooth colour
gradients and waves, a few bright (L ~ 100) blobs so the "white surround" branch is taken, and
deterministic noise (fixed-seed random.Random), so the sharpen has edges and texture to work on.
Same bytes every run.

usage: python3 tracer/inputs/vips.py OUTDIR [--scale X]
"""

import math
import os
import random
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # run as a script: _common is beside it
from _common import parser, positive_scale, write_output  # noqa: E402

BASE = 1536
SEED = 20261207


def lab_q(L, a, b):
    """One LABQ pixel (4 bytes), packed as VIPS's imb_Lab2LabQ does."""
    li = min(1023, max(0, int(10.23 * L + 0.5)))
    ai = min(1023, max(-1024, int(round(8.0 * a))))
    bi = min(1023, max(-1024, int(round(8.0 * b))))
    lsbs = ((li & 0x3) << 6) | ((ai & 0x7) << 3) | (bi & 0x7)
    return bytes(((li >> 2) & 0xFF, (ai >> 3) & 0xFF, (bi >> 3) & 0xFF, lsbs))


def header(w, h):
    # magic (Intel order), Xsize, Ysize, Bands=4, Bbits=8, BandFmt=0 (uchar), Coding=2 (LABQ),
    # Type=13 (LABQ), Xres, Yres, Length, Compression, Level, Xoffset, Yoffset: 64 bytes
    return struct.pack("<I7i2fi2h2i", 0x08F2A6B6, w, h, 4, 8, 0, 2, 13, 1.0, 1.0, 0, 0, 0, 0, 0) + bytes(8)


def image(w, h):
    rng = random.Random(SEED)
    blobs = [(rng.uniform(0, w), rng.uniform(0, h), rng.uniform(0.04, 0.12) * min(w, h)) for _ in range(6)]
    colx = [
        (30.0 * math.sin(2 * math.pi * x / (w / 3.0)), 20.0 * math.cos(2 * math.pi * x / (w / 7.0))) for x in range(w)
    ]
    out = bytearray()
    for y in range(h):
        fy = y / h
        rowL = 35.0 + 25.0 * fy + 10.0 * math.sin(2 * math.pi * y / (h / 5.0))
        rb = 25.0 * math.cos(2 * math.pi * y / (h / 2.0))
        near = [(bx, (y - by) ** 2, r * r) for bx, by, r in blobs if abs(y - by) < r]
        row = bytearray()
        for x in range(w):
            ca, cb = colx[x]
            L = rowL + 0.3 * ca + rng.gauss(0.0, 4.0)
            for bx, dy2, r2 in near:
                if (x - bx) ** 2 + dy2 < r2:
                    L = 100.0
                    break
            row += lab_q(L, ca + rng.gauss(0.0, 3.0), cb + rb + rng.gauss(0.0, 3.0))
        out += row
    return bytes(out)


def main(argv=None):
    p = parser(
        __doc__,
        "multiply both sides of the 1536 x 1536 image (default 1)",
        outdir_help="directory to write synthetic.v into (created if missing)",
    )
    a = p.parse_args(argv)
    positive_scale("vips.py", a.scale)
    w = h = max(256, int(round(BASE * a.scale)))
    write_output("vips.py", a.outdir, "synthetic.v", lambda: (header(w, h), image(w, h)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
