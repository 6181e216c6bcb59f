#!/usr/bin/env python3
"""A step's NVMe lanes and compute lane in half-second bins, from `zinf train`'s Timeline CSV (rank 0).

    lanes.py TIMELINE.csv [--bin SECONDS]

Per bin: the NVMe read and write tasks in flight (task-seconds / bin), the GB/s each lane moved (a task's
bytes spread evenly over its span) and the fraction of the bin the compute lane was busy.
"""
import argparse
import csv


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("timeline")
    ap.add_argument("--bin", type=float, default=0.5)
    a = ap.parse_args()
    with open(a.timeline) as f:
        rows = [r for r in csv.DictReader(f) if r["rank"] == "0"]
    t0 = min(float(r["start"]) for r in rows)
    t1 = max(float(r["end"]) for r in rows)
    n = int((t1 - t0) / a.bin) + 1
    # per bin: read task-seconds, write task-seconds, read bytes, write bytes, compute busy seconds
    bins = [[0.0] * 5 for _ in range(n)]
    column = {"nvme_read": (0, 2), "nvme_write": (1, 3), "compute": (4, None)}
    for r in rows:
        if r["lane"] not in column:
            continue
        busy, moved = column[r["lane"]]
        s, e, b = float(r["start"]) - t0, float(r["end"]) - t0, float(r["bytes"])
        if e <= s:
            continue
        for k in range(int(s / a.bin), min(n, int(e / a.bin) + 1)):
            lo, hi = max(s, k * a.bin), min(e, (k + 1) * a.bin)
            if hi > lo:
                bins[k][busy] += hi - lo
                if moved is not None:
                    bins[k][moved] += b * (hi - lo) / (e - s)
    print("    t  read tasks  write tasks  read GB/s  write GB/s  compute busy")
    for k, v in enumerate(bins):
        print(f"{k * a.bin:5.1f}  {v[0] / a.bin:10.1f}  {v[1] / a.bin:11.1f}  {v[2] / a.bin / 1e9:9.2f}  "
              f"{v[3] / a.bin / 1e9:10.2f}  {v[4] / a.bin:12.2f}")


if __name__ == "__main__":
    main()
