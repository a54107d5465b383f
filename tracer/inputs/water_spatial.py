#!/usr/bin/env python3
"""Inputs for splash2x.water_spatial (PARSEC 3.0 ext/splash2x/apps/water_spatial, SPLASH-2 water
molecular dynamics with a spatial cell grid: `water_spatial < input_P`, P threads).

The real input is a 10-field parameter file (TSTEP NMOL NSTEP NORDER NSAVE NRST NPRINT NFMC
NPROCS CUTOFF; PARSEC's run.sh makes input_P from input.template with the thread count P) plus
random.in in the working directory: one number, then 9 initial velocity components (x, y, z of
O, H1, H2) per molecule. The mirror has only the simdev/test input (512 molecules, 3 steps,
random.in with velocities for about 588 molecules); the native input is not in the mirror.
That is too small here (about 0.03 s), and a larger NMOL needs a longer random.in.

This generator writes OUTDIR/input_P for each thread count P, with the simdev template's fields
(TSTEP 1.5e-16, NORDER 6, NSAVE -1, NRST 3000, NPRINT 3, NFMC 0, CUTOFF 6.212752) but
NMOL = 4096 x scale (simdev: 512), NSTEP = 3, and extends OUTDIR/random.in (the mirror's, from
input_simdev.tar: extract it into OUTDIR first) to NMOL molecules (if NMOL > 588) by repeating its first 588
velocity records in order (the program removes the net momentum and rescales to its temperature;
fresh Gaussian velocities made the run diverge, so the mirror's values are reused). Only the
first 588 records are read, so running it again gives the same bytes. No data of ours is random.
The built binary (with our build patch) reads input_P named as its argument, and random.in
from the same directory.

usage: python3 tracer/inputs/water_spatial.py OUTDIR [--scale X] [--threads 1,4,8,16,32,64]
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # run as a script: _common is beside it
from _common import water_main  # noqa: E402

NMOL, NSTEP = 4096, 3


def main():
    water_main("water_spatial.py", __doc__, NMOL, NSTEP)


if __name__ == "__main__":
    main()
