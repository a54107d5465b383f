#!/usr/bin/env python3
"""Make a synthetic transaction database for PARSEC 3.0 freqmine (parsec.freqmine):
OUTDIR/transactions.dat.

The real native input is webdocs_250k.dat (250,000 web documents as sets of term ids, with
minimum support 11000); simlarge..simsmall use kosarak_*.dat (click-stream data). Those are
third-party data not in the pinned tree, whose own inputs (T10I4D100K_1k.dat, 1000
transactions) run in 0.05 s. This substitute keeps the format (one transaction a line, item
ids separated by spaces) and the character of the IBM Quest T10I4 data the simdev input comes
from: transactions of about 10 items drawn from 1000 items, built from a pool of recurring
"patterns" of about 4 items (so frequent itemsets exist) plus skewed single items.
Deterministic: fixed seed, the same bytes on every run.

Default 20000 transactions; --scale X multiplies the count.
"""

import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # run as a script: _common is beside it
from _common import fail, parser, write_output  # noqa: E402

BASE_TRANSACTIONS = 20000
SEED = 20261207
NITEMS = 1000


def build(n):
    rng = random.Random(SEED)
    patterns = [sorted(rng.sample(range(NITEMS), max(1, int(rng.gauss(4, 1.2))))) for _ in range(400)]
    pw, acc = [], 0.0
    for i in range(len(patterns)):
        acc += 1.0 / (i + 1)
        pw.append(acc)
    iw, acc = [], 0.0
    for i in range(NITEMS):
        acc += 1.0 / (i + 1) ** 0.7
        iw.append(acc)
    lines = []
    for _ in range(n):
        size = max(1, int(rng.gauss(10, 3)))
        items = set()
        while len(items) < size:
            if rng.random() < 0.6:
                items.update(rng.choices(patterns, cum_weights=pw)[0])
            else:
                items.add(rng.choices(range(NITEMS), cum_weights=iw)[0])
        lines.append(" ".join(str(i) for i in sorted(items)))
    return "\n".join(lines) + "\n"


def main(argv):
    p = parser(
        __doc__,
        "transaction count multiplier (default 1.0 = 20000)",
        raw=False,
        metavars=True,
        epilog="writes OUTDIR/transactions.dat",
    )
    a = p.parse_args(argv)
    n = int(BASE_TRANSACTIONS * a.scale)
    if not 1 <= n <= 10_000_000:
        fail("freqmine.py", f"--scale gives {n:d} transactions; it must give 1..10000000")
    path = write_output("freqmine.py", a.outdir, "transactions.dat", lambda: build(n))
    print(f"{path}: {n:d} transactions")


if __name__ == "__main__":
    main(sys.argv[1:])
