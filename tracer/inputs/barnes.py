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

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # run as a script: _common is beside it
from _common import splash_main  # noqa: E402

NBODY = 16384
TEMPLATE = "\n{nbody}\n123\n\n0.025\n0.05\n1.0\n2.0\n5.0\n0.075\n0.25\n{p}\n"


def main():
    splash_main("barnes.py", __doc__, NBODY, ("body", "bodies"), 16, lambda n, p: TEMPLATE.format(nbody=n, p=p))


if __name__ == "__main__":
    main()
