#!/usr/bin/env python3
"""Where the disk idles in a memory-wall step: for each Timeline CSV (TIMELINE_OUT of
experiments/memory_wall/run.sh), the step, the forward (until the first backward task), the backward,
and the time neither NVMe lane was busy in each, with the compute lane's busy time.
  python3 idle.py run1.csv [run2.csv ...]"""
import csv
import sys

for path in sys.argv[1:]:
    rows = list(csv.DictReader(open(path)))
    for r in rows:
        r["start"], r["end"] = float(r["start"]), float(r["end"])
    busy = sorted((r["start"], r["end"]) for r in rows if r["lane"].startswith("nvme"))
    gaps, reach = [], busy[0][1]
    for s, e in busy[1:]:
        if s > reach:
            gaps.append((reach, s))
        reach = max(reach, e)
    bwd = min(r["start"] for r in rows if r["label"].startswith("backward"))
    last = max(r["end"] for r in rows if r["label"].startswith(("backward", "recompute")))
    step = max(r["end"] for r in rows)
    fwd_idle = sum(b - a for a, b in gaps if b <= bwd)
    bwd_idle = sum(b - a for a, b in gaps if a >= bwd and b <= last)
    compute = sum(r["end"] - r["start"] for r in rows if r["lane"] == "compute")
    print(f"{path}: step {step:.1f} s, forward {bwd:.1f} s, backward {last - bwd:.1f} s; "
          f"disk idle {fwd_idle:.1f} s in forward, {bwd_idle:.1f} s in backward; compute lane busy {compute:.1f} s")
