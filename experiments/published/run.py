#!/usr/bin/python3
"""Simulates every published point of points.yaml with `zinf sim` and compares it with what was measured.

    /usr/bin/python3 experiments/published/run.py [--zinf build/zinf] [--out analysis/published] [--only ID ...]
                                                  [--seeds K] [--fabric-range]

Writes OUT/published.csv (one row per point), OUT/published.md (the table docs/results/published.md shows),
OUT/scatter.{png,pdf} (predicted against measured, calibration and prediction points apart),
OUT/panels.{png,pdf} (one panel per published figure) and OUT/fig5b.{png,pdf} (the 1T scaling series
against the published measurements). A point whose configuration zinf refuses (the memory model says it
does not fit) is a row with the reason, drawn as refused, never dropped.

Each point is simulated over seeds 1..K of GPU-to-GPU variability (the profile's node.gpu.variability,
`zinf sim --seeds K`): the value is the median seed's TFLOP/s, the band p10-p90. --fabric-range also
simulates every multi-node point on points.yaml's plausible_fabric (a fat tree with static routing,
every rank simulated, seed 1) beside the profile's non-blocking fabric.
"""
import argparse
import csv
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def params_of(model):
    """12 x layers x hidden^2, the papers' count."""
    return 12 * model["layers"] * model["hidden"] ** 2


def flops_per_sample(point):
    """FLOPs one sample costs as the point's source counts them."""
    m = point["model"]
    seq, layers, hidden, vocab = point["seq"], m["layers"], m["hidden"], m.get("vocab", point["vocab"])
    if point["flops"] == "zero-infinity":
        return 8 * seq * params_of(m)
    if point["flops"] == "megatron":
        return 96 * seq * layers * hidden ** 2 * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))
    if point["flops"] == "mosaicml":  # llm-foundry's MFU: 3 x 2 x params x seq + 3 x layers x 2 x 2 x hidden x seq^2
        if "num_params" not in point:
            raise ValueError(f"point {point['id']}: flops mosaicml needs 'num_params' (the row's NumParams)")
        return 6 * point["num_params"] * seq + 12 * layers * hidden * seq ** 2
    raise ValueError(f"point {point['id']}: flops must be zero-infinity, megatron or mosaicml, not {point['flops']!r}")


def expand(spec):
    """The points with the file's defaults filled in, each checked for the fields it needs."""
    defaults = spec.get("defaults", {})
    points = []
    for raw in spec["points"]:
        p = dict(defaults)
        p.update(raw)
        p.setdefault("vocab", defaults.get("vocab", 50257))
        for key in ("id", "kind", "figure", "source", "model", "batch", "config", "measured_tflops"):
            if key not in p:
                raise ValueError(f"point {raw.get('id', '?')}: missing '{key}'")
        if p["kind"] not in ("calibration", "prediction"):
            raise ValueError(f"point {p['id']}: kind must be calibration or prediction")
        if "deepspeed" in p:
            for key in ("release", "config"):
                if key not in p["deepspeed"]:
                    raise ValueError(f"point {p['id']}: deepspeed needs '{key}' (the release and the config, with its commit)")
        points.append(p)
    return points


def predicted_tflops(point, samples_per_s, gpus):
    return flops_per_sample(point) * samples_per_s / gpus / 1e12


