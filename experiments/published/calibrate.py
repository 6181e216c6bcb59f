#!/usr/bin/python3
"""Fits a GPU hwprofile's framework efficiency to the calibration points of points.yaml, and nothing else.

    /usr/bin/python3 experiments/published/calibrate.py [--hw dgx2-v100] [--zinf build/zinf] [--check]

What is fitted. The kernel curves of a profile (GEMM efficiency by shape, HBM bandwidth) describe kernels
alone, as a kernel benchmark measures them. In a training step a framework adds its own cost around them:
unfused elementwise chains (scale, mask, softmax, dropout, bias) that each read and write the activations
again, layout copies, the work of issuing kernels. Two factors carry that cost, written into the profile's
`node.gpu.in_step_slowdown` (the simulator multiplies a kernel's time by the factor of its kind):

  gemm   every linear and the LM head (keys linear_*, lm_head_*)
  other  every other kernel of the step: attention core, layernorm, GELU, residual, embedding, loss

The optimizer's key is left alone. The two factors are the least-squares fit, in relative step-time error,
held at 1 or above (a slowdown, never a speedup: below 1 the kernel curve itself would be wrong), to the
profile's calibration points (kind: calibration, the profile's `hw`): resident training, where the
device alone bounds the step. Every point with offload stays a prediction. The fit is linear in the two
factors up to the overlap of compute with communication, so it is solved by a few rounds of: simulate with
the current factors, read each point's GEMM and non-GEMM compute time from the Timeline, solve.

Prints the fit and each point's error (and, for a point published as a range, whether the fit lands
inside it). --check: exit 1 unless the profile already holds the fitted factors (within 1 %) and every
ranged point lands inside its range; the published suite's test runs it so that a profile and its calibration agree.
"""
import argparse
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
OP_KINDS_GEMM = ("linear", "lm_head")
OP_KINDS_OTHER = ("attention", "layernorm", "gelu", "residual", "embedding", "loss")
GEMM_OPS = re.compile(r"(^|\.)(c_attn|c_proj|c_fc)$|^lm_head$")


def keys(kinds):
    return [k + d for k in kinds for d in ("_forward", "_backward")]


def with_factors(profile, gemm, other):
    p = copy.deepcopy(profile)
    s = p["node"]["gpu"].setdefault("in_step_slowdown", {})
    for k in keys(OP_KINDS_GEMM):
        s[k] = gemm
    for k in keys(OP_KINDS_OTHER):
        s[k] = other
    return p


def target_step(point):
    """The step time the point's measured TFLOP/s per GPU means, by the point's own FLOP count."""
    return published.flops_per_sample(point) * point["batch"] / (point["measured_tflops"] * 1e12)


def compute_split(timeline):
    """Seconds of rank 0's compute lane in GEMM kernels and in the other kernels (optimizer apart)."""
    gemm = other = 0.0
    with open(timeline) as f:
        for r in csv.DictReader(f):
            if r["rank"] != "0" or r["lane"] != "compute" or r["kind"] == "optimizer_step":
                continue
            op = r["label"].split(" ")[1]
            d = float(r["end"]) - float(r["start"])
            if GEMM_OPS.search(op):
                gemm += d
            else:
                other += d
    return gemm, other


def simulate(point, profile, zinf, folder):
    os.makedirs(folder, exist_ok=True)
    prof = published.with_overrides(profile, point)  # a copy: the fitted profile stays as it is
    hw = os.path.join(folder, "hw.yaml")
    with open(hw, "w") as f:
        yaml.safe_dump(prof, f)
    p = {k: v for k, v in point.items() if k not in published.PROFILE_OVERRIDES}
    p["hw"] = hw
    paths = published.write_inputs(p, folder)
    tl = os.path.join(folder, "timeline.csv")
    cmd = [zinf, "sim", "--model", paths["model"], "--hw", hw, "--nodes", str(point["nodes"]), "--config",
           paths["config"], "--json", "--timeline", tl]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(f"calibration point {point['id']}: zinf sim failed: {out.stderr.strip()[:400]}")
    report = json.loads(out.stdout[out.stdout.index("{"):])
    return report["step_time"], compute_split(tl)


def solve2(rows):
    """Least squares for (g, o) in sum_i ((r_i + g G_i + o N_i) / T_i - 1)^2."""
    a11 = a12 = a22 = b1 = b2 = 0.0
    for r, G, N, T in rows:
        x1, x2, y = G / T, N / T, 1.0 - r / T
        a11 += x1 * x1
        a12 += x1 * x2
        a22 += x2 * x2
        b1 += x1 * y
        b2 += x2 * y
    det = a11 * a22 - a12 * a12
    if abs(det) < 1e-12:
        raise SystemExit("the calibration points cannot separate GEMM from other kernels: add a point of another shape")
    return (b1 * a22 - b2 * a12) / det, (a11 * b2 - a12 * b1) / det


