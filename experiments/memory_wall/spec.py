#!/usr/bin/env python3
"""A memory-wall run's spec (YAML): what experiments/memory_wall/run.sh measures and how it trains.

  spec.py env SPEC.yaml                       the driver's settings as shell assignments (MW_KEY=value)
  spec.py config SPEC.yaml --block B --depth D
                                              the run config (YAML); the aio block size and queue depth
                                              are B and D (io-bench's pick) unless the spec sets them
  spec.py show SPEC.yaml                      the spec with every default filled in

A spec is a mapping of the keys in DRIVER (each optional, with the default shown there), `config:` (run-
config keys, merged over BASE_CONFIG key by key; null removes a key, e.g. aio.block_size to take io-bench's
pick again) and `extends: OTHER.yaml` (a spec, relative to this one, whose keys this one overrides). An unknown key, a value of the wrong type or a loop of `extends` is an
error naming the file and the key.
"""
import argparse
import copy
import os
import shlex
import sys

import yaml

# key: (default, type, what it does)
DRIVER = {
    "factor": (2.5, float, "the model's states as a multiple of this machine's RAM (embeddings included)"),
    "steps": (3, int, "training steps; the last one is reported"),
    "checkpoint": (True, bool, "save a checkpoint, resume from it in a new process for one step, save again"),
    "plan": (True, bool, "print `zinf plan`'s peaks (the Program's, per tier) and its verdict first"),
    "io_bench": (True, bool, "measure the disk with `zinf io-bench` on 2 GiB before training (the reference)"),
    "store_fio": (True, bool, "after training, fio reads and rewrites the run's own state files"),
    "big_bench": (True, bool, "after training, io-bench on a file the states' size (needs checkpoint: false)"),
    "loaded_bench": (True, bool, "after training, io-bench while the CPU backend's GEMMs keep the cores busy"),
    "loaded_gib": (8, int, "GiB the loaded io-bench moves"),
    "compute_alone": (True, bool, "measure the step without offload (compute_alone.py) as the bound's compute"),
    "alone_steps": (9, int, "steps per layer count of the compute-alone reference (median of steps 2..N)"),
    "thread_cpu": (False, bool, "sample every thread's CPU time during training (thread_cpu.py)"),
    "openblas_kernels": ("native", str, "native: unset OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE; keep: leave them"),
    "environment": ({}, dict, "more environment variables for the runs, e.g. OPENBLAS_NUM_THREADS: 1"),
    "realtime_priority": (0, int, "run under `chrt -r N` when N > 0 (zinf keeps real time for its NVMe threads)"),
    "reserve_gb": (8, int, "GB of the disk left free for others; the model is scaled down to fit the rest"),
    "device_gib": (8, int, "the device arena (GiB) of the run's hwprofile"),
    "hidden": (3200, int, "the model's hidden size"),
    "heads": (25, int, "the model's attention heads"),
    "layers": (0, int, "the model's layers; 0: as many as `factor` asks for"),
    "memory_cap": ("", str, "run training in a memory cgroup of this limit (e.g. 2500M) where the machine allows"),
    "sim": (True, bool, "after training, `zinf sim` predicts the same step (model, profile, config)"),
}

BASE_CONFIG = {
    "zero_stage": 3,
    "offload": {"params": "nvme", "gradients": "nvme", "optimizer": "nvme"},
    "activation_checkpoint": {"interval": 1, "tier": "host"},
    "tiling_factor": "auto",
    "aio": {"tasks_in_flight": 4},
    "optimizer": {"type": "adamw", "lr": 1.0e-5, "grad_clip": 1.0, "sub_group_size": 10000000,
                  "timing": "overlap-backward", "sub_groups_in_flight": "auto", "nvme_phases": True, "read_ahead": True},
    "prefetch": {"nvme_distance": 36, "h2d_distance": 2, "allgather_distance": 1},
    "reserve_nvme_for_checkpoint": False,
    "gradient_stores_in_flight": 16,
}


class SpecError(Exception):
    pass