def write_inputs(point, folder):
    """The point's model, run config and (when it overrides one) hwprofile as files zinf reads."""
    m = point["model"]
    tp = point["tensor_parallel"]
    # A tensor-parallel group trains one micro-batch: batch per GPU x its ranks. A point that names its
    # micro-batch accumulates batch / micro_batch of them per step (its config's gradient_accumulation).
    micro_batch = point.get("micro_batch", point["batch"]) * tp
    if "micro_batch" in point:
        accumulation = point["config"].get("gradient_accumulation", 1)
        if point["micro_batch"] * accumulation != point["batch"]:
            raise ValueError(f"point {point['id']}: micro_batch {point['micro_batch']} x config.gradient_accumulation "
                             f"{accumulation} is not batch {point['batch']}")
    if abs(micro_batch - round(micro_batch)) > 1e-9:
        raise ValueError(f"point {point['id']}: batch {point['batch']} x tensor_parallel {tp} is not a whole micro-batch")
    vocab = m.get("vocab", point["vocab"])
    if tp > 1:  # Megatron pads the vocabulary to a multiple of 128 x the tensor-parallel degree
        vocab = -(-vocab // (128 * tp)) * (128 * tp)
    model = {"name": point["id"], "layers": m["layers"], "hidden": m["hidden"], "heads": m["heads"],
             "seq": point["seq"], "vocab": vocab, "micro_batch": int(round(micro_batch))}
    if "attention" in m:  # the attention kernel (eager, or flash: FlashAttention keeps no probabilities)
        model["attention"] = m["attention"]
    paths = {"model": os.path.join(folder, "model.yaml"), "config": os.path.join(folder, "config.yaml")}
    with open(paths["model"], "w") as f:
        yaml.safe_dump(model, f)
    config = dict(point["config"])
    config.setdefault("description", f"published point {point['id']}")
    # The DeepSpeed release the run used: its engine's behaviours (zinf's deepspeed_release key).
    if "deepspeed" in point:
        config.setdefault("deepspeed_release", str(point["deepspeed"]["release"]))
    if tp > 1:
        config["tensor_parallel"] = tp
    # Every published run is DeepSpeed's or Megatron's, neither of which tiles the embedding or the
    # LM head: their vocabulary-wide operators ran whole.
    config.setdefault("vocabulary_tiles", 1)
    with open(paths["config"], "w") as f:
        yaml.safe_dump(config, f)
    hw = point["hw"]
    if any(k in point for k in PROFILE_OVERRIDES):
        with open(os.path.join(ROOT, "hwprofiles", f"{hw}.yaml")) as f:
            profile = with_overrides(yaml.safe_load(f), point)
        hw = os.path.join(folder, "hw.yaml")
        with open(hw, "w") as f:
            yaml.safe_dump(profile, f)
    paths["hw"] = hw
    return paths


# Point fields that change the profile it is simulated on.
PROFILE_OVERRIDES = ("gpus_per_node", "gpu_memory", "fabric")


def with_overrides(profile, point):
    """The profile as the point ran on it: gpus_per_node GPUs of a node, each with gpu_memory."""
    p = dict(profile, node=dict(profile["node"], gpu=dict(profile["node"]["gpu"])))
    if "gpus_per_node" in point:
        p["node"]["gpus"] = point["gpus_per_node"]
        p["name"] = f"{p['name']}-{point['gpus_per_node']}gpu"
    if "gpu_memory" in point:
        p["node"]["gpu"]["memory"] = point["gpu_memory"]
        p["name"] = f"{p['name']}-{point['gpu_memory'].replace(' ', '')}"
    if "fabric" in point:
        p["fabric"] = point["fabric"]
        p["name"] = f"{p['name']}-{point['fabric'].get('topology', 'fabric')}"
    return p


def ranged_inputs(point):
    """The point's ranged inputs as (profile key path, low, high, source), each checked for its bounds and
    source: the inputs no source gives, each bound from a source, before any comparison."""
    out = []
    for name, r in (point.get("ranged") or {}).items():
        if not isinstance(r, dict):
            raise ValueError(f"point {point['id']}: ranged.{name} must be a mapping of low, high and source")
        for key in ("low", "high", "source"):
            if key not in r:
                raise ValueError(f"point {point['id']}: ranged.{name} needs '{key}' (bounds come from a source)")
        out.append((name, r["low"], r["high"], r["source"]))
    return out


def shown_command(cmd, folder):
    """The command as the CSV shows it: the binary as `zinf` and the point's generated inputs by file
    name (`model.yaml`, `config.yaml`), so that no machine's paths are written."""
    shown = ["zinf"] + [os.path.relpath(c, folder) if c.startswith(folder + os.sep) else c for c in cmd[1:]]
    return " ".join(shown)


def sim_command(zinf, paths, point, seeds=0, seed=0, jobs=1):
    cmd = [zinf, "sim", "--model", paths["model"], "--hw", paths["hw"], "--nodes", str(point["nodes"]),
           "--config", paths["config"], "--json"]
    if seeds > 0:
        cmd += ["--seeds", str(seeds), "--jobs", str(jobs)]
    elif seed > 0:
        cmd += ["--seed", str(seed)]
    return cmd


def read_report(run):
    """zinf sim --json's report, or None when it printed none."""
    text = run.stdout.strip()
    if text.startswith("{"):
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return None
    return None


def simulate(point, zinf, folder, seeds=0, jobs=1):
    paths = write_inputs(point, folder)
    cmd = sim_command(zinf, paths, point, seeds, jobs=jobs)
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    row = {"id": point["id"], "kind": point["kind"], "figure": point["figure"], "measured_tflops": point["measured_tflops"],
           "tensor_parallel": point["tensor_parallel"], "flops": point["flops"], "source": point["source"],
           "assumed": point.get("assumed", ""), "command": shown_command(cmd, folder), "in_range": False,
           "measured_range": "-".join(str(v) for v in point["measured_range"]) if "measured_range" in point else ""}
    report = read_report(run)
    if run.returncode != 0 or report is None:
        reason = (run.stderr.strip() or run.stdout.strip() or f"exit {run.returncode}").splitlines()
        refused = any("plan refused" in line or "does not fit" in line for line in reason)
        row.update(status="refused" if refused else "failed",
                   reason=" ".join(reason)[:400], predicted_tflops="", error="", step_time="")
        return row
    if not report.get("within_budget", True):
        row.update(status="refused", reason="the memory model says it does not fit", predicted_tflops="", error="",
                   step_time=report["step_time"])
        return row
    gpus = report["ranks"]
    pred = predicted_tflops(point, report["samples_per_s"], gpus)
    band = report.get("band")
    if band:  # TFLOP/s is inverse to the step: the median step's value, the slow seeds' p90 step as p10
        per_step = pred * report["step_time"]
        pred = per_step / band["step_time"]["median"]
        row.update(band_p10=round(per_step / band["step_time"]["p90"], 2),
                   band_p90=round(per_step / band["step_time"]["p10"], 2), seeds=band["seeds"])
    row.update(status="ok", reason="", predicted_tflops=round(pred, 2), step_time=report["step_time"], gpus=gpus,
               error=round(pred / point["measured_tflops"] - 1.0, 4), slowest_gpu=report.get("slowest_gpu", 1.0))
    if "measured_range" in point:
        lo, hi = point["measured_range"]
        row["in_range"] = lo <= pred <= hi
    if point["tensor_parallel"] > 1:
        row["assumed"] = (row["assumed"] + "; " if row["assumed"] else "") + \
            (f"tensor parallel {point['tensor_parallel']} (Megatron-style, inside a node), ZeRO-3 over the rest; "
             "vocabulary padded to a multiple of 128 x the degree; checkpoints partitioned over the group")
    return row


def simulate_on_tree(point, zinf, folder, fabric):
    """TFLOP/s per GPU of a multi-node point on `fabric` (every rank simulated, seed 1), or None."""
    p = dict(point, fabric=fabric)
    paths = write_inputs(p, folder)
    run = subprocess.run(sim_command(zinf, paths, point, seed=1), capture_output=True, text=True, cwd=ROOT)
    report = read_report(run)
    if run.returncode != 0 or report is None or not report.get("within_budget", True):
        return None
    return round(predicted_tflops(point, report["samples_per_s"], report["ranks"]), 2)


def simulate_range(point, zinf, folder):
    """TFLOP/s per GPU over every combination of the bounds of the point's ranged inputs (`zinf sim --range`,
    expected slowest GPU), as (low, high); None when the point has none or the run does not simulate."""
    ranged = ranged_inputs(point)
    if not ranged:
        return None
    sub = os.path.join(folder, "range")
    os.makedirs(sub, exist_ok=True)
    paths = write_inputs(point, sub)
    cmd = sim_command(zinf, paths, point)
    for name, low, high, _ in ranged:
        cmd += ["--range", f"{name}={low}:{high}"]
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    report = read_report(run)
    if run.returncode != 0 or report is None or "range" not in report:
        raise ValueError(f"point {point['id']}: zinf sim --range failed: {(run.stderr or run.stdout).strip()[:300]}")
    samples_per_step = report["samples_per_s"] * report["step_time"]
    steps = [b["step_time"] for b in report["range"]["per_bound"]]
    values = [predicted_tflops(point, samples_per_step / t, report["ranks"]) for t in steps]
    return round(min(values), 2), round(max(values), 2)


def mechanisms(row):
    """What moves the point, as the simulation saw it: the slowest GPU a collective waits for, the fabric."""
    out = []
    if row.get("slowest_gpu") and abs(row["slowest_gpu"] - 1) > 1e-6:
        out.append(f"slowest GPU x{row['slowest_gpu']:.3f}")
    if row.get("tree_tflops"):
        out.append(f"tree {row['tree_tflops']:.1f}")
    return "; ".join(out)


def summary(rows, kind):
    errs = [abs(r["error"]) for r in rows if r["kind"] == kind and r["status"] == "ok"]
    refused = sum(1 for r in rows if r["kind"] == kind and r["status"] != "ok")
    if not errs:
        return {"points": 0, "refused": refused, "median": None, "largest": None}
    return {"points": len(errs), "refused": refused, "median": statistics.median(errs), "largest": max(errs)}


def table(rows):
    lines = ["| point | kind | measured | zinf | band p10-p90 | error | note |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["status"] == "ok":
            pred, err = f"{r['predicted_tflops']:.1f}", f"{100 * r['error']:+.0f} %"
            band = f"{r['band_p10']:.1f}-{r['band_p90']:.1f}" if r.get("band_p10") else ""
        else:
            pred, err, band = r["status"], "", ""
        notes = ["TP " + str(r["tensor_parallel"])] if r["tensor_parallel"] > 1 else []
        if r.get("measured_range"):
            notes.append(f"published range {r['measured_range']}: {'inside' if r['in_range'] else 'OUTSIDE'}")
        if r.get("band_p10") and r["kind"] == "prediction":
            ends = [r["band_p10"], r["band_p90"]] + ([r["tree_tflops"]] if r.get("tree_tflops") else [])
            covered = min(ends) <= r["measured_tflops"] <= max(ends)
            notes.append("band covers the measurement" if covered else "band misses the measurement")
        if r.get("range_lo"):
            inside = r["range_lo"] <= r["measured_tflops"] <= r["range_hi"]
            notes.append(f"input range {r['range_lo']:.1f}-{r['range_hi']:.1f}: {'covers' if inside else 'misses'} the measurement")
        if mechanisms(r):
            notes.append(mechanisms(r))
        note = "; ".join(notes)
        lines.append(f"| {r['id']} | {r['kind']} | {r['measured_tflops']} | {pred} | {band} | {err} | {note} |")
    for kind in ("calibration", "prediction"):
        s = summary(rows, kind)
        ranged = [r for r in rows if r["kind"] == kind and r.get("measured_range")]
        inside = f"; {sum(r['in_range'] for r in ranged)} of {len(ranged)} inside their published range" if ranged else ""
        ranged_rows = [r for r in rows if r["kind"] == kind and r.get("range_lo")]
        if ranged_rows:
            covered = sum(r["range_lo"] <= r["measured_tflops"] <= r["range_hi"] for r in ranged_rows)
            half = statistics.median((r["range_hi"] - r["range_lo"]) / (r["range_hi"] + r["range_lo"]) for r in ranged_rows)
            inside += (f"; {covered} of {len(ranged_rows)} measurements inside their input range "
                       f"(median half-width {100 * half:.1f} %)")
        if s["points"]:
            lines.append(f"\n{kind}: {s['points']} points simulated, {s['refused']} refused or failed; "
                         f"median |error| {100 * s['median']:.0f} %, largest {100 * s['largest']:.0f} %{inside}")
        else:
            lines.append(f"\n{kind}: no point simulated, {s['refused']} refused or failed")
    return "\n".join(lines)


def plot(rows, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 6))
    top = max([r["measured_tflops"] for r in rows] + [r["predicted_tflops"] or 0 for r in rows if r["status"] == "ok"]) * 1.15
    ax.plot([0, top], [0, top], color="gray", lw=1, label="predicted = measured")
    ax.fill_between([0, top], [0, top * 0.75], [0, top * 1.25], color="gray", alpha=0.12, label="within 25 %")
    for kind, marker, color in (("calibration", "s", "tab:blue"), ("prediction", "o", "tab:red")):
        ok = [r for r in rows if r["kind"] == kind and r["status"] == "ok"]
        ax.scatter([r["measured_tflops"] for r in ok], [r["predicted_tflops"] for r in ok], marker=marker, color=color,
                   label=f"{kind} ({len(ok)})", zorder=3)
        for r in ok:
            ax.annotate(r["id"], (r["measured_tflops"], r["predicted_tflops"]), fontsize=6, xytext=(3, 3),
                        textcoords="offset points")
        refused = [r for r in rows if r["kind"] == kind and r["status"] != "ok"]
        if refused:
            ax.scatter([r["measured_tflops"] for r in refused], [top * 0.03] * len(refused), marker="x", color=color,
                       label=f"{kind} refused ({len(refused)})", zorder=3)
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_xlabel("measured TFLOP/s per GPU (published)")
    ax.set_ylabel("zinf sim TFLOP/s per GPU")
    ax.set_title("Published ZeRO runs: predicted vs measured")
    ax.legend(fontsize=7, loc="upper left")
    save_figure(fig, out, "scatter")

    figures = []
    for r in rows:
        if r["figure"] not in figures:
            figures.append(r["figure"])
    cols = min(3, len(figures))
    nrows = math.ceil(len(figures) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.2 * nrows), squeeze=False)
    for ax, name in zip(axes.flat, figures):
        sel = [r for r in rows if r["figure"] == name]
        xs = range(len(sel))
        ax.bar([x - 0.2 for x in xs], [r["measured_tflops"] for r in sel], width=0.4, label="measured", color="tab:gray")
        ax.bar([x + 0.2 for x in xs], [r["predicted_tflops"] if r["status"] == "ok" else 0 for r in sel], width=0.4,
               label="zinf", color="tab:red" if sel[0]["kind"] == "prediction" else "tab:blue")
        for x, r in zip(xs, sel):
            if r.get("measured_range"):  # the published spread, drawn on the measured bar
                lo, hi = (float(v) for v in r["measured_range"].split("-"))
                m = r["measured_tflops"]
                ax.errorbar(x - 0.2, m, yerr=[[m - lo], [hi - m]], fmt="none", color="black", capsize=3)
            if r["status"] != "ok":
                ax.text(x + 0.2, 1, r["status"], rotation=90, fontsize=7, ha="center", va="bottom")
        ax.set_xticks(list(xs))
        ax.set_xticklabels([r["id"].split("-", 1)[-1] for r in sel], fontsize=7, rotation=30)
        ax.set_title(name, fontsize=9)
        ax.set_ylabel("TFLOP/s per GPU", fontsize=8)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(figures):]:
        ax.axis("off")
    save_figure(fig, out, "panels")


