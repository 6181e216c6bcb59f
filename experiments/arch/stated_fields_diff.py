#!/usr/bin/env python3
"""Explains the differences program_identity.sh found between two outputs directories when the new
Program states more than the baseline's: each differing case must be identical once the fields the
new Program adds are set aside (Task.source, the checkpoint_runs and backward_starts tables, and the buffer a parameter
fetch stage now names where the baseline's said -1: the NVMe read's host staging and the
host-to-device copy's device shard). Anything else that differs (another task, dependency, memory
event, report or error) is listed and fails the check.
    python3 experiments/arch/stated_fields_diff.py OUT_DIR   (OUT_DIR: program_identity.sh's third argument)
Exit status 0 when every case differs only by those fields."""
import json
import os
import sys

ADDED_BUFFER_KINDS = {"nvme_read", "copy_h2d"}


def normalized(base, new):
    """The new Program with the added fields removed or set back to the baseline's, or an error."""
    new = dict(new)
    new.pop("checkpoint_runs", None)
    if "backward_starts" not in base:
        new.pop("backward_starts", None)
    if len(base.get("tasks", [])) != len(new.get("tasks", [])):
        return None, "task counts differ"
    tasks = []
    for bt, nt in zip(base["tasks"], new["tasks"]):
        nt = dict(nt)
        nt.pop("source", None)
        if (nt.get("buffer") != bt.get("buffer") and bt.get("buffer") == -1 and nt.get("data") == "param"
                and nt.get("kind") in ADDED_BUFFER_KINDS and nt.get("phase") != "optim"):
            nt["buffer"] = -1
        tasks.append(nt)
    new["tasks"] = tasks
    return new, None


def main():
    out = sys.argv[1]
    bad = []
    checked = 0
    for case in sorted(os.listdir(os.path.join(out, "base"))):
        b, n = os.path.join(out, "base", case), os.path.join(out, "new", case)
        for f in ("rc", "report.json", "stderr"):
            with open(os.path.join(b, f)) as x, open(os.path.join(n, f)) as y:
                if x.read() != y.read():
                    bad.append(f"{case}: {f} differs")
        bp, np_ = os.path.join(b, "program.json"), os.path.join(n, "program.json")
        if os.path.exists(bp) != os.path.exists(np_):
            bad.append(f"{case}: one side wrote no Program")
            continue
        if not os.path.exists(bp):
            continue
        with open(bp) as x, open(np_) as y:
            base, new = json.load(x), json.load(y)
        norm, err = normalized(base, new)
        checked += 1
        if err or norm != base:
            bad.append(f"{case}: the Program differs beyond the stated fields ({err or 'other fields'})")
    print(f"stated fields: {checked} Programs compared, {len(bad)} differ beyond the added fields")
    for b in bad:
        print("  " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
