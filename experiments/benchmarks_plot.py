#!/usr/bin/env python3
"""The benchmarks' headline ratios in one picture: each figure against its reference, from
docs/results/data/benchmarks.csv (the medians the benchmark programs printed; each row names its
program). Writes docs/results/img/benchmarks.png.

  /usr/bin/python3 experiments/benchmarks_plot.py [--data CSV] [--out PNG]
"""
import argparse
import csv
import os


def main():
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.path.join(root, "docs", "results", "data", "benchmarks.csv"))
    ap.add_argument("--out", default=os.path.join(root, "docs", "results", "img", "benchmarks.png"))
    a = ap.parse_args()
    with open(a.data) as f:
        rows = list(csv.DictReader(f))
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 0.55 * len(rows) + 1.2))
    labels = [f"{r['figure']}\nagainst {r['against']}" for r in rows][::-1]
    ratios = [float(r["ratio"]) for r in rows][::-1]
    ax.barh(labels, ratios, color="C2")
    for y, (v, r) in enumerate(zip(ratios, rows[::-1])):
        ax.text(v * 1.05, y, f"{v:g}x" + (f"  (goal {r['goal']})" if r["goal"] else ""), va="center", fontsize=8)
    ax.axvline(1.0, color="gray", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlim(0.5, 40)
    ax.set_xlabel("ratio to the reference (medians; log scale)")
    ax.tick_params(axis="y", labelsize=7)
    ax.set_title("Benchmarks on a 2-core VM (shared; see docs/results/benchmarks.md)", fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    fig.savefig(a.out, dpi=110)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
