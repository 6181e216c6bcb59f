#!/usr/bin/env python3
"""The NVMe lanes' rate by what the cores were doing at the time, from a step's timeline CSV.

Usage: lanes.py TIMELINE.csv [...]   (the CSVs `zinf train --timeline-out` writes; runs.sh keeps them
as /tmp/item4l-NAME.csv). Rank 0's time is cut into 1 ms slots; a task's bytes are spread evenly over its span.
A slot is 'compute' when the compute lane runs, 'other CPU' when the CPU Adam, the host copies or the
one-rank gathers run (the CPU backend does those on the same two cores), and only slots in which one
NVMe lane alone is busy are counted, so read and write do not share the disk in them. 'Tasks in flight' counts
the lane's tasks whose spans cover the slot (aio.tasks_in_flight caps it).
"""
import csv
import sys

import numpy as np

OTHER_CPU = ("cpu_optim", "h2d", "d2h", "comm")


def lane_masks(path):
    events = [(float(r["start"]), float(r["end"]), r["lane"], int(r["bytes"]))
              for r in csv.DictReader(open(path)) if r["rank"] == "0"]
    if not events:
        sys.exit(f"{path}: no tasks in the timeline")
    n = int(max(e for _, e, _, _ in events) * 1000) + 1
    busy = {}
    moved = {"nvme_read": np.zeros(n), "nvme_write": np.zeros(n)}
    tasks = {"nvme_read": np.zeros(n), "nvme_write": np.zeros(n)}
    for s, e, lane, nbytes in events:
        i = int(s * 1000)
        j = max(int(e * 1000), i + 1)
        busy.setdefault(lane, np.zeros(n, bool))[i:j] = True
        if lane in moved:
            moved[lane][i:j] += nbytes / (j - i)
            tasks[lane][i:j] += 1
    return n, busy, moved, tasks


def report(path):
    n, busy, moved, tasks = lane_masks(path)
    none = np.zeros(n, bool)
    compute = busy.get("compute", none)
    other = none.copy()
    for lane in OTHER_CPU:
        other |= busy.get(lane, none)
    read, write = busy.get("nvme_read", none), busy.get("nvme_write", none)
    print(f"{path}: {n / 1000:.1f} s; compute lane {compute.sum() / 1e3:.1f} s, other CPU lanes "
          f"{other.sum() / 1e3:.1f} s, both at once {(compute & other).sum() / 1e3:.1f} s")
    cases = [("cores free", ~compute & ~other), ("compute only", compute & ~other),
             ("other CPU only", ~compute & other), ("compute + other", compute & other)]
    for cpu_name, cpu_mask in cases:
        for lane, alone in (("nvme_read", read & ~write), ("nvme_write", write & ~read)):
            m = alone & cpu_mask
            t = m.sum() / 1e3
            if t >= 0.05:
                gb = moved[lane][m].sum() / 1e9
                k = tasks[lane][m]
                print(f"  {cpu_name:16s} {lane:10s} alone {t:5.2f} s {gb:5.1f} GB {gb / t:5.2f} GB/s; tasks in "
                      f"flight median {np.median(k):.0f}, one task alone {np.mean(k <= 1):4.0%} of the time")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for p in sys.argv[1:]:
        report(p)
