#!/usr/bin/env python3
"""Inputs for splash2x.fmm (PARSEC 3.0 ext/splash2x/apps/fmm, SPLASH-2 adaptive fast multipole N-body:
`fmm < input_P`, P threads).

The real input is a parameter file read line by line (cluster type, distribution, number of
particles, precision, number of processors, time steps, step duration, softening, partitioning
scheme). PARSEC's run.sh writes input_P from input.template, replacing NUMPROCS with the thread
count P. The mirror has only the simdev/test template (two Plummer clusters of 256 particles,
precision 1e-6, 5 steps of 0.025, cost zones), a few ms of work; the native input is not in the
mirror.

This generator writes OUTDIR/input_P for each thread count P: the simdev template's fields with
16384 x scale particles. Same bytes every run. The built binary (with our build patch) reads
input_P named as its argument.

usage: python3 tracer/inputs/fmm.py OUTDIR [--scale X] [--threads 1,4,8,16,32,64]
"""
import argparse
import os
import sys

NPART = 16384
TEMPLATE = "two cluster\nplummer\n{npart}\n1e-6\n{p}\n5\n.025\n0.0\ncost zones\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the particle count (default 1: %d)" % NPART)
    ap.add_argument("--threads", default="1,4,8,16,32,64", help="thread counts to write input_P for")
    a = ap.parse_args()
    try:
        threads = [int(t) for t in a.threads.split(",")]
        if not threads or min(threads) < 1:
            raise ValueError
    except ValueError:
        sys.exit("fmm.py: --threads: expected positive integers separated by commas")
    npart = int(round(NPART * a.scale))
    if npart < 16:
        sys.exit("fmm.py: --scale %g gives %d particles (need at least 16)" % (a.scale, npart))
    try:
        os.makedirs(a.outdir, exist_ok=True)
        for p in threads:
            with open(os.path.join(a.outdir, "input_%d" % p), "w") as f:
                f.write(TEMPLATE.format(npart=npart, p=p))
    except OSError as e:
        sys.exit("fmm.py: %s: %s" % (e.filename or a.outdir, e.strerror))


if __name__ == "__main__":
    main()
