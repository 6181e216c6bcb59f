#!/usr/bin/env python3
"""The memory-wall findings in one picture: every 1.5x-RAM run's last step, and its disk against idle
io-bench, finding by finding, from the raw outputs kept beside docs/results/memory-wall.md.

  findings_plot.py [--data docs/results/data/memory-wall] [--out docs/results/img/memory-wall.png]

Reads each finding's logs.tar.xz (the run.sh outputs) in the order of FINDINGS, keeps the runs whose
model is 1.5x this machine's RAM, and plots their `last step` seconds and their `disk ... = X x` figure
against io-bench.
"""
import argparse
import os
import re
import tarfile

FINDINGS = ["disk-speed", "read-ahead-and-distance", "faster-disk", "without-chrt", "queue-depth-and-gradient-stores",
            "where-the-step-goes", "cpu-by-thread", "parameters-further-ahead", "gathers-further-ahead",
            "one-rank-collectives", "step-without-offload", "blas-on-one-core"]


def runs(archive):
    """(step seconds, disk ratio against io-bench or None) of each 1.5x-RAM run in the archive."""
    out = []
    with tarfile.open(archive) as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            if not member.isfile() or not member.name.endswith(".txt"):
                continue
            text = tar.extractfile(member).read().decode("utf-8", "replace")
            if not re.search(r"= 1\.5 x RAM", text):
                continue
            step = re.search(r"^last step ([\d.]+) s", text, re.M)
            disk = re.search(r"^against io-bench \(.*?= ([\d.]+) x;", text, re.M)
            if step:
                out.append((float(step.group(1)), float(disk.group(1)) if disk else None))
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.normpath(os.path.join(here, "..", ".."))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.path.join(root, "docs", "results", "data", "memory-wall"))
    ap.add_argument("--out", default=os.path.join(root, "docs", "results", "img", "memory-wall.png"))
    a = ap.parse_args()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6.5), sharex=True)
    for i, name in enumerate(FINDINGS):
        path = os.path.join(a.data, name, "logs.tar.xz")
        if not os.path.exists(path):
            continue
        r = runs(path)
        top.scatter([i] * len(r), [s for s, _ in r], s=14, color="C0")
        disks = [d for _, d in r if d is not None]
        bottom.scatter([i] * len(disks), disks, s=14, color="C1")
    top.set_ylabel("last step (s)")
    top.set_title("The memory wall at 1.5x RAM, 2.37B parameters on a 2-core VM: every run, finding by finding (the VM and its disk changed between findings)", fontsize=10)
    top.set_ylim(bottom=0)
    bottom.axhline(0.85, color="gray", linestyle="--", linewidth=1)
    bottom.text(len(FINDINGS) - 0.5, 0.87, "goal 0.85", ha="right", fontsize=8, color="gray")
    bottom.set_ylabel("disk / idle io-bench")
    bottom.set_ylim(0, 1.5)
    bottom.set_xticks(range(len(FINDINGS)))
    bottom.set_xticklabels(FINDINGS, rotation=35, ha="right", fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    fig.savefig(a.out, dpi=110)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
