#!/usr/bin/python3
"""Figures for any `zinf sweep` CSV: throughput against each axis the sweep varied.

One figure per varied axis: the metric against that axis, one line per combination of the other
varied axes (when there are more than eight, one line: the best over them). Points whose plan was
refused (does-not-fit) are drawn as red crosses on the x axis, points that failed as black ones.
With two or more varied axes, a heatmap for each pair (the best over any others), refused and
failed cells named. PNG and PDF of each, into --out (default: beside the CSV).

  /usr/bin/python3 analysis/sweep_report.py results.csv [--metric tflops_per_gpu] [--out DIR]
"""
import argparse
import csv
import itertools
import math
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# What `zinf sweep` writes after a point's coordinates (core/sweep_table.cpp).
FIRST_RESULT_COLUMN = "gpus"
METRICS = {"tflops_per_gpu": ("TFLOP/s per GPU", max), "samples_per_s": ("samples/s", max),
           "step_time_s": ("step time (s)", min), "percent_of_peak": ("% of peak", max)}
MAX_LINES = 8

_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "Ki": 2.0**10, "Mi": 2.0**20,
           "Gi": 2.0**30, "Ti": 2.0**40}
_UNIT = {"B": 1.0, "B/s": 1.0, "b/s": 1 / 8, "bit/s": 1 / 8, "FLOP/s": 1.0, "flop/s": 1.0}
_TIME = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


def quantity(text):
    """A number as zinf's files write it ("25 GB/s", "32 GiB", "5 us", "0.5"), or None."""
    m = re.fullmatch(r"\s*([-+0-9.eE]+)\s*(\S*)\s*", text)
    if not m:
        return None
    try:
        value = float(m.group(1))
    except ValueError:
        return None
    unit = m.group(2)
    if not unit:
        return value
    if unit in _TIME:
        return value * _TIME[unit]
    for p in sorted(_PREFIX, key=len, reverse=True):
        if unit.startswith(p) and unit[len(p):] in _UNIT:
            return value * _PREFIX[p] * _UNIT[unit[len(p):]]
    return None


def read(path):
    with open(path) as f:
        reader = csv.DictReader(f)
        cols = reader.fieldnames or []
        rows = list(reader)
    if FIRST_RESULT_COLUMN not in cols:
        sys.exit(f"{path}: not a zinf sweep CSV (no '{FIRST_RESULT_COLUMN}' column)")
    return cols[:cols.index(FIRST_RESULT_COLUMN)], rows


def label(axis, value):
    """File axes by their file's name; everything else as written."""
    if axis in ("model", "hwprofile", "config"):
        return os.path.splitext(os.path.basename(value))[0]
    return value


class Axis:
    """A varied coordinate: its values in order (numeric ones sorted by size) and how to plot them."""

    def __init__(self, name, rows):
        self.name = name
        self.zipped = []  # coordinates that advance with this one
        seen = []
        for r in rows:
            if r[name] not in seen:
                seen.append(r[name])
        nums = [quantity(v) for v in seen]
        self.numeric = all(n is not None for n in nums)
        if self.numeric:
            order = sorted(range(len(seen)), key=lambda i: nums[i])
            self.values = [seen[i] for i in order]
            self.x = {seen[i]: nums[i] for i in order}
            lo, hi = min(nums), max(nums)
            self.log = lo > 0 and hi / lo >= 16
        else:
            self.values = seen
            self.x = {v: i for i, v in enumerate(seen)}
            self.log = False

    def title(self):
        """The axis label: field names without their file's prefix, zipped ones joined."""
        names = [re.sub(r"^(model|hwprofile|config)\.", "", n).replace(" (scale)", "") for n in [self.name] + self.zipped]
        text = " &\n".join(names) if sum(len(n) for n in names) > 40 else " & ".join(names)
        return text + (" (x the file's value)" if "(scale)" in self.name else "")


def varied_axes(coords, rows):
    """Coordinates with more than one value; axes zipped together (each value of one always beside
    the same value of the other) are one axis, named after both."""
    axes = []
    for c in coords:
        if len({r[c] for r in rows}) < 2:
            continue
        for a in axes:
            pairs = {(r[a.name], r[c]) for r in rows}
            if len(pairs) == len({p[0] for p in pairs}) == len({p[1] for p in pairs}):
                a.zipped.append(c)
                break
        else:
            axes.append(Axis(c, rows))
    return axes


def value_of(row, metric):
    if row["status"] != "ok" or row.get(metric, "") == "":
        return None
    return float(row[metric])


def best(rows, metric):
    """The best metric over `rows` and, if none ran, why: 'refused' or 'error'."""
    pick = METRICS.get(metric, ("", max))[1]
    vals = [v for v in (value_of(r, metric) for r in rows) if v is not None]
    if vals:
        return pick(vals), None
    if any(r["status"] == "does-not-fit" for r in rows):
        return None, "refused"
    return None, "error"


def safe(name):
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")


# Where save writes PNGs when not beside the PDFs: the results page's images (--img).
IMAGES = {"dir": None}


def save(fig, out, name):
    fig.tight_layout()
    paths = []
    for ext in ("png", "pdf"):
        folder = IMAGES["dir"] if ext == "png" and IMAGES["dir"] else out
        os.makedirs(folder, exist_ok=True)
        paths.append(os.path.join(folder, f"{name}.{ext}"))
        fig.savefig(paths[-1], dpi=150)
    plt.close(fig)
    print(f"  {name}.png/.pdf")
    return paths


