#!/usr/bin/env python3
"""Where the compute lane waits in a training step's Timeline (CSV from `zinf train`'s last step).

    gaps.py TIMELINE.csv...

For each file: the step, the compute lane's idle time in gaps over 5 ms, and the gaps over 50 ms split by
what ended when the compute resumed: a parameter's all-gather ('param'), a gradient's NVMe write
('grad write'), or anything else.
"""
import csv
import sys


def classify(ended):
    labels = " ".join(ended)
    if "allgather" in labels and "param" in labels:
        return "param"
    if "nvme_write" in labels and "grad" in labels:
        return "grad write"
    return "other"


def main(paths):
    for path in paths:
        with open(path) as f:
            rows = list(csv.DictReader(f))
        t0 = min(float(r["start"]) for r in rows)
        compute = sorted((float(r["start"]) - t0, float(r["end"]) - t0) for r in rows if r["lane"] == "compute")
        ends = {}
        for r in rows:
            if r["lane"] != "compute":
                ends.setdefault(round(float(r["end"]) - t0, 2), []).append(r["label"])
        busy_until, idle = 0.0, 0.0
        by_cause = {"param": 0.0, "grad write": 0.0, "other": 0.0}
        for start, end in compute:
            gap = start - busy_until
            if gap > 0.005:
                idle += gap
                if gap > 0.05:
                    near = sum((ends.get(round(start + d, 2), []) for d in (-0.01, 0.0, 0.01)), [])
                    by_cause[classify(near)] += gap
            busy_until = max(busy_until, end)
        step = max(float(r["end"]) for r in rows) - t0
        print(f"{path} step {step:.1f} gaps>5ms {idle:.2f}", {k: round(v, 2) for k, v in by_cause.items()})


if __name__ == "__main__":
    main(sys.argv[1:])
