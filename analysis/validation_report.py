#!/usr/bin/python3
"""The validation report: predicted vs measured step time over the suite (experiments/validation).

Reads <runs>/<name>/validate.json (written by `zinf validate`) and writes to <out>:
  validation.csv           one row per configuration: measured median / min / max, predicted, error
  lanes.csv                per configuration and lane: busy seconds per step, measured and predicted
  scatter.png / .pdf       predicted vs measured step time, with the y = x line and the +-10 % band
  gantt_<name>.png / .pdf  the measured and the predicted Timeline of one configuration, per lane
and prints the table with the median and largest |error| and whether the suite's goals are met.

  /usr/bin/python3 analysis/validation_report.py analysis/validation/runs analysis/validation --gantt mini-nvme
"""
import argparse
import csv
import json
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LANES = ["compute", "h2d", "d2h", "nvme_read", "nvme_write", "comm", "cpu_optim"]
COLORS = {"compute": "#4c72b0", "h2d": "#55a868", "d2h": "#8172b2", "nvme_read": "#c44e52",
          "nvme_write": "#dd8452", "comm": "#937860", "cpu_optim": "#da8bc3"}


def load_runs(runs_dir):
    rows = []
    for name in sorted(os.listdir(runs_dir)):
        path = os.path.join(runs_dir, name, "validate.json")
        if os.path.exists(path):
            with open(path) as f:
                j = json.load(f)
            j["name"] = name
            rows.append(j)
    return rows


def read_timeline(path):
    events = []
    with open(path) as f:
        for r in csv.DictReader(f):
            events.append((int(r["rank"]), r["lane"], float(r["start"]), float(r["end"])))
    return events


def gantt(ax, events, title, rank=0, xmax=None):
    ys = {lane: i for i, lane in enumerate(LANES)}
    for rk, lane, s, e in events:
        if rk != rank or lane not in ys:
            continue
        ax.broken_barh([(s, max(e - s, 1e-5))], (ys[lane] - 0.4, 0.8), facecolors=COLORS[lane], edgecolor="none")
    ax.set_yticks(range(len(LANES)))
    ax.set_yticklabels(LANES)
    ax.invert_yaxis()
    ax.set_title(title)
    ax.set_xlabel("seconds from the start of the step")
    if xmax:
        ax.set_xlim(0, xmax)
    ax.grid(axis="x", alpha=0.3)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs")
    p.add_argument("out")
    p.add_argument("--gantt", default="mini-nvme", help="configuration whose Timelines are drawn")
    a = p.parse_args()
    rows = load_runs(a.runs)
    if not rows:
        sys.exit(f"no validate.json under {a.runs}")
    os.makedirs(a.out, exist_ok=True)

    with open(os.path.join(a.out, "validation.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["config", "model", "run_config", "ranks", "steps", "measured_median_s", "measured_min_s",
                    "measured_max_s", "predicted_s", "error"])
        for r in rows:
            m = r["measured"]
            w.writerow([r["name"], r["model"], os.path.basename(r["config"]), r["ranks"], m["steps"],
                        f"{m['median']:.4f}", f"{m['min']:.4f}", f"{m['max']:.4f}", f"{r['predicted']:.4f}",
                        f"{r['error']:.4f}"])
    with open(os.path.join(a.out, "lanes.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["config", "lane", "measured_s", "predicted_s"])
        for r in rows:
            for lane in LANES:
                v = r["lanes"][lane]
                w.writerow([r["name"], lane, f"{v['measured']:.5f}", f"{v['predicted']:.5f}"])

    # Scatter: predicted vs measured.
    fig, ax = plt.subplots(figsize=(5.5, 5))
    meas = [r["measured"]["median"] for r in rows]
    pred = [r["predicted"] for r in rows]
    lo, hi = min(meas + pred) * 0.7, max(meas + pred) * 1.4
    ax.plot([lo, hi], [lo, hi], "k-", lw=1, label="predicted = measured")
    ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="0.85", label="+-10 %")
    for r, x, y in zip(rows, meas, pred):
        m = r["measured"]
        ax.errorbar([x], [y], xerr=[[x - m["min"]], [m["max"] - x]], fmt="o", ms=5, capsize=2)
        ax.annotate(r["name"], (x, y), fontsize=7, xytext=(4, -3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured step time (s), median; bars: min..max")
    ax.set_ylabel("predicted step time (s), zinf sim on the measured profile")
    ax.set_title("zinf validate: predicted vs measured")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    for ext in ("png", "pdf"):
        fig.savefig(os.path.join(a.out, f"scatter.{ext}"), dpi=150)
    plt.close(fig)

    # Gantt of one configuration, measured and predicted.
    gdir = os.path.join(a.runs, a.gantt)
    if os.path.exists(os.path.join(gdir, "measured.csv")):
        me = read_timeline(os.path.join(gdir, "measured.csv"))
        pe = read_timeline(os.path.join(gdir, "predicted.csv"))
        xmax = max([e for *_, e in me] + [e for *_, e in pe]) * 1.02
        fig, axes = plt.subplots(1, 2, figsize=(14, 3.8), sharey=True)
        gantt(axes[0], me, f"{a.gantt}: measured (last step, rank 0)", xmax=xmax)
        gantt(axes[1], pe, f"{a.gantt}: predicted (zinf sim, rank 0)", xmax=xmax)
        fig.tight_layout()
        for ext in ("png", "pdf"):
            fig.savefig(os.path.join(a.out, f"gantt_{a.gantt}.{ext}"), dpi=150)
        plt.close(fig)

    errors = [r["error"] for r in rows]
    med = statistics.median(abs(e) for e in errors)
    worst = max(abs(e) for e in errors)
    print(f"\n{'config':<17}{'ranks':>5}{'measured':>11}{'spread':>19}{'predicted':>11}{'error':>9}")
    for r in rows:
        m = r["measured"]
        print(f"{r['name']:<17}{r['ranks']:>5}{m['median']:>10.3f}s {m['min']:>8.3f}..{m['max']:<8.3f}"
              f"{r['predicted']:>10.3f}s{100 * r['error']:>+8.1f}%")
    print(f"\nmedian |error| {100 * med:.1f}%   max |error| {100 * worst:.1f}%   over {len(rows)} configurations")
    print(f"goal median <= 10% and max <= 25%: {'met' if med <= 0.10 and worst <= 0.25 else 'NOT met'};"
          f" median <= 5%: {'met' if med <= 0.05 else 'NOT met'}")
    print(f"wrote {a.out}/validation.csv, lanes.csv, scatter.png/.pdf" +
          (f", gantt_{a.gantt}.png/.pdf" if os.path.exists(os.path.join(gdir, "measured.csv")) else ""))


if __name__ == "__main__":
    main()