def line_figure(axis, others, rows, metric, stem, out):
    ylabel = METRICS.get(metric, (metric,))[0]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    combos = sorted({tuple(r[o.name] for o in others) for r in rows})
    if len(combos) > MAX_LINES:
        series = {f"best over {', '.join(o.name for o in others)}": rows}
    else:
        series = {}
        for c in combos:
            name = ", ".join(f"{o.name}={label(o.name, v)}" for o, v in zip(others, c)) or metric
            series[name] = [r for r in rows if tuple(r[o.name] for o in others) == c]
    refused_x, failed_x = [], []
    for name, rs in series.items():
        xs, ys = [], []
        for v in axis.values:
            at = [r for r in rs if r[axis.name] == v]
            if not at:
                continue
            y, why = best(at, metric)
            if y is not None:
                xs.append(axis.x[v])
                ys.append(y)
            elif why == "refused":
                refused_x.append(axis.x[v])
            else:
                failed_x.append(axis.x[v])
        if xs:
            ax.plot(xs, ys, marker="o", label=name)
    if refused_x:
        ax.scatter(refused_x, [0] * len(refused_x), marker="x", color="red", s=60, zorder=5, clip_on=False,
                   label="refused (does not fit)")
    if failed_x:
        ax.scatter(failed_x, [0] * len(failed_x), marker="x", color="black", s=60, zorder=5, clip_on=False,
                   label="error")
    if axis.log:
        ax.set_xscale("log", base=2)
    if not axis.numeric:
        ax.set_xticks(range(len(axis.values)), [label(axis.name, v) for v in axis.values], rotation=20)
    elif len(axis.values) <= 12:
        ax.set_xticks([axis.x[v] for v in axis.values], [label(axis.name, v) for v in axis.values])
    ax.set_ylim(bottom=0)
    ax.set_xlabel(axis.title())
    ax.set_ylabel(ylabel)
    ax.set_title(f"{stem}: {ylabel} vs {axis.name}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return save(fig, out, f"{stem}_vs_{safe(axis.name)}")


def heatmap(a, b, rows, metric, stem, out, rest):
    ylabel = METRICS.get(metric, (metric,))[0]
    grid = [[best([r for r in rows if r[a.name] == va and r[b.name] == vb], metric) for va in a.values]
            for vb in b.values]
    fig, ax = plt.subplots(figsize=(max(5.5, 2 + 0.9 * len(a.values)), max(3.5, 1.5 + 0.5 * len(b.values))))
    data = [[(y if y is not None else math.nan) for y, _ in row] for row in grid]
    im = ax.imshow(data, origin="lower", aspect="auto", cmap="viridis")
    cb = fig.colorbar(im, ax=ax)
    cb.set_label(ylabel)
    finite = [y for row in data for y in row if not math.isnan(y)]
    mid = (min(finite) + max(finite)) / 2 if finite else 0
    for j, row in enumerate(grid):
        for i, (y, why) in enumerate(row):
            if y is not None:
                ax.text(i, j, f"{y:.3g}", ha="center", va="center", fontsize=7, color="white" if y < mid else "black")
            elif why is not None and any(r[a.name] == a.values[i] and r[b.name] == b.values[j] for r in rows):
                ax.text(i, j, why, ha="center", va="center", fontsize=7, color="red" if why == "refused" else "black")
    ax.set_xticks(range(len(a.values)), [label(a.name, v) for v in a.values], rotation=20, fontsize=8)
    ax.set_yticks(range(len(b.values)), [label(b.name, v) for v in b.values], fontsize=8)
    ax.set_xlabel(a.title(), fontsize=8)
    ax.set_ylabel(b.title(), fontsize=8)
    over = f"\nbest over {', '.join(rest)}" if rest else ""
    ax.set_title(f"{stem}: {ylabel}{over}", fontsize=9)
    return save(fig, out, f"{stem}_heatmap_{safe(a.name)}_{safe(b.name)}")


def report(path, metric="tflops_per_gpu", out=None):
    """Draws every figure for the CSV at `path`; returns the paths written."""
    coords, rows = read(path)
    if not rows:
        sys.exit(f"{path}: no rows")
    if metric not in rows[0]:
        sys.exit(f"{path}: no column '{metric}'")
    out = out or os.path.dirname(os.path.abspath(path))
    os.makedirs(out, exist_ok=True)
    stem = os.path.splitext(os.path.basename(path))[0]
    axes = varied_axes(coords, rows)
    counts = {s: sum(r["status"] == s for r in rows) for s in ("ok", "does-not-fit", "error")}
    print(f"{path}: {len(rows)} points ({counts['ok']} ok, {counts['does-not-fit']} refused, {counts['error']} failed); "
          f"varied: {', '.join(a.name for a in axes) or 'nothing'}")
    written = []
    for axis in axes:
        written += line_figure(axis, [o for o in axes if o is not axis], rows, metric, stem, out)
    for a, b in itertools.combinations(axes, 2):
        written += heatmap(a, b, rows, metric, stem, out, [o.name for o in axes if o is not a and o is not b])
    return written


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("csv", help="a CSV written by zinf sweep")
    p.add_argument("--metric", default="tflops_per_gpu", help=f"column to draw ({', '.join(METRICS)}, ...)")
    p.add_argument("--out", help="folder for the figures (default: the CSV's)")
    p.add_argument("--img", help="folder for the PNGs (default: --out); docs/results/img/sweeps for the results page")
    a = p.parse_args()
    IMAGES["dir"] = a.img
    report(a.csv, a.metric, a.out)


if __name__ == "__main__":
    main()
