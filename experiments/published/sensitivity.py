#!/usr/bin/python3
"""How much of each published point's simulated step each hardware number decides.

    /usr/bin/python3 experiments/published/sensitivity.py [--zinf build/zinf] [--out analysis/published]
        [--only ID ...] [--resources NAME ...] [--factor 1.1] [--jobs N]

For every point of points.yaml and every resource of the point's hwprofile (GPU compute, HBM, NVLink,
PCIe, NICs, NVMe read and write, host memory, CPU Adam), simulates the point once more with that
resource `factor` times faster and reports the resource's share of the step: the fraction of the
step time that scaled with it, (1 - T_faster / T) / (1 - 1 / factor). A share of 1 is a step bound
by that resource alone, 0 one it does not touch; overlapped resources can each hold a large share.

For a prediction point off by more than 10 %, "to match" names each resource holding at least 20 %
of the step (or the largest) and the first-order factor on it alone that would give the measured
step time, g = 1 / (1 - (1 - T_measured / T) / share), when one exists (a share too small to
close the gap gives none). That is an explanation to look for, never a fit: hwprofiles are fitted to the
calibration points only.

Writes OUT/sensitivity.csv, OUT/sensitivity.md and OUT/sensitivity.{png,pdf} (a heat map).
"""
import argparse
import concurrent.futures
import copy
import csv
import json
import os
import re
import subprocess
import sys
import tempfile

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as published  # noqa: E402  (experiments/published/run.py)

ROOT = published.ROOT

# Each resource: its name and the profile fields scaled together (a path of keys into the YAML).
RESOURCES = [
    ("GPU compute", [("node", "gpu", "peak_flops")]),
    ("HBM", [("node", "gpu", "memory_bandwidth")]),
    ("NVLink", [("node", "nvlink", "bandwidth_per_gpu")]),
    ("PCIe", [("node", "pcie", "bandwidth_per_gpu"), ("node", "pcie", "switch_uplink")]),
    ("NICs", [("node", "nic", "bandwidth")]),
    ("NVMe read", [("node", "nvme", "read_bandwidth")]),
    ("NVMe write", [("node", "nvme", "write_bandwidth")]),
    ("host memory", [("node", "host", "memory_bandwidth")]),
    ("CPU Adam", [("node", "host", "adam_params_per_s")]),
]

NUMBER = re.compile(r"^\s*([-+0-9.eE]+)\s*(.*)$")


def scaled(value, factor):
    """`value` (a number, or a number with its unit: "125 TFLOP/s") times `factor`, unit kept."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value * factor
    m = NUMBER.match(str(value))
    if not m:
        raise ValueError(f"not a number with a unit: {value!r}")
    number = float(m.group(1)) * factor
    return f"{number:.6g} {m.group(2)}".strip()


def with_resource(profile, fields, factor):
    """A copy of `profile` with each of `fields` that it has scaled by `factor`; the count scaled."""
    p = copy.deepcopy(profile)
    found = 0
    for path in fields:
        node = p
        for key in path[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
            if node is None:
                break
        if isinstance(node, dict) and path[-1] in node:
            node[path[-1]] = scaled(node[path[-1]], factor)
            found += 1
    return p, found


def step_share(t_base, t_faster, factor):
    """The fraction of the step that scaled with a resource made `factor` times faster."""
    return (1.0 - t_faster / t_base) / (1.0 - 1.0 / factor)


def factor_to_match(share, time_ratio):
    """First-order factor on a resource with `share` of the step that gives a step `time_ratio` times
    the simulated one (measured / simulated time); None when the share cannot close the gap."""
    if share <= 0.01:
        return None
    inverse = 1.0 - (1.0 - time_ratio) / share
    return 1.0 / inverse if inverse > 0 else None


def load_profile(paths):
    hw = paths["hw"]
    path = hw if os.path.sep in hw else os.path.join(ROOT, "hwprofiles", f"{hw}.yaml")
    with open(path) as f:
        return yaml.safe_load(f)


def simulate_step(zinf, point, paths, hw_path):
    """The simulated step (the `zinf sim --json` report), or None with the reason."""
    cmd = [zinf, "sim", "--model", paths["model"], "--hw", hw_path, "--nodes", str(point["nodes"]),
           "--config", paths["config"], "--json"]
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    text = run.stdout.strip()
    if run.returncode != 0 or not text.startswith("{"):
        return None, (run.stderr.strip() or text or f"exit {run.returncode}").splitlines()[-1][:200]
    report = json.loads(text)
    if not report.get("within_budget", True):
        return None, "the memory model says it does not fit"
    return report, ""


def point_jobs(point, folder, resources, factor):
    """The point's inputs written once, and one profile file per resource (None: the baseline)."""
    paths = published.write_inputs(point, folder)
    profile = load_profile(paths)
    jobs = []
    base = os.path.join(folder, "hw-base.yaml")
    with open(base, "w") as f:
        yaml.safe_dump(profile, f)
    jobs.append((None, base))
    for name, fields in resources:
        p, found = with_resource(profile, fields, factor)
        if not found:
            continue  # the profile has no such resource (no NVMe, no NIC): no share to report
        hw = os.path.join(folder, "hw-" + re.sub(r"\W+", "-", name.lower()) + ".yaml")
        with open(hw, "w") as f:
            yaml.safe_dump(p, f)
        jobs.append((name, hw))
    return paths, jobs


