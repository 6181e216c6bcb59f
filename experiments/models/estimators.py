#!/usr/bin/env python3
"""Prints docs/results/models.md's estimator table: for a few Hugging Face models with a ZeRO-3
offload DeepSpeed config on one node, what `zinf plan` answers (the Program's peaks, and DeepSpeed's
own host need it prints beside them) next to the two estimators people run today, their formulas
recomputed here from their source rather than run:

- DeepSpeed's estimate_zero3_model_states_mem_needs (deepspeed/runtime/zero/stage3.py), with
  parameters and optimizer offloaded and zero.Init: per GPU 4 bytes x the largest module's own
  parameters; per node 18 bytes x all parameters x 1.5 (its additional_buffer_factor). The largest
  module's parameters, for these decoders: the embedding, an MLP matrix (an expert's, in a mixture)
  or the query projection, whichever is largest, from config.json.
- accelerate estimate-memory (accelerate/commands/estimate.py): the model built in fp32 (4 bytes a
  parameter; its buffers are left out here), and for a float16 row "Training using Adam" the largest
  of its four terms, the optimizer's 2 x fp32 size: 8 bytes a parameter on one device, no ZeRO, no
  activations.

Usage: experiments/models/estimators.py [path/to/zinf]
"""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ZINF = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "zinf")

# model folder, hardware profile, DeepSpeed config, sequence length
CASES = [
    ("llama-33b", "dgx-a100", "tests/data/deepspeed/alpaca/default_offload_opt_param.json", 2048),
    ("llama-3.1-70b", "dgx-h100", "tests/data/deepspeed/llama-factory/ds_z3_offload_config.json", 4096),
    ("mixtral-8x7b-v0.1", "dgx-h100", "tests/data/deepspeed/llama-factory/ds_z3_offload_config.json", 2048),
    ("qwen2.5-7b", "dgx-h100", "tests/data/deepspeed/accelerate/zero_stage3_offload_config.json", 2048),
]


def gb(b):
    return f"{b / 1e9:,.0f} GB"


def plan(model, hw, config, seq):
    cmd = [ZINF, "plan", "--model", os.path.join(ROOT, "tests/data/hf", model), "--hw", hw,
           "--config", os.path.join(ROOT, config), "--seq", str(seq), "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        sys.exit(f"estimators.py: {' '.join(cmd)} failed ({out.returncode}): {out.stderr.strip()}")
    return json.loads(out.stdout)


def largest_module_params(model):
    with open(os.path.join(ROOT, "tests/data/hf", model, "config.json")) as f:
        c = json.load(f)
    h = c["hidden_size"]
    head_dim = c.get("head_dim") or h // c["num_attention_heads"]
    return max(c["vocab_size"] * h, h * c["intermediate_size"], h * c["num_attention_heads"] * head_dim)


def zinf_cells(p):
    """The Program's device and host peaks, or the plan's refusal on its tier."""
    if not p["fit"]["fits"]:
        f = p["fit"]
        short = f"short by {gb(f['shortfall'])}"
        return (short, "") if f.get("tier") == "device" else ("", short)
    mem = p["memory"]
    return gb(mem["device"]["peak"]), gb(mem["host"]["peak"])


def main():
    print("| model, profile, DeepSpeed config, seq | zinf: device / GPU | zinf: host / node | DeepSpeed itself: host / node "
          "| DeepSpeed's estimator: GPU / CPU per node | accelerate: training peak |")
    print("|---|---:|---:|---:|---:|---:|")
    for model, hw, config, seq in CASES:
        p = plan(model, hw, config, seq)
        params = p["model"]["total_params"]
        device, host = zinf_cells(p)
        own = p.get("deepspeed_own", {}).get("total", {}).get("host_per_node")
        ds_gpu = 4 * largest_module_params(model)
        ds_cpu = 18 * params * 1.5  # one node: gpus_factor 1
        acc = 8 * params
        print(f"| {model}, {hw}, `{os.path.basename(config)}`, {seq} | {device} "
              f"| {host} | {gb(own) if own else 'n/a'} | {gb(ds_gpu)} / {gb(ds_cpu)} | {gb(acc)} |")


if __name__ == "__main__":
    main()
