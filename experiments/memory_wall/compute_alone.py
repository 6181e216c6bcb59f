#!/usr/bin/env python3
"""The memory-wall step without offload: its "compute alone" bound, measured.

  compute_alone.py --zinf BIN --layers L --hidden H --heads N --seq S --vocab V --tiling T
                   --grad-clip C --sub-group-size G --hw HW.yaml --work DIR [--small 1] [--large 6]
                   [--steps 9] [--device-gib 20]

A model whose states are 1.5x RAM cannot train with every state resident, so this trains the same
shape (hidden, heads, sequence, vocabulary, tiling, optimizer) with everything on the device tier
(the CPU backend's arena in RAM: no NVMe, no host tier, no staging) at two layer counts that fit,
SMALL and LARGE, takes each one's median step over steps 2..STEPS, and extrapolates linearly in
layers to L. The step is the same work as the offloaded one (forward, recompute, backward, the
one-rank gathers and reduces, Adam on every parameter) on the same cores, without the I/O: a block
costs the same at any depth, and the embeddings, the head and their Adam are the intercept. When
LARGE does not fit in this machine's memory (zinf refuses it up front), it tries one layer fewer.
The last line is "compute_alone_s SECONDS".
"""
import argparse
import os
import re
import statistics
import subprocess
import sys


def step_seconds(log):
    """{step: seconds} from `zinf train`'s step lines."""
    return {int(m[1]): float(m[2]) for m in re.finditer(r"step (\d+)/\d+ \| loss \S+ \| \S+ tok/s \| ([\d.]+) s", log)}


def median_step(a, layers):
    """The median of steps 2..STEPS at this layer count, or None when zinf refuses it for memory."""
    model = os.path.join(a.work, f"resident-{layers}.yaml")
    with open(model, "w") as f:
        f.write(f"name: gpt-memory-wall-resident\nlayers: {layers}\nhidden: {a.hidden}\nheads: {a.heads}\n"
                f"seq: {a.seq}\nvocab: {a.vocab}\nmicro_batch: 1\n")
    config = os.path.join(a.work, "resident.yaml")
    with open(config, "w") as f:
        f.write("description: the memory-wall model with every state resident (compute alone)\n"
                "zero_stage: 3\noffload: {params: none, gradients: none, optimizer: none}\n"
                f"activation_checkpoint: {{interval: 1, tier: device}}\ntiling_factor: {a.tiling}\n"
                f"optimizer: {{type: adamw, lr: 1.0e-5, grad_clip: {a.grad_clip}, sub_group_size: {a.sub_group_size}}}\n")
    cmd = [a.zinf, "train", "--model", model, "--hw", a.hw, "--config", config, "--steps", str(a.steps),
           "--print-every", "1", "--device-memory", str(a.device_gib)]
    run = subprocess.run(cmd, capture_output=True, text=True)
    log = run.stdout + run.stderr
    if run.returncode != 0:
        # zinf's two up-front refusals for memory: RAM (MemAvailable) and the device budget (plan refused).
        if re.search(r"\(MemAvailable\)|^zinf: plan refused:", log, re.M):
            return None
        sys.exit(f"compute_alone: {' '.join(cmd)} failed (exit {run.returncode}):\n{log[-2000:]}")
    steps = step_seconds(log)
    later = [steps[k] for k in sorted(steps) if k >= 2]
    if len(later) != a.steps - 1:
        sys.exit(f"compute_alone: expected steps 2..{a.steps} in zinf train's output, got {sorted(steps)}")
    print(f"compute alone: {layers} layer(s) resident: steps 2-{a.steps} " + ", ".join(f"{s:.2f}" for s in later) +
          f" s, median {statistics.median(later):.2f} s", flush=True)
    return statistics.median(later)


def extrapolate(small, t_small, large, t_large, layers):
    """The step at `layers` on the line through (small, t_small) and (large, t_large)."""
    return t_small + (t_large - t_small) * (layers - small) / (large - small)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for key in ("zinf", "hw", "work", "tiling"):
        ap.add_argument(f"--{key}", required=True)
    for key in ("layers", "hidden", "heads", "seq", "vocab", "sub-group-size"):
        ap.add_argument(f"--{key}", type=int, required=True)
    ap.add_argument("--grad-clip", type=float, required=True)
    ap.add_argument("--small", type=int, default=1)
    ap.add_argument("--large", type=int, default=6)
    ap.add_argument("--steps", type=int, default=9)
    ap.add_argument("--device-gib", type=float, default=20)
    a = ap.parse_args(argv)
    if not 1 <= a.small < a.large or a.steps < 3:
        sys.exit("compute_alone: needs 1 <= --small < --large and --steps >= 3")
    t_small = median_step(a, a.small)
    if t_small is None:
        sys.exit(f"compute_alone: even {a.small} layer(s) resident do not fit in this machine's memory")
    large, t_large = a.large, None
    while large > a.small:
        t_large = median_step(a, large)
        if t_large is not None:
            break
        print(f"compute alone: {large} layers resident do not fit in this machine's memory; trying {large - 1}")
        large -= 1
    if t_large is None:
        sys.exit(f"compute_alone: no layer count above {a.small} fits resident; no compute-alone reference")
    t = extrapolate(a.small, t_small, large, t_large, a.layers)
    print(f"compute alone: {(t_large - t_small) / (large - a.small):.3f} s per layer -> {t:.2f} s at {a.layers} layers")
    print(f"compute_alone_s {t:.3f}")


if __name__ == "__main__":
    main()
