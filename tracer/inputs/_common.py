"""Shared parts of the input generators in tracer/inputs/ (not a generator itself).

The generators run as scripts (`python3 tracer/inputs/<program>.py OUTDIR [--scale X]`), so each
imports this module from its own directory. What is here: the command line (OUTDIR and --scale, in
the three styles the generators use, and --threads for the SPLASH-2x parameter files), the one-line
errors (`<script>: <message>`, exit status 1; argparse's own usage errors exit 2), writing a file
through OUTDIR/<name>.tmp and a rename, and the SPLASH-2x generators' whole main (input_P for each
thread count P, and the extension of the mirror's random.in for the two water programs).
"""

import argparse
import math
import os
import sys
from contextlib import contextmanager

THREADS = "1,4,8,16,32,64"


def parser(doc, scale_help, *, outdir_help=None, raw=True, metavars=False, epilog=None):
    """OUTDIR and --scale (a float, default 1); the description is the docstring's first paragraph.

    raw keeps the description's line breaks; metavars names the arguments OUTDIR and X.
    """
    p = argparse.ArgumentParser(
        description=doc.split("\n\n")[0],
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter if raw else argparse.HelpFormatter,
    )
    p.add_argument("outdir", metavar="OUTDIR" if metavars else None, help=outdir_help)
    p.add_argument("--scale", type=finite_scale, default=1.0, metavar="X" if metavars else None, help=scale_help)
    return p


MAX_SCALE = 1000.0


def finite_scale(text):
    """--scale's type: a finite number of at most MAX_SCALE (nan, inf and 1e300 are refused by
    argparse, exit 2, before anything is generated)."""
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number (got {text!r})") from None
    if not math.isfinite(x) or x > MAX_SCALE:
        raise argparse.ArgumentTypeError(f"expected a finite number of at most {MAX_SCALE:g} (got {text!r})")
    return x


def fail(prog, message):
    """Exit with status 1 and the one-line error `prog: message`."""
    sys.exit(f"{prog}: {message}")


def positive_scale(prog, scale):
    if not (scale > 0 and math.isfinite(scale)):
        fail(prog, "--scale must be a positive number")


@contextmanager
def os_errors(prog, outdir):
    """Turn an OSError into the one-line error `prog: FILE: REASON` (FILE: outdir if it names none)."""
    try:
        yield
    except OSError as e:
        fail(prog, f"{e.filename or outdir}: {e.strerror}")


@contextmanager
def atomic_open(path, mode="w"):
    """Write path.tmp, then rename it to path (so a reader never sees half a file)."""
    with open(path + ".tmp", mode) as f:
        yield f
    os.replace(path + ".tmp", path)


def write_output(prog, outdir, name, make):
    """Create outdir, then write OUTDIR/name from make(): a str (written as text), bytes, or an
    iterable of bytes chunks. Returns the path."""
    with os_errors(prog, outdir):
        os.makedirs(outdir, exist_ok=True)
        path = os.path.join(outdir, name)
        data = make()
        chunks = iter([data] if isinstance(data, (str, bytes)) else data)
        first = next(chunks, b"")
        with atomic_open(path, "w" if isinstance(first, str) else "wb") as f:
            f.write(first)
            for chunk in chunks:
                f.write(chunk)
    return path


def splash_main(prog, doc, base, nouns, least, text, prepare=None):
    """main() of a SPLASH-2x generator: OUTDIR/input_P = text(n, P) for each thread count P, where
    n = base x scale (rounded) must be at least least; nouns: what n counts, ("body", "bodies").
    prepare(outdir, n), if given, runs first, after OUTDIR is created."""
    noun, plural = nouns
    ap = parser(doc, f"multiply the {noun} count (default 1: {base:d})")
    ap.add_argument("--threads", default=THREADS, help="thread counts to write input_P for")
    a = ap.parse_args()
    try:
        threads = [int(t) for t in a.threads.split(",")]
        if not threads or min(threads) < 1:
            raise ValueError
    except ValueError:
        fail(prog, "--threads: expected positive integers separated by commas")
    n = int(round(base * a.scale))
    if n < least:
        fail(prog, f"--scale {a.scale:g} gives {n:d} {plural} (need at least {least:d})")
    with os_errors(prog, a.outdir):
        os.makedirs(a.outdir, exist_ok=True)
        if prepare:
            prepare(a.outdir, n)
        for p in threads:
            with open(os.path.join(a.outdir, f"input_{p:d}"), "w") as f:
                f.write(text(n, p))


RECORDS = 588  # whole velocity records (9 numbers each) in the mirror's simdev random.in


def extend_random_in(prog, outdir, nmol):
    """Check OUTDIR/random.in (the mirror's, from input_simdev.tar) and, if nmol > RECORDS, rewrite
    it in place with nmol records, repeating its first RECORDS in order (only those are read, so
    running it again gives the same bytes)."""
    src = os.path.join(outdir, "random.in")
    with open(src) as f:
        tok = f.read().split()
    if len(tok) < 1 + 9 * RECORDS:
        fail(
            prog,
            f"{src}: expected the mirror's random.in ({1 + 9 * RECORDS:d} numbers or more), found {len(tok):d} numbers",
        )
    vel = tok[1 : 1 + 9 * RECORDS]
    if nmol > RECORDS:  # else the mirror's file is used as it is
        with atomic_open(src) as f:
            f.write(f"  {tok[0]}\n")
            for m in range(nmol):
                r = (m % RECORDS) * 9
                f.write("  " + "  ".join(vel[r : r + 9]) + "\n")


def water_main(prog, doc, nmol, nstep):
    """main() of water_nsquared.py and water_spatial.py: input_P with the simdev template's fields
    (TSTEP 1.5e-16, NORDER 6, NSAVE -1, NRST 3000, NFMC 0, CUTOFF 6.212752), NMOL = nmol x scale,
    NSTEP = NPRINT = nstep, NPROCS = P; and OUTDIR/random.in extended to NMOL molecules."""
    splash_main(
        prog,
        doc,
        nmol,
        ("molecule", "molecules"),
        8,
        lambda n, p: f"  1.5e-16   {n:d}  {nstep:d}   6\n -1      3000     {nstep:d}  0\n{p:d} 6.212752\n",
        lambda outdir, n: extend_random_in(prog, outdir, n),
    )
