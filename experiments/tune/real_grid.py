#!/usr/bin/env python3
"""The tuner checked on this machine: a grid of configurations trained for real with `zinf train`,
each also simulated (`zinf sim`) on this machine's profile, and the configuration `zinf tune` picks
on that profile trained the same way.

    /usr/bin/python3 experiments/tune/real_grid.py [--hw hwprofiles/local.yaml] [--steps 12] [--warmup 3]
        [--rounds 3] [--models gpt-mini,gpt-overlap] [--grid placements|wide] [--out analysis/tune/real_grid]

For each model: 12 configurations, trained for --steps steps each. `--grid placements` (the default):
4 placements x 3 splits of a global batch of 4 sequences into micro-batch x gradient accumulation.
`--grid wide`: 12 configurations along more of the tuner's dimensions (placements, checkpoints off /
on the device / on NVMe, tiling 4, prefetch distances 1/1/1, the optimizer overlapping backward,
micro-batch 1 x 4), so that the grid's step times spread wider than a round's scatter on a small
model; a run's step time is the
median of the steps after --warmup (all ranks' work is one process here). Every configuration is
trained --rounds times, the rounds interleaved (round 1 of every configuration, then round 2, ...)
so that a change of load on the machine falls on all of them; its measured step is the median of
its rounds. Run it as `chrt -r 10 /usr/bin/python3 ...` on a machine shared with other work. Reports, per model: the pick's
measured step against the best measured one (goal: within 5 %) and Spearman's rank correlation of
predicted and measured step times over the grid (goal: >= 0.8), with two figures that say how far
the measurement itself decides it: that Spearman with each configuration's rounds resampled (10th
and 90th percentiles), and the measured ranking against itself (split-half: the rounds split into
two halves, Spearman between the halves' medians, median over random splits). Writes OUT/<model>.csv and
OUT/summary.json; prints a table.
"""
import argparse
import json
import os
import random
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLACEMENTS = {
    # name: (params and gradients, optimizer, checkpoints)
    "device": ("device", "device", "device"),
    "host": ("host", "host", "host"),
    "nvme": ("nvme", "nvme", "host"),
    "host-optim-nvme": ("host", "nvme", "host"),
}
SPLITS = [(4, 1), (2, 2), (1, 4)]  # micro-batch x gradient accumulation = 4 sequences per step
GLOBAL_BATCH = 4
# --grid wide: name -> (params and gradients, optimizer, checkpoints, micro-batch, gradient accumulation,
# extra YAML lines; a key given there replaces BASE's line of that key)
WIDE = {
    "device": ("device", "device", "device", 4, 1, ""),
    "device-ckpt-off": ("device", "device", "device", 4, 1, "activation_checkpoint: {interval: 0, tier: device}"),
    "device-mb1x4": ("device", "device", "device", 1, 4, ""),
    "host": ("host", "host", "host", 4, 1, ""),
    "host-overlap": ("host", "host", "host", 4, 1,
                     "optimizer: {type: adamw, lr: 1.0e-3, sub_group_size: 100000, timing: overlap-backward}"),
    "host-optim-nvme": ("host", "nvme", "host", 4, 1, ""),
    "nvme": ("nvme", "nvme", "host", 4, 1, ""),
    "nvme-mb1x4": ("nvme", "nvme", "host", 1, 4, ""),
    "nvme-prefetch1": ("nvme", "nvme", "host", 4, 1,
                       "prefetch: {nvme_distance: 1, h2d_distance: 1, allgather_distance: 1}"),
    "nvme-ckpt-nvme": ("nvme", "nvme", "nvme", 4, 1, ""),
    "nvme-tiled": ("nvme", "nvme", "host", 4, 1, "tiling_factor: 4"),
    "nvme-tiled-ckpt-nvme": ("nvme", "nvme", "nvme", 4, 1, "tiling_factor: 4"),
}
BASE = """zero_stage: 3
offload: {{params: {p}, optimizer: {o}}}
activation_checkpoint: {{interval: 1, tier: {c}}}
prefetch: {{nvme_distance: 3, h2d_distance: 2, allgather_distance: 1}}
optimizer: {{type: adamw, lr: 1.0e-3, sub_group_size: 100000}}
micro_batch: {mb}
gradient_accumulation: {ga}
"""
STEP_RE = re.compile(r"step (\d+)/\d+ \|[^|]*\|[^|]*\| ([0-9.]+) s \|")


