#!/usr/bin/env python3
"""A training run's curves from its `zinf train --metrics` record: loss (training and held-out),
learning rate and tokens/s against step, as one PNG.

    build/zinf train ... --metrics out/run.jsonl
    /usr/bin/python3 analysis/train_report.py out/run.jsonl [--out out/run.png]

The record is JSON Lines, one object per step ("kind": "step") and per evaluation ("kind": "eval").
A resumed run appends to it and may repeat steps it ran before its checkpoint was taken: for each
step the last line wins. Prints the first and last losses and the median tokens/s.
"""
import argparse
import json
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_records(path):
    """{kind: {step: record}}, the last record of each step winning; bad lines name their number."""
    runs = {"step": {}, "eval": {}}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}: line {number} is not JSON ({e})")
            kind = r.get("kind")
            if kind not in runs or not isinstance(r.get("step"), int):
                sys.exit(f"{path}: line {number} has no kind 'step' or 'eval' with an integer step")
            runs[kind][r["step"]] = r
    return {k: [v[s] for s in sorted(v)] for k, v in runs.items()}


def plot(records, out, title):
    steps = records["step"]
    fig, axes = plt.subplots(3, 1, figsize=(7, 8), sharex=True)
    x = [r["step"] for r in steps]
    axes[0].plot(x, [r["loss"] for r in steps], label="training loss", lw=1)
    if records["eval"]:
        axes[0].plot([r["step"] for r in records["eval"]], [r["loss"] for r in records["eval"]], "o-",
                     label="held-out loss")
    axes[0].set_ylabel("loss")
    axes[0].legend()
    axes[1].plot(x, [r["lr"] for r in steps], color="tab:green")
    axes[1].set_ylabel("learning rate")
    axes[2].plot(x, [r["tokens_per_s"] for r in steps], color="tab:gray")
    axes[2].set_ylabel("tokens/s")
    axes[2].set_xlabel("step")
    axes[0].set_title(title)
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("metrics", help="a zinf train --metrics FILE.jsonl")
    ap.add_argument("--out", help="the PNG to write (default: the metrics file with .png)")
    a = ap.parse_args(argv)
    records = read_records(a.metrics)
    if not records["step"]:
        sys.exit(f"{a.metrics}: no step records")
    out = a.out or os.path.splitext(a.metrics)[0] + ".png"
    plot(records, out, os.path.basename(a.metrics))
    steps = records["step"]
    line = (f"steps {steps[0]['step']}-{steps[-1]['step']}: loss {steps[0]['loss']:.3f} -> {steps[-1]['loss']:.3f}, "
            f"median {statistics.median(r['tokens_per_s'] for r in steps):.0f} tokens/s")
    if records["eval"]:
        last = records["eval"][-1]
        line += f"; held-out loss {last['loss']:.3f} at step {last['step']}"
    print(f"{line}; wrote {out}")


if __name__ == "__main__":
    main()
