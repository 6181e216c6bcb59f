#!/usr/bin/python3
"""The validation report: predicted vs measured step time over the suite (experiments/validation).

Reads <runs>/pass-<k>/<name>/validate.json (written by `zinf validate`; a <runs> without pass-<k>
folders is one pass) and writes to <out>:
  validation.csv           one row per configuration: over the passes, the median of the measured
                           step times (each a median over steps) and of the predictions, and the
                           median, smallest and largest of the errors
  passes.csv               one row per configuration and pass: measured, predicted, error
  lanes.csv                per configuration and lane: busy seconds per step, measured and predicted
                           (medians over the passes)
  scatter.png / .pdf       predicted vs measured step time, with the y = x line and the +-10 % band
  errors.png / .pdf        each configuration's error: the median over the passes, and each pass
  gantt_<name>.png / .pdf  the measured and the predicted Timeline of one configuration, per lane
                           (the first pass)
and prints the table with the median and largest |error| and whether the suite's goals are met,
for the medians over the passes and for each pass alone.

  /usr/bin/python3 analysis/validation_report.py analysis/validation/runs analysis/validation --gantt mini-nvme \
      [--img docs/results/img/validation]   (the PNGs there instead of beside the PDFs)
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
    """One pass: the validate.json of each configuration folder under runs_dir, by name."""
    rows = []
    for name in sorted(os.listdir(runs_dir)):
        path = os.path.join(runs_dir, name, "validate.json")
        if os.path.exists(path):
            with open(path) as f:
                j = json.load(f)
            j["name"] = name
            j["dir"] = os.path.join(runs_dir, name)
            rows.append(j)
    return rows


def pass_number(folder):
    try:
        return int(folder[len("pass-"):])
    except ValueError:
        return None


def load_passes(runs_dir):
    """[(pass number, rows)], in pass order; a runs_dir without pass-<k> folders is pass 1."""
    numbered = [(pass_number(d), d) for d in os.listdir(runs_dir) if d.startswith("pass-")]
    numbered = sorted((k, d) for k, d in numbered if k is not None and os.path.isdir(os.path.join(runs_dir, d)))
    if not numbered:
        return [(1, load_runs(runs_dir))]
    return [(k, load_runs(os.path.join(runs_dir, d))) for k, d in numbered]


def combine(passes):
    """One row per configuration over the passes it ran in: medians of the measured step time, the
    prediction and the error, the errors' range, and the medians of each lane's busy time."""
    by_name = {}
    for k, rows in passes:
        for r in rows:
            by_name.setdefault(r["name"], []).append((k, r))
    out = []
    for name in sorted(by_name):
        runs = by_name[name]
        first = runs[0][1]
        errors = [r["error"] for _, r in runs]
        measured = [r["measured"]["median"] for _, r in runs]
        out.append({
            "name": name, "model": first["model"], "config": first["config"], "ranks": first["ranks"],
            "steps": first["measured"]["steps"], "passes": len(runs),
            "measured": statistics.median(measured), "measured_lo": min(measured), "measured_hi": max(measured),
            "predicted": statistics.median(r["predicted"] for _, r in runs),
            "error": statistics.median(errors), "error_lo": min(errors), "error_hi": max(errors),
            "lanes": {lane: {side: statistics.median(r["lanes"][lane][side] for _, r in runs)
                             for side in ("measured", "predicted")} for lane in LANES},
            "dir": first["dir"],
        })
    return out


def goals(errors):
    med = statistics.median(abs(e) for e in errors)
    worst = max(abs(e) for e in errors)
    return med, worst, med <= 0.10 and worst <= 0.25, med <= 0.05


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
    p.add_argument("--img", help="folder for the PNG plots (default: out); docs/results/img/validation for the results page")
    a = p.parse_args()
    if a.img:
        os.makedirs(a.img, exist_ok=True)
    passes = [(k, rows) for k, rows in load_passes(a.runs) if rows]
    if not passes:
        sys.exit(f"no validate.json under {a.runs} (nor under {a.runs}/pass-<k>/)")
    rows = combine(passes)
    os.makedirs(a.out, exist_ok=True)

    with open(os.path.join(a.out, "validation.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["config", "model", "run_config", "ranks", "passes", "steps", "measured_median_s",
                    "measured_lowest_pass_s", "measured_highest_pass_s", "predicted_s", "error", "error_lowest",
                    "error_highest"])
        for r in rows:
            w.writerow([r["name"], r["model"], os.path.basename(r["config"]), r["ranks"], r["passes"], r["steps"],
                        f"{r['measured']:.4f}", f"{r['measured_lo']:.4f}", f"{r['measured_hi']:.4f}",
                        f"{r['predicted']:.4f}", f"{r['error']:.4f}", f"{r['error_lo']:.4f}", f"{r['error_hi']:.4f}"])
    with open(os.path.join(a.out, "passes.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["pass", "config", "measured_median_s", "measured_min_s", "measured_max_s", "predicted_s", "error"])
        for k, prow in passes:
            for r in prow:
                m = r["measured"]
                w.writerow([k, r["name"], f"{m['median']:.4f}", f"{m['min']:.4f}", f"{m['max']:.4f}",
                            f"{r['predicted']:.4f}", f"{r['error']:.4f}"])
    with open(os.path.join(a.out, "lanes.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["config", "lane", "measured_s", "predicted_s"])
        for r in rows:
            for lane in LANES:
                v = r["lanes"][lane]
                w.writerow([r["name"], lane, f"{v['measured']:.5f}", f"{v['predicted']:.5f}"])

    # Scatter: predicted vs measured, each pass a small dot, the medians over passes large.
    fig, ax = plt.subplots(figsize=(5.5, 5))
    every = [(r["measured"]["median"], r["predicted"]) for _, prow in passes for r in prow]
    lo = min(min(x, y) for x, y in every) * 0.7
    hi = max(max(x, y) for x, y in every) * 1.4
    ax.plot([lo, hi], [lo, hi], "k-", lw=1, label="predicted = measured")
    ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="0.85", label="+-10 %")
    if len(passes) > 1:
        ax.plot([x for x, _ in every], [y for _, y in every], ".", color="0.45", ms=3, label="one pass")
    for r in rows:
        x, y = r["measured"], r["predicted"]
        ax.errorbar([x], [y], xerr=[[x - r["measured_lo"]], [r["measured_hi"] - x]], fmt="o", ms=5, capsize=2)
        ax.annotate(r["name"], (x, y), fontsize=7, xytext=(4, -3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel(f"measured step time (s), median over {len(passes)} pass(es); bars: passes' range")
    ax.set_ylabel("predicted step time (s), zinf sim on the measured profile")
    ax.set_title("zinf validate: predicted vs measured")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    for ext in ("png", "pdf"):
        fig.savefig(os.path.join(a.img if a.img and ext == "png" else a.out, f"scatter.{ext}"), dpi=150)
    plt.close(fig)

    # Error per configuration: each pass a dot, the median over passes a bar, the goals as bands.
    fig, ax = plt.subplots(figsize=(6.5, 0.42 * len(rows) + 1.4))
    ax.axvspan(-10, 10, color="0.92", label="+-10 %")
    ax.axvspan(-5, 5, color="0.82", label="+-5 %")
    ax.axvline(0, color="k", lw=0.8)
    for i, r in enumerate(rows):
        ax.barh(i, 100 * r["error"], height=0.5, color="#4c72b0", alpha=0.8)
        for _, prow in passes:
            for q in prow:
                if q["name"] == r["name"]:
                    ax.plot(100 * q["error"], i, "o", color="0.2", ms=3.5)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([r["name"] for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("error of the predicted step time (%)")
    ax.set_title(f"bars: median over {len(passes)} pass(es); dots: single passes", fontsize=9)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.tight_layout()
    for ext in ("png", "pdf"):
        fig.savefig(os.path.join(a.img if a.img and ext == "png" else a.out, f"errors.{ext}"), dpi=150)
    plt.close(fig)

    # Gantt of one configuration, measured and predicted, from the first pass that ran it.
    gdir = next((r["dir"] for _, prow in passes for r in prow if r["name"] == a.gantt), None)
    drew_gantt = gdir is not None and os.path.exists(os.path.join(gdir, "measured.csv"))
    if drew_gantt:
        me = read_timeline(os.path.join(gdir, "measured.csv"))
        pe = read_timeline(os.path.join(gdir, "predicted.csv"))
        xmax = max([e for *_, e in me] + [e for *_, e in pe]) * 1.02
        fig, axes = plt.subplots(1, 2, figsize=(14, 3.8), sharey=True)
        gantt(axes[0], me, f"{a.gantt}: measured (last step, rank 0)", xmax=xmax)
        gantt(axes[1], pe, f"{a.gantt}: predicted (zinf sim, rank 0)", xmax=xmax)
        fig.tight_layout()
        for ext in ("png", "pdf"):
            fig.savefig(os.path.join(a.img if a.img and ext == "png" else a.out, f"gantt_{a.gantt}.{ext}"), dpi=150)
        plt.close(fig)

    print(f"\n{'config':<17}{'ranks':>5}{'measured':>11}{'passes':>19}{'predicted':>11}{'error':>9}{'passes':>17}")
    for r in rows:
        print(f"{r['name']:<17}{r['ranks']:>5}{r['measured']:>10.3f}s {r['measured_lo']:>8.3f}..{r['measured_hi']:<8.3f}"
              f"{r['predicted']:>10.3f}s{100 * r['error']:>+8.1f}%  {100 * r['error_lo']:+6.1f}..{100 * r['error_hi']:+.1f}%")
    if len(passes) > 1:
        print()
        for k, prow in passes:
            med, worst, first, second = goals([r["error"] for r in prow])
            print(f"pass {k}: median |error| {100 * med:.1f}%   max |error| {100 * worst:.1f}%"
                  f"   goals: {'met' if first else 'NOT met'}, median <= 5% {'met' if second else 'NOT met'}")
    med, worst, first, second = goals([r["error"] for r in rows])
    over = f"over {len(rows)} configurations" + (f", each the median of {len(passes)} passes" if len(passes) > 1 else "")
    print(f"\nmedian |error| {100 * med:.1f}%   max |error| {100 * worst:.1f}%   {over}")
    print(f"goal median <= 10% and max <= 25%: {'met' if first else 'NOT met'};"
          f" median <= 5%: {'met' if second else 'NOT met'}")
    print(f"wrote {a.out}/validation.csv, passes.csv, lanes.csv, scatter.png/.pdf, errors.png/.pdf" +
          (f", gantt_{a.gantt}.png/.pdf" if drew_gantt else ""))


if __name__ == "__main__":
    main()
