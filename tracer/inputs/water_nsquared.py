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
import argparse
import os
import sys

NMOL, NSTEP, RECORDS = 512, 2, 588  # RECORDS: whole velocity records in the mirror's random.in


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the molecule count (default 1: %d)" % NMOL)
    ap.add_argument("--threads", default="1,4,8,16,32,64", help="thread counts to write input_P for")
    a = ap.parse_args()
    try:
        threads = [int(t) for t in a.threads.split(",")]
        if not threads or min(threads) < 1:
            raise ValueError
    except ValueError:
        sys.exit("water_nsquared.py: --threads: expected positive integers separated by commas")
    nmol = int(round(NMOL * a.scale))
    if nmol < 8:
        sys.exit("water_nsquared.py: --scale %g gives %d molecules (need at least 8)" % (a.scale, nmol))
    try:
        os.makedirs(a.outdir, exist_ok=True)
        src = os.path.join(a.outdir, "random.in")
        with open(src) as f:
            tok = f.read().split()
        if len(tok) < 1 + 9 * RECORDS:
            sys.exit("water_nsquared.py: %s: expected the mirror's random.in (%d numbers or more), found %d numbers" % (src, 1 + 9 * RECORDS, len(tok)))
        vel = tok[1 : 1 + 9 * RECORDS]
        if nmol > RECORDS:  # else the mirror's file is used as it is
            with open(src + ".tmp", "w") as f:
                f.write("  %s\n" % tok[0])
                for m in range(nmol):
                    r = (m % RECORDS) * 9
                    f.write("  " + "  ".join(vel[r : r + 9]) + "\n")
            os.replace(src + ".tmp", src)
        for p in threads:
            with open(os.path.join(a.outdir, "input_%d" % p), "w") as f:
                f.write("  1.5e-16   %d  %d   6\n -1      3000     %d  0\n%d 6.212752\n" % (nmol, NSTEP, NSTEP, p))
    except OSError as e:
        sys.exit("water_nsquared.py: %s: %s" % (e.filename or a.outdir, e.strerror))


if __name__ == "__main__":
    main()