def grid_configs(grid):
    """(name, YAML text) of each configuration of the grid."""
    out = []
    if grid == "placements":
        for pname, (p, o, c) in PLACEMENTS.items():
            for mb, ga in SPLITS:
                out.append((f"{pname}-mb{mb}x{ga}", BASE.format(p=p, o=o, c=c, mb=mb, ga=ga)))
        return out
    for name, (p, o, c, mb, ga, extra) in WIDE.items():
        lines = BASE.format(p=p, o=o, c=c, mb=mb, ga=ga).splitlines()
        for e in filter(None, extra.splitlines()):
            key = e.split(":")[0]
            lines = [x for x in lines if not x.startswith(key + ":")] + [e]
        out.append((name, "\n".join(lines) + "\n"))
    return out


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r.stdout


def train(zinf, model, config, hw, steps, warmup, nvme_dir):
    """Median step time of `zinf train` after the warm-up steps. A pseudo-terminal (script(1)) makes
    train print every step's line, not every tenth."""
    os.makedirs(nvme_dir, exist_ok=True)
    cmd = " ".join(shlex.quote(x) for x in [zinf, "train", "--model", model, "--config", config, "--hw", hw,
                                            "--steps", str(steps), "--nvme-dir", nvme_dir])
    out = run(["script", "-qec", cmd, "/dev/null"])
    times = {}
    for m in STEP_RE.finditer(out):
        times[int(m.group(1))] = float(m.group(2))
    kept = [t for s, t in sorted(times.items()) if s > warmup]
    if not kept:
        raise RuntimeError(f"no step times in the output of {cmd}:\n{out[-2000:]}")
    return statistics.median(kept), kept


def simulate(zinf, model, config, hw):
    j = json.loads(run([zinf, "sim", "--model", model, "--config", config, "--hw", hw, "--json"]))
    return j["step_time"]


def ranks(xs):
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    r = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return r


def spearman(a, b):
    ra, rb = ranks(a), ranks(b)
    ma, mb = statistics.mean(ra), statistics.mean(rb)
    num = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    den = (sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb)) ** 0.5
    return num / den if den else 0.0


