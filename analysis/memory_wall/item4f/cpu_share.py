#!/usr/bin/env python3
"""Cores a process used over its last step, from cpu_sample.sh's samples.

    cpu_share.py SAMPLES STEP_SECONDS [LAG_SECONDS]

The step is taken as the STEP_SECONDS before the last sample less LAG_SECONDS (default 1: the
Timeline is written after the last step). Prints the average cores busy and the CPU-seconds, and the
least step those CPU-seconds allow on this machine's cores.
"""
import bisect
import os
import sys


def main(path, step, lag=1.0):
    rows = [tuple(map(float, line.split())) for line in open(path)]
    hz = os.sysconf("SC_CLK_TCK")
    ts = [r[0] for r in rows]
    a = bisect.bisect_left(ts, ts[-1] - lag - step)
    b = bisect.bisect_left(ts, ts[-1] - lag)
    cpu = (rows[b][1] - rows[a][1]) / hz
    cores = os.cpu_count()
    print(f"{cpu / (rows[b][0] - rows[a][0]):.2f} cores busy on average, {cpu:.1f} CPU-seconds over the step; "
          f"on {cores} cores no schedule takes under {cpu / cores:.1f} s (step {step:.1f} s = {step / (cpu / cores):.2f}x that)")


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]), *(float(x) for x in sys.argv[3:]))
