#!/usr/bin/env python3
"""A training step's Timeline (CSV from `zinf train`'s last step) split into phases.

    phases.py TIMELINE.csv...

Phases: forward (to the first backward compute task), backward (to the last one), tail (the rest).
For each: its length, the compute lane's busy time, and per NVMe lane the bytes moved and the time
at least one of its slots was busy; then the disk's time with either lane busy. Lanes are measured
by experiments/memory_wall/report.py's Step.
"""
import csv
import importlib.util
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
spec = importlib.util.spec_from_file_location("mw_report", os.path.join(ROOT, "experiments", "memory_wall", "report.py"))
report = importlib.util.module_from_spec(spec)
spec.loader.exec_module(report)


def main(paths):
    for path in paths:
        with open(path) as f:
            step = report.Step(list(csv.DictReader(f)))
        back = [r for r in step.rows if r["lane"] == "compute" and r["kind"] == "backward"]
        b0 = min((float(r["start"]) for r in back), default=step.t0 + step.seconds)
        b1 = step.last_bwd
        print(f"{path}: step {step.seconds:.2f} s")
        for name, lo, hi in (("forward", step.t0, b0), ("backward", b0, b1), ("tail", b1, step.t0 + step.seconds)):
            line = f"  {name:9s} {hi - lo:6.2f} s  compute {step.between('compute', lo, hi)[1]:6.2f} s"
            for lane in ("nvme_read", "nvme_write"):
                moved, busy = step.between(lane, lo, hi)
                line += f"  {lane} {moved / 1e9:5.1f} GB in {busy:5.2f} s"
            print(line + f"  disk busy {step.between('nvme', lo, hi)[1]:5.2f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
