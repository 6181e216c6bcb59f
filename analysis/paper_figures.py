#!/usr/bin/python3
"""The ZeRO-Infinity paper's evaluation, regenerated from zinf's planner and simulator.

Reads what experiments/paper/run.sh wrote into <dir> (zinf sweep CSVs, zinf plan JSON, zinf sim
Timelines) and draws one figure per paper result, PNG and PDF, into <dir>. Where the paper states a
number in its text, it is overlaid as "paper"; where it gives only a trend, the trend is named in
the title and nothing is invented.

  /usr/bin/python3 analysis/paper_figures.py analysis/paper
"""
import csv
import glob
import json
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# Numbers the paper states (Rajbhandari et al., SC'21, abstract and §1/§8): 1T parameters on one
# DGX-2 node, 32T on 32 nodes (512 GPUs), over 25 PFLOP/s on 512 V100s (about 49 TFLOP/s per GPU),
# largest hidden size 64K with tiling vs 8K without; one-node capacities per strategy as in docs/results/paper-figures.md.
PAPER_SCALE = {"zero-infinity-nvme": [(1, 1e12), (32, 32e12)]}
PAPER_ONE_NODE = {"data-parallel": 1.4e9, "zero-offload": 13e9, "zero-3": 20e9, "zero-infinity-cpu": 70e9,
                  "zero-infinity-nvme": 1e12}
PAPER_TFLOPS_512 = 25e15 / 512 / 1e12
# ZeRO-Infinity Fig 5(b): the 1T model (TP 4, batch 5 per GPU) measured per GPU at 64 / 128 / 256 / 512 GPUs.
PAPER_SCALING_1T = {64: 43.9, 128: 48.7, 256: 46.3, 512: 49.0}
PAPER_HIDDEN = {"untiled": 8192, "tiled": 65536}
SIZES = {"gpt-10b": 10e9, "gpt-100b": 100e9, "gpt-500b": 500e9, "gpt-1t": 1e12, "gpt-10t": 10e12,
         "gpt-20t": 20e12, "gpt-32t": 32e12}
HIDDEN = {"gpt-10b": 4096, "gpt-100b": 8192, "gpt-500b": 18432, "gpt-1t": 25600}


def read_sweep(d, name):
    path = os.path.join(d, f"{name}.csv")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [r for r in csv.DictReader(f)]


def config_name(r):
    return os.path.splitext(os.path.basename(r["config"]))[0]


# Where save writes PNGs when not beside the PDFs: the results page's images (--img).
IMAGES = {"dir": None}


def save(fig, d, name):
    fig.tight_layout()
    for ext in ("png", "pdf"):
        folder = IMAGES["dir"] if ext == "png" and IMAGES["dir"] else d
        os.makedirs(folder, exist_ok=True)
        fig.savefig(os.path.join(folder, f"{name}.{ext}"), dpi=150)
    plt.close(fig)
    print(f"  {name}.png/.pdf")