def split_half(rounds, trials=500, seed=1):
    """How reproducible the measured ranking itself is: the rounds split at random into two halves,
    Spearman between the two halves' medians per configuration, median over `trials` splits. A
    predictor is judged against a ranking that agrees with itself only this well."""
    n = len(rounds[0])
    if n < 2:
        return float("nan")
    rnd = random.Random(seed)
    rhos = []
    for _ in range(trials):
        idx = list(range(n))
        rnd.shuffle(idx)
        a, b = idx[: n // 2], idx[n // 2:]
        rhos.append(spearman([statistics.median(r[i] for i in a) for r in rounds],
                             [statistics.median(r[i] for i in b) for r in rounds]))
    return statistics.median(rhos)


def bootstrap_spearman(predicted, rounds, trials=1000, seed=2):
    """Spearman of the predictions against the measured ranking, each configuration's rounds
    resampled with replacement: the 10th, 50th and 90th percentiles."""
    rnd = random.Random(seed)
    rhos = sorted(spearman(predicted, [statistics.median(rnd.choice(r) for _ in r) for r in rounds])
                  for _ in range(trials))
    return rhos[trials // 10], rhos[trials // 2], rhos[(9 * trials) // 10]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--zinf", default=os.path.join(ROOT, os.environ.get("ZINF_BUILD", "build"), "zinf"))
    ap.add_argument("--hw", default=os.path.join(ROOT, "hwprofiles/local.yaml"))
    ap.add_argument("--models", default="gpt-mini,gpt-overlap")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--grid", choices=["placements", "wide"], default="placements")
    ap.add_argument("--predict-only", action="store_true",
                    help="simulate the grid and the tuner's pick, train nothing, write nothing")
    ap.add_argument("--out", default=os.path.join(ROOT, "analysis/tune/real_grid"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="zinf-tune-grid-", dir="/var/tmp")
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    start = time.time()
    print(f"profile {os.path.relpath(a.hw, ROOT) if os.path.abspath(a.hw).startswith(ROOT + os.sep) else a.hw}; load {open('/proc/loadavg').read().split()[:3]}", flush=True)
    shown_hw = os.path.relpath(a.hw, ROOT) if os.path.abspath(a.hw).startswith(ROOT + os.sep) else a.hw
    summary = {"hw": shown_hw, "grid": a.grid, "steps": a.steps, "warmup": a.warmup, "rounds": a.rounds, "models": {}}
    for model in a.models.split(","):
        rows = []
        for name, text in grid_configs(a.grid):
            cfg = os.path.join(scratch, f"{model}-{name}.yaml")
            with open(cfg, "w") as f:
                f.write(f"description: tune grid {name}\n" + text)
            rows.append({"name": name, "config": cfg})
        # The tuner's pick on this machine's profile, from the device placement as the base.
        t0 = time.time()
        pick_cfg = os.path.join(scratch if a.predict_only else a.out, f"{model}-pick.yaml")
        tune = json.loads(run([a.zinf, "tune", "--model", model, "--hw", a.hw, "--config", rows[0]["config"],
                               "--global-batch", str(GLOBAL_BATCH), "--json", "--yaml", pick_cfg, "--deepspeed", ""]))
        tune_s = time.time() - t0
        pick = tune["finalists"][0]
        rows.append({"name": "tuner-pick", "config": pick_cfg, "describe": pick["describe"]})
        for r in rows:
            r["predicted"] = simulate(a.zinf, model, r["config"], a.hw)
            r["rounds"], r["steps"] = [], []
        if a.predict_only:
            for r in sorted(rows, key=lambda r: r["predicted"]):
                print(f"  {model:<12} {r['name']:<26} predicted {r['predicted']:.4f} s")
            continue
        for k in range(a.rounds):
            for r in rows:
                median, kept = train(a.zinf, model, r["config"], a.hw, a.steps, a.warmup,
                                     os.path.join(scratch, "nvme", model, r["name"]))
                r["rounds"].append(median)
                r["steps"] += kept
                print(f"  {model:<12} round {k + 1}/{a.rounds} {r['name']:<26} predicted {r['predicted']:.4f} s  "
                      f"measured {median:.4f} s", flush=True)
        for r in rows:
            r["measured"] = statistics.median(r["rounds"])
        grid = [r for r in rows if r["name"] != "tuner-pick"]
        best = min(rows, key=lambda r: r["measured"])
        pick_row = rows[-1]
        rho = spearman([r["predicted"] for r in grid], [r["measured"] for r in grid])
        gap = pick_row["measured"] / best["measured"] - 1
        reliability = split_half([r["rounds"] for r in grid])
        lo, mid, hi = bootstrap_spearman([r["predicted"] for r in grid], [r["rounds"] for r in grid])
        summary["models"][model] = {
            "pick": pick["describe"], "pick_measured": pick_row["measured"], "pick_predicted": pick_row["predicted"],
            "best": best["name"], "best_measured": best["measured"], "gap": gap, "spearman": rho,
            "measured_split_half_spearman": reliability, "spearman_bootstrap_10_50_90": [lo, mid, hi],
            "tune_seconds": tune_s,
            # the configs by file name: they lived in a scratch folder that is gone
            "rows": [dict(r, config=os.path.basename(r["config"])) for r in rows]}
        with open(os.path.join(a.out, f"{model}.csv"), "w") as f:
            f.write("name,predicted_s,measured_s,rounds_s,steps_s\n")
            for r in rows:
                f.write(f"{r['name']},{r['predicted']:.6f},{r['measured']:.6f},{' '.join(f'{x:.4f}' for x in r['rounds'])},"
                        f"{' '.join(f'{x:.4f}' for x in r['steps'])}\n")
    summary["seconds"] = time.time() - start
    if a.predict_only:
        subprocess.run(["rm", "-rf", scratch])
        return 0
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print()
    print("| model | tuner's pick | pick measured | best measured | pick vs best (goal <= 5 %) | Spearman, 12 configs (goal >= 0.8) "
          "| its bootstrap 10..90 % | measured vs itself (split-half) |")
    print("|---|---|---|---|---|---|---|---|")
    for model, s in summary["models"].items():
        lo, _, hi = s["spearman_bootstrap_10_50_90"]
        print(f"| {model} | {s['pick']} | {s['pick_measured']:.4f} s | {s['best_measured']:.4f} s ({s['best']}) | "
              f"{100 * s['gap']:+.1f} % | {s['spearman']:.2f} | {lo:.2f}..{hi:.2f} | {s['measured_split_half_spearman']:.2f} |")
    print(f"\n{summary['seconds']:.0f} s in all; load {open('/proc/loadavg').read().split()[:3]}")
    subprocess.run(["rm", "-rf", scratch])


if __name__ == "__main__":
    sys.exit(main())
