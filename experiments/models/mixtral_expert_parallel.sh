#!/usr/bin/env bash
# Prints docs/results/models.md's expert-parallel table: Mixtral-8x7B (tests/data/hf) simulated by
# `zinf sim` on one 8-GPU node at expert_parallel 1, 2, 4 and 8, ZeRO-3 with the optimizer states on
# OPTIMIZER (cpu, the default, or device), one checkpoint per block on the device, sequences of SEQ
# tokens (default 4096), one a micro-batch.
# Usage: experiments/models/mixtral_expert_parallel.sh [path/to/zinf] [hwprofile] [seq] [optimizer]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
zinf="${1:-$root/build/zinf}"
hw="${2:-dgx-a100}"
seq="${3:-4096}"
optimizer="${4:-cpu}"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
echo "| expert_parallel | step time | TFLOP/s per GPU | peak device per GPU | all-to-all per step per GPU |"
echo "|---|---|---|---|---|"
for ep in 1 2 4 8; do
  cfg="$dir/ep$ep.yaml"
  printf 'description: Mixtral expert parallel %s\nzero_stage: 3\noffload: {optimizer: %s}\nactivation_checkpoint: {interval: 1, tier: device}\nexpert_parallel: %s\n' "$ep" "$optimizer" "$ep" > "$cfg"
  "$zinf" sim --model "$root/tests/data/hf/mixtral-8x7b-v0.1" --hw "$hw" --config "$cfg" --seq "$seq" --json > "$dir/ep$ep.json"
  python3 - "$dir/ep$ep.json" "$ep" "$seq" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
ep, seq = int(sys.argv[2]), int(sys.argv[3])
# Each all-to-all sends (E-1)/E of experts x capacity x hidden bf16 values (capacity factor 1:
# tokens x top_k rows); 6 per mixture layer (forward, recompute, backward), 32 layers.
sent = 6 * 32 * (ep - 1) / ep * seq * 2 * 4096 * 2 if ep > 1 else 0
print(f"| {ep} | {r['step_time']:.3f} s | {r['tflops_per_gpu']:.1f} | "
      f"{r['peak_memory']['device_per_gpu'] / 2**30:.1f} GiB | {sent / 2**30:.2f} GiB |")
PY
done
