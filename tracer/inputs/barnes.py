#!/usr/bin/env python3
"""Inputs for splash2x.barnes (PARSEC 3.0 ext/splash2x/apps/barnes, SPLASH-2 Barnes-Hut N-body:
`barnes < input_P`, P threads).

The real input is a parameter file read line by line (infile, nbody, seed, outfile, dtime, eps,
tol, fcells, fleaves, tstop, dtout, NPROC); with no infile the program makes its own Plummer-model
bodies from nbody and seed. PARSEC's run.sh writes input_P from input.template, replacing NUMPROCS
with the thread count P. The mirror has only the simdev/test template (65,536 bodies, 4 steps of
dtime 0.025 to tstop 0.075); the native input is not in the mirror.

This generator writes OUTDIR/input_P for each thread count P: the simdev template's fields with
nbody = 16384 x scale (the program's own default nbody; simdev's 65,536 takes about 2.4 s on one
thread here and its 64-thread trace exceeds 1 MB: the tree build locks cells per body). Same bytes
every run. The built binary (with our build patch) reads input_P named as its argument.

usage: python3 tracer/inputs/barnes.py OUTDIR [--scale X] [--threads 1,4,8,16,32,64]
"""
import argparse
import os
import sys

NBODY = 16384
TEMPLATE = "\n{nbody}\n123\n\n0.025\n0.05\n1.0\n2.0\n5.0\n0.075\n0.25\n{p}\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the body count (default 1: %d)" % NBODY)
    ap.add_argument("--threads", default="1,4,8,16,32,64", help="thread counts to write input_P for")
    a = ap.parse_args()
    try:
        threads = [int(t) for t in a.threads.split(",")]
        if not threads or min(threads) < 1:
            raise ValueError
    except ValueError:
        sys.exit("barnes.py: --threads: expected positive integers separated by commas")
    nbody = int(round(NBODY * a.scale))
    if nbody < 16:
        sys.exit("barnes.py: --scale %g gives %d bodies (need at least 16)" % (a.scale, nbody))
    try:
        os.makedirs(a.outdir, exist_ok=True)
        for p in threads:
            with open(os.path.join(a.outdir, "input_%d" % p), "w") as f:
                f.write(TEMPLATE.format(nbody=nbody, p=p))
    except OSError as e:
        sys.exit("barnes.py: %s: %s" % (e.filename or a.outdir, e.strerror))


if __name__ == "__main__":
    main()
