#!/usr/bin/env python3
"""Pareto front of a `zinf tune --json` report: throughput against peak memory per tier.

    build/zinf tune --model gpt-1t --hw dgx2-v100 --nodes 32 --json > tune.json
    /usr/bin/python3 analysis/tune_report.py tune.json [--out analysis/tune] [--name NAME]

One panel per tier (device, host, NVMe; bytes per rank at the step's peak, as planned). Every
candidate the planner accepted is a dot at its idealized-schedule throughput (left axis); the
simulated finalists are rings at their simulated throughput (right axis: the two estimates differ
in scale, most at hundreds of GPUs), the pick a star. The line joins the candidates that no other
beats on both memory and idealized throughput (the Pareto front of that tier). Writes
<name>_pareto.png and .pdf and prints the front of each tier.
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

TIERS = [("device_per_rank", "device"), ("host_per_rank", "host"), ("nvme_per_rank", "NVMe")]


def pareto_front(points):
    """Points (memory, throughput, ...) that no other has both less memory and more throughput."""
    front, best = [], -1.0
    for p in sorted(points, key=lambda p: (p[0], -p[1])):
        if p[1] > best:
            front.append(p)
            best = p[1]
    return front


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report", help="zinf tune --json output")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "tune"))
    ap.add_argument("--name", help="file name stem (default: the report's)")
    ap.add_argument("--img", help="folder for the PNG (default: --out); docs/results/img/tuning for the results page")
    a = ap.parse_args(argv)
    with open(a.report) as f:
        rep = json.load(f)
    planned = [p for p in rep.get("planned", []) if "planned" in p]
    if not planned:
        sys.exit(f"{a.report}: no planned candidates")
    name = a.name or os.path.splitext(os.path.basename(a.report))[0]
    os.makedirs(a.out, exist_ok=True)
    finalists = [f for f in rep.get("finalists", []) if f.get("simulated", {}).get("ok")]
    gb = rep["global_batch"]

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5), constrained_layout=True)
    for ax, (key, label) in zip(axes, TIERS):
        pts = [(p["planned"]["peak"][key] / 1e9, gb / p["planned"]["step_time"], p["describe"]) for p in planned]
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=14, color="tab:blue", alpha=0.6,
                   label="planned (idealized schedule)")
        front = pareto_front(pts)
        ax.plot([p[0] for p in front], [p[1] for p in front], color="tab:blue", drawstyle="steps-post",
                label="Pareto front")
        sim_ax = ax.twinx()
        for i, fi in enumerate(finalists):
            x = fi["planned"]["peak"][key] / 1e9
            y = gb / fi["simulated"]["step_time"]
            sim_ax.scatter([x], [y], s=160 if i == 0 else 60, marker="*" if i == 0 else "o",
                           facecolors="tab:red" if i == 0 else "none", edgecolors="tab:red",
                           label=("pick (simulated)" if i == 0 else "finalists (simulated)") if i < 2 else None)
        ax.set_xlabel(f"peak {label} memory per rank (GB)")
        ax.set_ylabel("samples/s, idealized schedule", color="tab:blue")
        sim_ax.set_ylabel("samples/s, simulated", color="tab:red")
        ax.grid(alpha=0.3)
        if key == TIERS[0][0]:
            handles = ax.get_legend_handles_labels()
            sim_handles = sim_ax.get_legend_handles_labels()
            ax.legend(handles[0] + sim_handles[0], handles[1] + sim_handles[1], fontsize=8)
        print(f"{label} front:")
        for p in front:
            print(f"  {p[0]:10.3f} GB  {p[1]:10.4g} samples/s  {p[2]}")
    fig.suptitle(f"zinf tune: {rep['model']} on {rep['hwprofile']} x {rep['nodes']} node(s), "
                 f"global batch {gb}: throughput against memory per tier")
    for ext in ("png", "pdf"):
        folder = a.img if ext == "png" and a.img else a.out
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"{name}_pareto.{ext}")
        fig.savefig(path, dpi=120)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