def merge(base, over):
    """`over` merged into a copy of `base`, mapping by mapping; a null value removes the key."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        if v is None:
            out.pop(k, None)
            continue
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def read(path, seen=()):
    """The spec at `path` with its `extends` chain applied (driver keys and config only)."""
    real = os.path.realpath(path)
    if real in seen:
        raise SpecError(f"{path}: extends: a loop through {' -> '.join(seen + (real,))}")
    try:
        with open(path) as f:
            doc = yaml.safe_load(f) or {}
    except OSError as e:
        raise SpecError(f"{path}: {e.strerror}") from e
    except yaml.YAMLError as e:
        raise SpecError(f"{path}: not YAML: {e}") from e
    if not isinstance(doc, dict):
        raise SpecError(f"{path}: a spec is a mapping of settings")
    base = {"config": {}}
    if "extends" in doc:
        parent = doc.pop("extends")
        if not isinstance(parent, str):
            raise SpecError(f"{path}: extends: expected a file name")
        base = read(os.path.join(os.path.dirname(path), parent), seen + (real,))
    driver = {}
    for key, value in doc.items():
        if key == "config":
            if not isinstance(value, dict):
                raise SpecError(f"{path}: config: expected a mapping of run-config keys")
            continue
        if key not in DRIVER:
            raise SpecError(f"{path}: unknown key '{key}' (allowed: {', '.join(sorted(DRIVER))}, config, extends)")
        default, kind, _ = DRIVER[key]
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value, ok = float(value), True
        if not ok:
            raise SpecError(f"{path}: {key}: expected {kind.__name__}, got '{value}'")
        if key == "openblas_kernels" and value not in ("native", "keep"):
            raise SpecError(f"{path}: openblas_kernels: expected native or keep, got '{value}'")
        driver[key] = value
    out = merge(base, driver)
    out["config"] = merge(base.get("config", {}), doc.get("config", {}))
    return out


def resolved(path):
    """Every driver key (defaults filled in) and the whole run config (BASE_CONFIG merged with the spec's)."""
    spec = read(path)
    out = {k: spec.get(k, copy.deepcopy(default)) for k, (default, _, _) in DRIVER.items()}
    out["config"] = merge(BASE_CONFIG, spec["config"])
    return out


def shell_value(v):
    if isinstance(v, bool):
        return "1" if v else "0"
    return shlex.quote(str(v))


def env_lines(spec, name):
    lines = [f"MW_SPEC_NAME={shlex.quote(name)}"]
    for k in DRIVER:
        if k == "environment":
            continue
        lines.append(f"MW_{k.upper()}={shell_value(spec[k])}")
    exports = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in spec["environment"].items())
    lines.append(f"MW_ENVIRONMENT={shlex.quote(exports)}")
    c = spec["config"]
    lines.append(f"MW_TILING={shell_value(c.get('tiling_factor', 'auto'))}")
    lines.append(f"MW_GRAD_CLIP={shell_value(c.get('optimizer', {}).get('grad_clip', 1.0))}")
    lines.append(f"MW_SUB_GROUP_SIZE={shell_value(c.get('optimizer', {}).get('sub_group_size', 10000000))}")
    aio = c.get("aio", {})
    lines.append(f"MW_FIXED_BLOCK={shell_value(aio.get('block_size', ''))}")
    lines.append(f"MW_FIXED_DEPTH={shell_value(aio.get('queue_depth', ''))}")
    return lines


def run_config(spec, block, depth):
    c = copy.deepcopy(spec["config"])
    where = {t: [k for k, v in c.get("offload", {}).items() if v == t] for t in ("nvme", "cpu", "host", "none")}
    c.setdefault("description", "the memory wall: " + "; ".join(f"{', '.join(ks)} on {t}" for t, ks in where.items() if ks)
                 + "; checkpoints on the host")
    c = {"description": c.pop("description"), **c}
    aio = c.setdefault("aio", {})
    aio.setdefault("block_size", block)
    aio.setdefault("queue_depth", depth)
    return yaml.safe_dump(c, sort_keys=False, default_flow_style=None, width=1000)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("env", "config", "show"))
    ap.add_argument("spec")
    ap.add_argument("--block", type=int, default=1 << 20)
    ap.add_argument("--depth", type=int, default=32)
    a = ap.parse_args(argv)
    try:
        spec = resolved(a.spec)
    except SpecError as e:
        print(f"memory_wall: spec {e}", file=sys.stderr)
        return 2
    if a.what == "env":
        print("\n".join(env_lines(spec, os.path.splitext(os.path.basename(a.spec))[0])))
    elif a.what == "config":
        print(run_config(spec, a.block, a.depth), end="")
    else:
        print(yaml.safe_dump(spec, sort_keys=False), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