def fig_model_scale(d):
    runs = []
    for path in glob.glob(os.path.join(d, "model-scale-*.json")):
        with open(path) as f:
            j = json.load(f)
        runs.append((j["nodes"], {s["strategy"]: s["largest_params"] for s in j["strategies"]}))
    if not runs:
        return
    runs.sort()
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for strat in runs[0][1]:
        xs = [n for n, s in runs if s[strat] > 0]
        ys = [s[strat] for n, s in runs if s[strat] > 0]
        line, = ax.plot(xs, ys, "o-", label=f"zinf: {strat}")
        pts = PAPER_SCALE.get(strat, []) + ([(1, PAPER_ONE_NODE[strat])] if strat in PAPER_ONE_NODE else [])
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker="*", s=120, color=line.get_color(),
                       edgecolor="k", zorder=5)
    ax.scatter([], [], marker="*", s=120, color="w", edgecolor="k", label="paper (text)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("DGX-2 nodes (16 V100 each)")
    ax.set_ylabel("largest trainable model (parameters)")
    ax.set_title("Model scale per number of nodes (paper Fig. 1, §8.1)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    save(fig, d, "fig_model_scale")


def fig_throughput(d):
    rows = [r for r in read_sweep(d, "throughput-512") + read_sweep(d, "throughput-512-large") if r["status"] == "ok"]
    if not rows:
        return
    rows.sort(key=lambda r: SIZES.get(r["model"], 0))
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [SIZES[r["model"]] / 1e12 for r in rows]
    ax.plot(xs, [float(r["tflops_per_gpu"]) for r in rows], "o-", label="zinf sim, 512 GPUs")
    ax.axhline(PAPER_TFLOPS_512, color="k", ls="--", lw=1, label="paper: >25 PFLOP/s on 512 GPUs (49 TFLOP/s per GPU)")
    ax.set_xscale("log")
    ax.set_xlabel("model size (trillions of parameters)")
    ax.set_ylabel("TFLOP/s per GPU")
    ax.set_ylim(bottom=0)
    ax.set_title("Throughput vs model size on 512 V100 GPUs (paper Fig. 5a)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    save(fig, d, "fig_throughput_512")


def fig_scaling(d):
    rows = [r for r in read_sweep(d, "scaling-1t") if r["status"] == "ok"]
    if not rows:
        return
    rows.sort(key=lambda r: int(r["gpus"]))
    g = [int(r["gpus"]) for r in rows]
    total = [float(r["tflops_per_gpu"]) * int(r["gpus"]) / 1000 for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(g, total, "o-", label=f"zinf sim, 1T model: {100 * (total[-1] / g[-1] / (total[0] / g[0]) - 1):+.0f} % per GPU")
    pg = sorted(PAPER_SCALING_1T)
    paper = [PAPER_SCALING_1T[x] * x / 1000 for x in pg]
    ax.plot(pg, paper, "ks-", label=f"paper Fig. 5b, measured: {100 * (PAPER_SCALING_1T[pg[-1]] / PAPER_SCALING_1T[pg[0]] - 1):+.0f} % per GPU")
    ax.plot(g, [total[0] * x / g[0] for x in g], "k--", lw=1, label=f"linear from zinf's {g[0]} GPUs")
    ax.set_xscale("log", base=2)
    ax.set_xticks(g)
    ax.set_xticklabels([str(x) for x in g])
    ax.set_xlabel("GPUs")
    ax.set_ylabel("aggregate PFLOP/s")
    ax.set_title("Scaling a 1T model, 64 to 512 GPUs (paper Fig. 5b)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    save(fig, d, "fig_scaling_1t")


def bars(ax, groups, series, values, ylabel):
    w = 0.8 / len(series)
    for i, s in enumerate(series):
        ax.bar([x + i * w for x in range(len(groups))], [values.get((gname, s), 0) for gname in groups], w, label=s)
    ax.set_xticks([x + w * (len(series) - 1) / 2 for x in range(len(groups))])
    ax.set_xticklabels(groups)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)


def fig_partitioning(d):
    rows = [r for r in read_sweep(d, "partitioning") if r["status"] == "ok"]
    if not rows:
        return
    vals = {(f"{r['gpus']} GPUs", config_name(r).replace("cpu-", "")): float(r["tflops_per_gpu"]) for r in rows}
    groups = sorted({k[0] for k in vals}, key=lambda s: int(s.split()[0]))
    fig, ax = plt.subplots(figsize=(6, 4))
    bars(ax, groups, ["bandwidth-centric", "owner-based"], vals, "TFLOP/s per GPU")
    ax.set_title("Bandwidth-centric vs owner-based partitioning, 10B, CPU offload (paper Fig. 6a)", fontsize=9)
    save(fig, d, "fig_partitioning")


def fig_prefetch(d):
    rows = [r for r in read_sweep(d, "prefetch") if r["status"] == "ok"]
    if not rows:
        return
    vals = {}
    for r in rows:
        m = re.match(r"prefetch-(on|off)-mb(\d+)", config_name(r))
        vals[(f"micro-batch {m.group(2)}", f"prefetch + overlap {m.group(1)}")] = float(r["tflops_per_gpu"])
    groups = sorted({k[0] for k in vals}, key=lambda s: int(s.split()[-1]))
    fig, ax = plt.subplots(figsize=(6, 4))
    bars(ax, groups, ["prefetch + overlap on", "prefetch + overlap off"], vals, "TFLOP/s per GPU")
    ax.set_title("Prefetch and overlap on vs off, 10B on 64 GPUs (paper Fig. 6d)", fontsize=9)
    save(fig, d, "fig_prefetch")


def fig_checkpoint_offload(d):
    rows = [r for r in read_sweep(d, "checkpoint-offload") if r["status"] == "ok"]
    if not rows:
        return
    vals = {}
    for r in rows:
        vals[(f"{HIDDEN[r['model']] // 1024}K", config_name(r).replace("ckpt-", "checkpoints on "))] = float(r["tflops_per_gpu"])
    groups = sorted({k[0] for k in vals}, key=lambda s: int(s[:-1]))
    fig, ax = plt.subplots(figsize=(6, 4))
    bars(ax, groups, ["checkpoints on device", "checkpoints on host"], vals, "TFLOP/s per GPU")
    ax.set_xlabel("hidden size")
    ax.set_title("Activation checkpoint offload to host, 64 GPUs (paper Fig. 6e)", fontsize=9)
    save(fig, d, "fig_checkpoint_offload")


def fig_tiling(d):
    path = os.path.join(d, "tiling.json")
    if not os.path.exists(path):
        return
    with open(path) as f:
        j = json.load(f)
    fig, ax = plt.subplots(figsize=(5, 4))
    labels = ["without tiling", f"with tiling (factor {j['factor']})"]
    ax.bar([0, 1], [j["untiled"] / 1024, j["tiled"] / 1024], 0.5, label="zinf plan")
    ax.scatter([0, 1], [PAPER_HIDDEN["untiled"] / 1024, PAPER_HIDDEN["tiled"] / 1024], marker="*", s=150, color="k",
               zorder=5, label="paper")
    ax.set_xticks([0, 1])
    ax.set_xticklabels(labels)
    ax.set_ylabel("largest hidden size (K)")
    ax.set_title("Largest hidden size on one 32 GB V100 (paper Fig. 6c)", fontsize=9)
    ax.legend(fontsize=8)
    save(fig, d, "fig_tiling")


def backward_span(path):
    s, e = None, None
    with open(path) as f:
        for r in csv.DictReader(f):
            if r["kind"] == "backward" and r["rank"] == "0":
                s = float(r["start"]) if s is None else min(s, float(r["start"]))
                e = float(r["end"]) if e is None else max(e, float(r["end"]))
    return (e - s) if s is not None else None


def fig_backward(d):
    spans = {}
    for name, label in (("zero-offload", "ZeRO-Offload"), ("infinity-cpu", "ZeRO-Infinity")):
        for path in glob.glob(os.path.join(d, f"backward-{name}-*nodes.csv")):
            n = int(re.search(r"-(\d+)nodes", path).group(1))
            spans[(f"{16 * n} GPUs", label)] = backward_span(path)
    if not spans:
        return
    groups = sorted({k[0] for k in spans}, key=lambda s: int(s.split()[0]))
    fig, ax = plt.subplots(figsize=(6, 4))
    bars(ax, groups, ["ZeRO-Offload", "ZeRO-Infinity"], spans, "backward time per step (s), rank 0")
    ax.set_title("Backward time: ZeRO-Infinity vs ZeRO-Offload, 10B, gradients to host (paper Fig. 6b)", fontsize=8)
    save(fig, d, "fig_backward")


def main():
    args = sys.argv[1:]
    if "--img" in args:
        i = args.index("--img")
        IMAGES["dir"] = args[i + 1]
        del args[i:i + 2]
    d = args[0] if args else "analysis/paper"
    print(f"figures in {d}:")
    for f in (fig_model_scale, fig_throughput, fig_scaling, fig_partitioning, fig_prefetch, fig_checkpoint_offload,
              fig_tiling, fig_backward):
        f(d)


if __name__ == "__main__":
    main()
