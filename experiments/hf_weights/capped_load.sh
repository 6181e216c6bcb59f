#!/usr/bin/env bash
# A Hugging Face folder whose weights are larger than the memory the run may use: makes a 1.31B GPT-2
# (24 blocks of 2048, seq 128), trains it one step uncapped and exports it as fp32 shards (5.2 GB), then
# under a memory cgroup of 2.5 GB (experiments/memory_wall/memory_cap.sh) starts a run from that folder
# (--model and --init-from the folder), every state on NVMe, trains one step and exports again. Prints
# the weights' size, the cap, the plan's RAM and the process's peak RSS (loading, the step and the
# export), and the cgroup's own report. About 8 minutes and 90 GB of disk on a 2-core machine.
#   bash experiments/hf_weights/capped_load.sh WORKDIR [path/to/zinf]
set -euo pipefail
work=${1:?usage: capped_load.sh WORKDIR [path/to/zinf]}
root="$(cd "$(dirname "$0")/../.." && pwd)"
zinf=${2:-$root/build/zinf}
cap=2500M
mkdir -p "$work"
work="$(cd "$work" && pwd)"
cat > "$work/model.yaml" <<'YAML'
name: gpt-1.3b-short
layers: 24
hidden: 2048
heads: 16
seq: 128
vocab: 50257
micro_batch: 1
YAML
# Little in flight, so that the plan's RAM stays under the cap: two optimizer sub-groups, 300 MB of
# gathered parameters ahead.
cat > "$work/capped.yaml" <<'YAML'
description: every state on NVMe, little in flight, for a run under a memory cap
zero_stage: 3
offload: {params: nvme, optimizer: nvme}
activation_checkpoint: {interval: 1, tier: host}
prefetch: {nvme_distance: 1, h2d_distance: 1, allgather_distance: 1, max_live_bytes: 300000000}
optimizer: {type: adamw, lr: 1.0e-4, sub_group_size: 100000, sub_groups_in_flight: 2}
YAML
rm -rf "$work/nvme1" "$work/nvme2" "$work/first" "$work/second"
mkdir -p "$work/nvme1" "$work/nvme2"
"$zinf" train --model "$work/model.yaml" --hw cpu-dev --config "$work/capped.yaml" --steps 1 \
  --nvme-dir "$work/nvme1" --export "$work/first/" --export-dtype fp32 > "$work/first.log" 2>&1
rm -rf "$work/nvme1"
bash "$root/experiments/memory_wall/memory_cap.sh" "$cap" "$work/cap.report" \
  "$zinf" train --model "$work/first" --init-from "$work/first" --hw cpu-dev --config "$work/capped.yaml" --steps 1 \
  --nvme-dir "$work/nvme2" --export "$work/second/" > "$work/second.log" 2>&1
rm -rf "$work/nvme2"
weights=$(cat "$work"/first/*.safetensors | wc -c)
echo "weights: $weights bytes of fp32 safetensors in $work/first"
echo "cap: $cap ($(cat "$work/cap.report"))"
grep -E "^memory per rank|^exported" "$work/second.log"
