#!/usr/bin/env python3
"""Synthetic input for parsec.x264 (PARSEC 3.0 pkgs/apps/x264, an H.264 encoder).

The real native input is eledream_1920x1080_512.y4m: 512 frames of 1920 x 1080 video (a
rendered film, "Elephants Dream"), YUV 4:2:0 in a YUV4MPEG2 file, about 1.5 GB; the mirror's
simdev/test input (eledream_64x36_3.y4m, 3 frames of 64 x 36) is far too small to size.

This generator writes synthetic.y4m: YUV4MPEG2, 4:2:0 (C420jpeg), 25 fps, 224 x 128, 80 frames
(--scale X multiplies both sides, rounded to multiples of 16; the frame count stays 80: this x264
keeps about as many frames in flight as it has threads and its end-of-input flush stops at the first
call that returns no bytes, so with fewer frames than threads it writes an empty stream; 80 frames
cover the 64-thread runs).
Each frame is a textured background (sums of sinusoids and a checkerboard) panning slowly to the
right, two textured rectangles moving at different speeds and directions over it (so motion
search, sub-pel refinement, B-frames and multiple references have real work), gently drifting
chroma, and deterministic per-pixel noise (fixed-seed random.Random), so the encoder cannot code
it as flat or static. Same bytes every run.

usage: python3 tracer/inputs/x264.py OUTDIR [--scale X]
"""

import math
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # run as a script: _common is beside it
from _common import parser, positive_scale, write_output  # noqa: E402

W, H, FRAMES = 224, 128, 80
SEED = 20261207


def texture(tw, th, fx, fy, phase, contrast):
    rows = []
    for y in range(th):
        sy = math.sin(2 * math.pi * fy * y / th + phase)
        row = bytearray(tw)
        for x in range(tw):
            v = 128 + contrast * (0.5 * math.sin(2 * math.pi * fx * x / tw + 1.7 * sy) + 0.3 * sy)
            if ((x >> 3) ^ (y >> 3)) & 1:
                v += 18
            row[x] = max(16, min(235, int(v)))
        rows.append(bytes(row))
    return rows


def frames(w, h, n):
    rng = random.Random(SEED)
    bgw = w + 2 * n + 16
    bg = texture(bgw, h, 9, 5, 0.3, 70)
    ow, oh = w // 4, h // 3
    obj1 = texture(ow, oh, 3, 2, 1.1, 90)
    obj2 = texture(ow, oh, 5, 4, 2.3, 60)
    noise = bytes(rng.randrange(0, 13) for _ in range(1 << 16))
    cw, ch = w // 2, h // 2
    for f in range(n):
        sx = 2 * f  # background pan: 2 px/frame
        luma = [bytearray(bg[y][sx : sx + w]) for y in range(h)]
        # object 1: right and down, 3 px/frame and 1 px/frame; object 2: left, 2.5 px/frame
        for obj, ox, oy in (
            (obj1, (w // 8 + 3 * f) % (w - ow), (h // 6 + f) % (h - oh)),
            (obj2, (w - ow - w // 8) - (5 * f) // 2 % (w - ow - w // 8), h // 2),
        ):
            for y in range(oh):
                luma[oy + y][ox : ox + ow] = obj[y]
        out = bytearray()
        base = rng.randrange(0, 1 << 16)
        for y in range(h):
            row = luma[y]
            k = (base + y * 977) & 0xFFFF
            nz = (noise[k:] + noise[:k])[:w]
            out += bytes(min(235, v + d - 6) if v > 16 else v for v, d in zip(row, nz, strict=False))
        for plane, (a, b) in enumerate(((110, 20), (140, 15))):
            for y in range(ch):
                out += bytes(int(a + b * math.sin(2 * math.pi * (x + f) / cw + y / ch + plane)) for x in range(cw))
        yield bytes(out)


def y4m(w, h, n):
    """The file, in pieces: the YUV4MPEG2 header, then FRAME and the frame's planes for each frame."""
    yield b"YUV4MPEG2 W%d H%d F25:1 Ip A1:1 C420jpeg\n" % (w, h)
    for fr in frames(w, h, n):
        yield b"FRAME\n"
        yield fr


def main(argv=None):
    p = parser(
        __doc__,
        "multiply both sides of the 224 x 128 frame (default 1)",
        outdir_help="directory to write synthetic.y4m into (created if missing)",
    )
    a = p.parse_args(argv)
    positive_scale("x264.py", a.scale)
    w = max(64, int(round(W * a.scale / 16)) * 16)
    h = max(48, int(round(H * a.scale / 16)) * 16)
    write_output("x264.py", a.outdir, "synthetic.y4m", lambda: y4m(w, h, FRAMES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