def solve_bounded(rows):
    """solve2 with both factors held at 1 or above: a slowdown in a step is never a speedup (below 1 the
    kernel curve itself is too low, which the framework factors must not make up for). A factor the free fit
    puts below 1 is fixed at 1 and the other fitted alone."""
    g, o = solve2(rows)
    if g >= 1 and o >= 1:
        return g, o

    def alone(fixed_gemm):
        # least squares in the one free factor, the other at 1
        num = den = 0.0
        for r, G, N, T in rows:
            x = (N if fixed_gemm else G) / T
            y = 1.0 - (r + (G if fixed_gemm else N)) / T
            num += x * y
            den += x * x
        return max(1.0, num / den) if den > 0 else 1.0

    if g < 1 and o < 1:
        return 1.0, 1.0
    return (1.0, alone(True)) if g < 1 else (alone(False), 1.0)


def fit(points, profile, zinf, tmp, rounds=8):
    g, o = 1.0, 1.0
    for _ in range(rounds):
        rows, results = [], []
        prof = with_factors(profile, g, o)
        for p in points:
            step, (G, N) = simulate(p, prof, zinf, os.path.join(tmp, p["id"]))
            G1, N1 = G / g, N / o  # the kernels' time at factor 1
            rows.append((step - g * G1 - o * N1, G1, N1, target_step(p)))
            results.append((p, step))
        ng, no = solve_bounded(rows)
        done = abs(ng - g) < 1e-4 * g and abs(no - o) < 1e-4 * o
        g, o = ng, no
        if done:
            break
    prof = with_factors(profile, g, o)
    final = [(p, simulate(p, prof, zinf, os.path.join(tmp, p["id"]))[0]) for p in points]
    return g, o, final


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hw", default="dgx2-v100")
    ap.add_argument("--points", default=os.path.join(ROOT, "experiments", "published", "points.yaml"))
    ap.add_argument("--zinf", default=os.path.join(ROOT, "build", "zinf"))
    ap.add_argument("--check", action="store_true", help="exit 1 unless the profile holds the fitted factors")
    a = ap.parse_args(argv)
    with open(a.points) as f:
        points = [p for p in published.expand(yaml.safe_load(f)) if p["kind"] == "calibration" and p["hw"] == a.hw]
    if len(points) < 2:
        raise SystemExit(f"{a.points}: {len(points)} calibration point(s) for {a.hw}; two factors need at least 2")
    path = os.path.join(ROOT, "hwprofiles", f"{a.hw}.yaml")
    with open(path) as f:
        profile = yaml.safe_load(f)
    with tempfile.TemporaryDirectory(prefix="zinf-calibrate-") as tmp:
        g, o, final = fit(points, profile, a.zinf, tmp)
    print(f"{a.hw}: fitted to {len(points)} calibration points: gemm {g:.3f}, other {o:.3f}")
    outside = []
    for p, step in final:
        t = target_step(p)
        fitted = p["measured_tflops"] * t / step
        note = ""
        if "measured_range" in p:
            lo, hi = p["measured_range"]
            note = f"  published range {lo}-{hi}: " + ("inside" if lo <= fitted <= hi else "OUTSIDE")
            if not lo <= fitted <= hi:
                outside.append(p["id"])
        print(f"  {p['id']:28s} measured {p['measured_tflops']:5.1f} TFLOP/s  fitted {fitted:5.1f}"
              f"  ({100 * (t / step - 1):+.1f} %){note}")
    print("node.gpu.in_step_slowdown:")
    for k in keys(OP_KINDS_GEMM):
        print(f"  {k}: {g:.3f}")
    for k in keys(OP_KINDS_OTHER):
        print(f"  {k}: {o:.3f}")
    if a.check:
        have = profile["node"]["gpu"].get("in_step_slowdown", {})
        bad = [k for k, want in [(k, g) for k in keys(OP_KINDS_GEMM)] + [(k, o) for k in keys(OP_KINDS_OTHER)]
               if k not in have or abs(float(have[k]) / want - 1) > 0.01]
        if bad:
            print(f"{path}: in_step_slowdown differs from the calibration fit for {', '.join(bad)}")
            return 1
        if outside:
            print(f"{path}: the fit leaves {', '.join(outside)} outside the published range")
            return 1
        print(f"{path}: holds the fit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