def scaling_figure(rows, out):
    """Fig 5(b): per-GPU TFLOP/s of the 1T series against GPUs, published and simulated (median, p10-p90,
    the plausible tree where simulated), and each side's slope from the fewest GPUs to the most."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sel = sorted([r for r in rows if r.get("series") == "fig5b-1t" and r["status"] == "ok"], key=lambda r: r["gpus"])
    if len(sel) < 2:
        return None
    g = [r["gpus"] for r in sel]
    fig, ax = plt.subplots(figsize=(6, 4))
    measured = [r["measured_tflops"] for r in sel]
    pred = [r["predicted_tflops"] for r in sel]
    ax.plot(g, measured, "ks-", label=f"published (ZeRO-Infinity Fig 5b): {100 * (measured[-1] / measured[0] - 1):+.0f} %")
    lo = [p - r.get("band_p10", p) for p, r in zip(pred, sel)]
    hi = [r.get("band_p90", p) - p for p, r in zip(pred, sel)]
    ax.errorbar(g, pred, yerr=[lo, hi], fmt="o-", color="tab:red", capsize=3,
                label=f"zinf, non-blocking fabric (median, p10-p90 over seeds): {100 * (pred[-1] / pred[0] - 1):+.0f} %")
    tree = [r.get("tree_tflops") or None for r in sel]
    if all(tree):
        ax.plot(g, tree, "v--", color="tab:orange",
                label=f"zinf, plausible fat tree (seed 1): {100 * (tree[-1] / tree[0] - 1):+.0f} %")
    ax.set_xscale("log", base=2)
    ax.set_xticks(g)
    ax.set_xticklabels([str(x) for x in g])
    ax.set_xlabel("GPUs")
    ax.set_ylabel("TFLOP/s per GPU")
    ax.set_ylim(bottom=0)
    ax.set_title("1T model, 64 to 512 V100 GPUs (ZeRO-Infinity Fig 5b)", fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3)
    save_figure(fig, out, "fig5b")
    return {"measured": measured[-1] / measured[0] - 1, "zinf": pred[-1] / pred[0] - 1}


# Where save_figure writes PNGs when not beside the PDFs: the results pages' images (--img).
IMAGES = {"dir": None}


def save_figure(fig, out, stem):
    """OUT/STEM.pdf and STEM.png (in --img's folder when given, else OUT), then the figure closed."""
    import matplotlib.pyplot as plt
    fig.tight_layout()
    fig.savefig(os.path.join(out, f"{stem}.pdf"), dpi=150)
    png = IMAGES["dir"] or out
    os.makedirs(png, exist_ok=True)
    fig.savefig(os.path.join(png, f"{stem}.png"), dpi=150)
    plt.close(fig)


def suite_arguments(ap):
    """The options every script of the suite takes: the points file, zinf, the output folder, --only."""
    ap.add_argument("--points", default=os.path.join(ROOT, "experiments", "published", "points.yaml"))
    ap.add_argument("--zinf", default=os.path.join(ROOT, "build", "zinf"))
    ap.add_argument("--out", default=os.path.join(ROOT, "analysis", "published"))
    ap.add_argument("--only", nargs="*", help="point ids to run (default: all)")
    ap.add_argument("--img", help="folder for the PNG plots (default: --out); docs/results/img/published for the results page")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    suite_arguments(ap)
    ap.add_argument("--seeds", type=int, default=5, help="seeds of GPU variability per point (0: the expected slowest)")
    ap.add_argument("--jobs", type=int, default=2, help="seeds simulated at once")
    ap.add_argument("--fabric-range", action="store_true",
                    help="also simulate multi-node points on points.yaml's plausible_fabric (every rank: slow)")
    a = ap.parse_args(argv)
    IMAGES["dir"] = a.img
    with open(a.points) as f:
        spec = yaml.safe_load(f)
    points = expand(spec)
    if a.only:
        points = [p for p in points if p["id"] in a.only]
    os.makedirs(a.out, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="zinf-published-") as tmp:
        for i, p in enumerate(points, 1):
            folder = os.path.join(tmp, p["id"])
            os.makedirs(folder)
            print(f"[{i}/{len(points)}] {p['id']} ...", end=" ", flush=True)
            r = simulate(p, a.zinf, folder, a.seeds, a.jobs)
            r["series"] = p.get("series", "")
            if r["status"] == "ok" and ranged_inputs(p):
                bounds = simulate_range(p, a.zinf, folder)
                if bounds:
                    r["range_lo"], r["range_hi"] = bounds
            if a.fabric_range and p["nodes"] > 1 and r["status"] == "ok":
                r["tree_tflops"] = simulate_on_tree(p, a.zinf, folder, spec["plausible_fabric"])
            print(f"{r['predicted_tflops']} TFLOP/s (measured {r['measured_tflops']}){' ' + mechanisms(r) if mechanisms(r) else ''}"
                  if r["status"] == "ok" else f"{r['status']}: {r['reason'][:160]}", flush=True)
            rows.append(r)
    fields = ["id", "kind", "figure", "status", "measured_tflops", "measured_range", "predicted_tflops", "band_p10",
              "band_p90", "seeds", "slowest_gpu", "tree_tflops", "range_lo", "range_hi", "error", "step_time", "tensor_parallel", "flops", "reason",
              "assumed", "source", "command"]
    with open(os.path.join(a.out, "published.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in fields})
    text = table(rows)
    with open(os.path.join(a.out, "published.md"), "w") as f:
        f.write(text + "\n")
    print()
    print(text)
    if rows:
        plot(rows, a.out)
        slopes = scaling_figure(rows, a.out)
        if slopes:
            line = (f"\nFig 5(b) slope, 64 to 512 GPUs (TFLOP/s per GPU): published {100 * slopes['measured']:+.1f} %, "
                    f"zinf {100 * slopes['zinf']:+.1f} %")
            print(line)
            with open(os.path.join(a.out, "published.md"), "a") as f:
                f.write(line.lstrip("\n") + "\n")
    print(f"\nwrote {a.out}/published.csv, published.md, scatter.pdf, panels.pdf, fig5b.pdf; "
          f"scatter.png, panels.png, fig5b.png in {a.img or a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