def progress(done, total):
    """`done`/`total` simulations on stderr: redrawn in place on a terminal, every tenth in a log."""
    if sys.stderr.isatty():
        print(f"\r{done}/{total} simulations", end="\n" if done == total else "", file=sys.stderr, flush=True)
    elif done == total or done % max(1, total // 10) == 0:
        print(f"{done}/{total} simulations", file=sys.stderr, flush=True)


def analyse(points, zinf, resources, factor, jobs_at_once, tmp):
    """One row per point: baseline step, each resource's share, and what would match the measurement."""
    work = []
    for p in points:
        folder = os.path.join(tmp, p["id"])
        os.makedirs(folder)
        paths, jobs = point_jobs(p, folder, resources, factor)
        work += [(p, paths, name, hw) for name, hw in jobs]
    results = {}
    done = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs_at_once) as pool:
        futures = {pool.submit(simulate_step, zinf, p, paths, hw): (p["id"], name) for p, paths, name, hw in work}
        for fut in concurrent.futures.as_completed(futures):
            results[futures[fut]] = fut.result()
            done += 1
            progress(done, len(work))
    rows = []
    for p in points:
        report, reason = results[(p["id"], None)]
        row = {"id": p["id"], "kind": p["kind"], "measured_tflops": p["measured_tflops"], "step_time": None,
               "predicted_tflops": None, "error": None, "reason": reason, "shares": {}, "match": ""}
        rows.append(row)
        if report is None:
            continue
        base = float(report["step_time"])
        row["step_time"] = base
        row["predicted_tflops"] = published.predicted_tflops(p, report["samples_per_s"], report["ranks"])
        row["error"] = row["predicted_tflops"] / p["measured_tflops"] - 1.0
        for name, _ in resources:
            if (p["id"], name) in results:
                faster, _ = results[(p["id"], name)]
                row["shares"][name] = step_share(base, float(faster["step_time"]), factor) if faster else None
        row["match"] = to_match(row)
    return rows


def to_match(row):
    """For a prediction off by more than 10 %: the resource with the largest share and the factor on
    it that would give the measured step (measured time / simulated = predicted / measured rate)."""
    if row["kind"] != "prediction" or abs(row["error"]) <= 0.10:
        return ""
    shares = {k: v for k, v in row["shares"].items() if v is not None}
    if not shares:
        return ""
    major = sorted((k for k, v in shares.items() if v >= 0.2), key=shares.get, reverse=True)
    if not major:
        major = [max(shares, key=shares.get)]
    said = []
    for name in major:
        g = factor_to_match(shares[name], 1.0 + row["error"])
        said.append(f"{name} x{g:.2f}" if g else f"{name}: cannot alone ({shares[name]:.0%} of the step)")
    return "; ".join(said)


def fmt_share(v):
    return "-" if v is None else f"{100 * v:.0f} %"


