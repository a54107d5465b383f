#!/usr/bin/env python3
"""Make a synthetic netlist for PARSEC 3.0 canneal (parsec.canneal): OUTDIR/netlist.nets.

The real native input is 2500000.nets (2.5 million netlist elements; simlarge..simsmall use
400000/200000/100000 elements), third-party data not in the pinned tree (the tree holds only
the 100-element simdev and 10-element test netlists, too small for a ~1 s run). This
substitute keeps the file format ("N X Y" header, then one line per element: name, type 1 or
2, the names of the elements it connects to, END) and the character of those netlists: each
element connects to 1..8 others (mostly 2..5), the connections chosen mostly near the
element in name order (a circuit's locality) with some random long wires, and the grid
X*Y a little larger than N. Deterministic: fixed seed, the same bytes on every run.

Default 20000 elements; --scale X multiplies the count.
"""

import math
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # run as a script: _common is beside it
from _common import fail, parser, write_output  # noqa: E402

BASE_ELEMENTS = 20000
SEED = 20261207


def name(i):
    """the mirror netlists' naming: a, b, ..., z, aa, ab, ..."""
    s = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        s = chr(97 + r) + s
    return s


def build(n):
    rng = random.Random(SEED)
    side = int(math.ceil(math.sqrt(n * 1.1)))
    lines = [f"{n:d}\t{side:d}\t{side:d}"]
    for i in range(n):
        k = rng.choice((1, 2, 2, 3, 3, 3, 4, 4, 5, 5, 6, 8))
        outs = []
        for _ in range(k):
            if rng.random() < 0.8:
                j = min(n - 1, max(0, i + int(rng.gauss(0, 40))))
            else:
                j = rng.randrange(n)
            if j != i and name(j) not in outs:  # no self-loops, no repeated wires
                outs.append(name(j))
        lines.append("\t".join([name(i), str(rng.choice((1, 2)))] + outs + ["END"]))
    return "\n".join(lines) + "\n"


def main(argv):
    p = parser(
        __doc__,
        "element count multiplier (default 1.0 = 20000 elements)",
        raw=False,
        metavars=True,
        epilog="writes OUTDIR/netlist.nets",
    )
    a = p.parse_args(argv)
    n = int(BASE_ELEMENTS * a.scale)
    if not 10 <= n <= 10_000_000:
        fail("canneal.py", f"--scale gives {n:d} elements; it must give 10..10000000")
    path = write_output("canneal.py", a.outdir, "netlist.nets", lambda: build(n))
    print(f"{path}: {n:d} elements")


if __name__ == "__main__":
    main(sys.argv[1:])
