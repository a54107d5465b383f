#!/usr/bin/env python3
"""Inputs for splash2x.water_nsquared (PARSEC 3.0 ext/splash2x/apps/water_nsquared, SPLASH-2 water
molecular dynamics with all-pairs (O(n^2)) force loops: `water_nsquared < input_P`, P threads).

The real input is a 10-field parameter file (TSTEP NMOL NSTEP NORDER NSAVE NRST NPRINT NFMC
NPROCS CUTOFF; PARSEC's run.sh makes input_P from input.template with the thread count P) plus
random.in in the working directory: one number, then 9 initial velocity components (x, y, z of
O, H1, H2) per molecule. The mirror has only the simdev/test input (512 molecules, 3 steps,
random.in with velocities for about 588 molecules); the native input is not in the mirror.
Here simdev is already the largest size whose 64-thread trace stays under 1 MB.

This generator writes OUTDIR/input_P for each thread count P, with the simdev template's fields
(TSTEP 1.5e-16, NORDER 6, NSAVE -1, NRST 3000, NFMC 0, CUTOFF 6.212752) and NMOL = 512 x scale
(as simdev), but NSTEP = 2 (simdev: 3) and NPRINT = NSTEP: the trace grows with molecules x steps
x threads (every thread locks every molecule each step), and simdev's 3 steps come too close to
1 MB at 64 threads. It uses the mirror's OUTDIR/random.in (extract input_simdev.tar into OUTDIR
first); for NMOL > 588 it extends that file in place by repeating its first 588 velocity records
in order (only those are read, so running it again gives the same bytes). The built binary (with
our build patch) reads input_P named as its argument, and random.in from the same directory.

usage: python3 tracer/inputs/water_nsquared.py OUTDIR [--scale X] [--threads 1,4,8,16,32,64]
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # run as a script: _common is beside it
from _common import water_main  # noqa: E402

NMOL, NSTEP = 512, 2


def main():
    water_main("water_nsquared.py", __doc__, NMOL, NSTEP)


if __name__ == "__main__":
    main()