def table(rows, resources, factor):
    names = [n for n, _ in resources]
    lines = [f"Share of each point's simulated step that scales with each resource (each made {factor:g}x faster "
             "in turn; 100 % = the step is that resource alone).", "",
             "| point | kind | error | " + " | ".join(names) + " | to match |",
             "|---|---|---|" + "---|" * len(names) + "---|"]
    for r in rows:
        if r["step_time"] is None:
            lines.append(f"| {r['id']} | {r['kind']} | {r['reason']} |" + " |" * (len(names) + 1))
            continue
        shares = " | ".join(fmt_share(r["shares"].get(n)) for n in names)
        lines.append(f"| {r['id']} | {r['kind']} | {100 * r['error']:+.0f} % | {shares} | {r['match']} |")
    return "\n".join(lines)


def write_csv(rows, resources, path):
    names = [n for n, _ in resources]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "kind", "measured_tflops", "predicted_tflops", "error", "step_time"] + names + ["to_match", "reason"])
        for r in rows:
            w.writerow([r["id"], r["kind"], r["measured_tflops"],
                        "" if r["predicted_tflops"] is None else round(r["predicted_tflops"], 3),
                        "" if r["error"] is None else round(r["error"], 4),
                        "" if r["step_time"] is None else round(r["step_time"], 4)] +
                       ["" if r["shares"].get(n) is None else round(r["shares"][n], 4) for n in names] +
                       [r["match"], r["reason"]])


def plot(rows, resources, factor, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    names = [n for n, _ in resources]
    shown = [r for r in rows if r["step_time"] is not None]
    grid = np.array([[np.nan if r["shares"].get(n) is None else r["shares"][n] for n in names] for r in shown])
    fig, ax = plt.subplots(figsize=(1.0 * len(names) + 4.5, 0.36 * len(shown) + 1.8))
    im = ax.imshow(np.clip(grid, 0, 1), cmap="Blues", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=35, ha="right")
    ax.set_yticks(range(len(shown)))
    ax.set_yticklabels([f"{r['id']} ({100 * r['error']:+.0f} %)" + (" *" if r["kind"] == "calibration" else "")
                        for r in shown])
    for i, r in enumerate(shown):
        for j, n in enumerate(names):
            v = r["shares"].get(n)
            if v is not None and abs(v) >= 0.005:
                ax.text(j, i, f"{100 * v:.0f}", ha="center", va="center", fontsize=7,
                        color="white" if v > 0.6 else "black")
    ax.set_title(f"Share of the simulated step that scales with each resource ({factor:g}x faster in turn)\n"
                 "row label: simulated vs measured error; * calibration point", fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.03, pad=0.02)
    published.save_figure(fig, out, "sensitivity")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    published.suite_arguments(ap)
    ap.add_argument("--resources", nargs="*", help="resource names (default: all): " +
                    ", ".join(n for n, _ in RESOURCES))
    ap.add_argument("--factor", type=float, default=1.1, help="how much faster each resource is made (default 1.1)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="simulations at once")
    a = ap.parse_args(argv)
    published.IMAGES["dir"] = a.img
    if a.factor <= 1.0:
        ap.error("--factor must be above 1")
    with open(a.points) as f:
        points = published.expand(yaml.safe_load(f))
    if a.only:
        unknown = set(a.only) - {p["id"] for p in points}
        if unknown:
            ap.error(f"no such point in {a.points}: {', '.join(sorted(unknown))}")
        points = [p for p in points if p["id"] in a.only]
    resources = RESOURCES
    if a.resources:
        unknown = set(a.resources) - {n for n, _ in RESOURCES}
        if unknown:
            ap.error(f"unknown resource {', '.join(sorted(unknown))} (known: {', '.join(n for n, _ in RESOURCES)})")
        resources = [(n, f) for n, f in RESOURCES if n in a.resources]
    if not os.access(a.zinf, os.X_OK):
        ap.error(f"{a.zinf} is not an executable zinf: build it first")
    os.makedirs(a.out, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="zinf-sensitivity-") as tmp:
        rows = analyse(points, a.zinf, resources, a.factor, max(1, a.jobs), tmp)
    write_csv(rows, resources, os.path.join(a.out, "sensitivity.csv"))
    text = table(rows, resources, a.factor)
    with open(os.path.join(a.out, "sensitivity.md"), "w") as f:
        f.write(text + "\n")
    print(text)
    if any(r["step_time"] is not None for r in rows):
        plot(rows, resources, a.factor, a.out)
    print(f"\nwrote {a.out}/sensitivity.csv, sensitivity.md, sensitivity.pdf; sensitivity.png in {a.img or a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
