#!/usr/bin/env python3
"""Explains the differences program_identity.sh found between two outputs directories when the new
Program states more than the baseline's: each differing case must be identical once the fields the
new Program adds are set aside (Task.source, the checkpoint_runs and backward_starts tables, and the buffer a task
now names where the baseline's said -1: a parameter fetch stage's (the NVMe read's host staging and the
host-to-device copy's device shard), and an optimizer stage's (the gradients moved to where Adam runs,
the updated parameters on their way home)). Anything else that differs (another task, dependency, memory
event, report or error) is listed and fails the check.
    python3 experiments/arch/stated_fields_diff.py OUT_DIR   (OUT_DIR: program_identity.sh's third argument)
The reports' wall-clock times (wall_seconds) are left out of the comparison.
Exit status 0 when every case differs only by those fields."""
import json
import os
import sys

ADDED_BUFFER_KINDS = {"nvme_read", "copy_h2d"}
ADDED_OPTIMIZER_BUFFER_KINDS = {"nvme_read", "copy_h2d", "copy_d2h", "optimizer_step"}


def normalized_task(bt, nt):
    """The new task with the added fields removed or set back to the baseline's."""
    nt = dict(nt)
    nt.pop("source", None)
    fetch = nt.get("data") == "param" and nt.get("kind") in ADDED_BUFFER_KINDS and nt.get("phase") != "optim"
    optimizer = nt.get("phase") == "optim" and nt.get("kind") in ADDED_OPTIMIZER_BUFFER_KINDS
    if nt.get("buffer") != bt.get("buffer") and bt.get("buffer") == -1 and (fetch or optimizer):
        nt["buffer"] = -1
    return nt


def normalized(base, new):
    """The new Program with the added fields removed or set back to the baseline's, or an error."""
    new = dict(new)
    new.pop("checkpoint_runs", None)
    if "backward_starts" not in base:
        new.pop("backward_starts", None)
    if len(base.get("tasks", [])) != len(new.get("tasks", [])):
        return None, "task counts differ"
    new["tasks"] = [normalized_task(bt, nt) for bt, nt in zip(base["tasks"], new["tasks"])]
    return new, None


def same_by_lines(bp, np_):
    """Whether two Programs written one task a line differ only by tasks whose added fields explain
    the difference, read a line at a time (a large model's Program is gigabytes); None when another
    line differs (the whole-Program comparison decides)."""
    with open(bp) as x, open(np_) as y:
        for lb, ln in zip(x, y):
            if lb == ln:
                continue
            if not (lb.startswith('{"id":') and ln.startswith('{"id":')):
                return None
            bt, nt = json.loads(lb.rstrip().rstrip(",")), json.loads(ln.rstrip().rstrip(","))
            if normalized_task(bt, nt) != {k: v for k, v in bt.items() if k != "source"}:
                return False
        return next(x, None) is None and next(y, None) is None


def without_times(report):
    """A report with its wall-clock times (wall_seconds, which differ run to run) left out."""
    if isinstance(report, dict):
        return {k: without_times(v) for k, v in report.items() if k != "wall_seconds"}
    if isinstance(report, list):
        return [without_times(v) for v in report]
    return report


def main():
    out = sys.argv[1]
    bad = []
    checked = 0
    for case in sorted(os.listdir(os.path.join(out, "base"))):
        b, n = os.path.join(out, "base", case), os.path.join(out, "new", case)
        for f in ("rc", "report.json", "stderr"):
            with open(os.path.join(b, f)) as x, open(os.path.join(n, f)) as y:
                tx, ty = x.read(), y.read()
            if tx != ty and f == "report.json" and tx.startswith("{") and ty.startswith("{"):
                tx, ty = without_times(json.loads(tx)), without_times(json.loads(ty))
            if tx != ty:
                bad.append(f"{case}: {f} differs")
        bp, np_ = os.path.join(b, "program.json"), os.path.join(n, "program.json")
        if os.path.exists(bp) != os.path.exists(np_):
            bad.append(f"{case}: one side wrote no Program")
            continue
        if not os.path.exists(bp):
            continue
        checked += 1
        by_lines = same_by_lines(bp, np_)
        if by_lines is not None:
            if not by_lines:
                bad.append(f"{case}: the Program differs beyond the stated fields (a task)")
            continue
        with open(bp) as x, open(np_) as y:
            base, new = json.load(x), json.load(y)
        norm, err = normalized(base, new)
        if err or norm != base:
            bad.append(f"{case}: the Program differs beyond the stated fields ({err or 'other fields'})")
    print(f"stated fields: {checked} Programs compared, {len(bad)} differ beyond the added fields")
    for b in bad:
        print("  " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
