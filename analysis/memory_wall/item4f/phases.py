#!/usr/bin/env python3
"""A training step's Timeline (CSV from `zinf train`'s last step) split into phases.

    phases.py TIMELINE.csv...

Phases: forward (to the first backward compute task), backward (to the last one), tail (the rest).
For each: its length, the compute lane's busy time, and per NVMe lane the bytes moved and the time
at least one of its slots was busy; then the disk's time with either lane busy.
"""
import csv
import sys


def union(intervals):
    """Total length covered by (start, end) intervals."""
    total, end_so_far = 0.0, None
    for s, e in sorted(intervals):
        if end_so_far is None or s > end_so_far:
            total += e - s
            end_so_far = e
        elif e > end_so_far:
            total += e - end_so_far
            end_so_far = e
    return total


def clip(intervals, lo, hi):
    return [(max(s, lo), min(e, hi)) for s, e in intervals if e > lo and s < hi]


def main(paths):
    for path in paths:
        with open(path) as f:
            rows = list(csv.DictReader(f))
        t0 = min(float(r["start"]) for r in rows)
        for r in rows:
            r["s"], r["e"], r["b"] = float(r["start"]) - t0, float(r["end"]) - t0, float(r["bytes"])
        step = max(r["e"] for r in rows)
        back = [r for r in rows if r["lane"] == "compute" and r["kind"] == "backward"]
        b0 = min(r["s"] for r in back) if back else step
        b1 = max(r["e"] for r in back) if back else step
        print(f"{path}: step {step:.2f} s")
        for name, lo, hi in (("forward", 0.0, b0), ("backward", b0, b1), ("tail", b1, step)):
            compute = union(clip([(r["s"], r["e"]) for r in rows if r["lane"] == "compute"], lo, hi))
            line = f"  {name:9s} {hi - lo:6.2f} s  compute {compute:6.2f} s"
            disk = []
            for lane in ("nvme_read", "nvme_write"):
                iv = [(r["s"], r["e"]) for r in rows if r["lane"] == lane]
                # Bytes by the share of each task's time inside the phase.
                moved = sum(r["b"] * (min(r["e"], hi) - max(r["s"], lo)) / max(r["e"] - r["s"], 1e-12)
                            for r in rows if r["lane"] == lane and r["e"] > lo and r["s"] < hi)
                busy = union(clip(iv, lo, hi))
                disk += clip(iv, lo, hi)
                line += f"  {lane} {moved / 1e9:5.1f} GB in {busy:5.2f} s"
            line += f"  disk busy {union(disk):5.2f} s"
            print(line)


if __name__ == "__main__":
    main(sys.argv[1:])
