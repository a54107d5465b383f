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

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # run as a script: _common is beside it
from _common import splash_main  # noqa: E402

NPART = 16384
TEMPLATE = "two cluster\nplummer\n{npart}\n1e-6\n{p}\n5\n.025\n0.0\ncost zones\n"


def main():
    splash_main("fmm.py", __doc__, NPART, ("particle", "particles"), 16, lambda n, p: TEMPLATE.format(npart=n, p=p))


if __name__ == "__main__":
    main()
