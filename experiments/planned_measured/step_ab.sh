#!/usr/bin/env bash
# Does a change to the engine cost step time? Two zinf binaries (A, the reference, and B) run the
# same `zinf train` in turn, ROUNDS times (default 12), the order swapped each round so that both
# see the same machine: gpt-overlap with its parameters and optimizer states on NVMe and
# activation checkpoints on the host (the step that moves the most buffers for its compute), 8 steps
# on the CPU backend, OpenBLAS on one thread. Prints each run's median step time (the first step
# left out), the medians, and the median of the rounds' B / A ratios.
#
#   bash experiments/planned_measured/step_ab.sh ZINF_A ZINF_B NVME_DIR [ROUNDS]
set -euo pipefail
A=${1:?usage: step_ab.sh ZINF_A ZINF_B NVME_DIR [ROUNDS]}
B=${2:?usage: step_ab.sh ZINF_A ZINF_B NVME_DIR [ROUNDS]}
NVME=${3:?usage: step_ab.sh ZINF_A ZINF_B NVME_DIR [ROUNDS]}
ROUNDS=${4:-12}
export OPENBLAS_NUM_THREADS=1
work=$(mktemp -d)
trap 'rm -rf "$work" "$NVME"/rank*' EXIT
mkdir -p "$NVME"
printf 'zero_stage: 3\noffload: {params: nvme, optimizer: nvme}\nactivation_checkpoint: {interval: 1, tier: host}\n' \
  > "$work/config.yaml"
for round in $(seq 1 "$ROUNDS"); do
  order="A B"
  [ $((round % 2)) = 0 ] && order="B A"
  for which in $order; do
    zinf=$A
    [ "$which" = B ] && zinf=$B
    rm -rf "$NVME"/rank* "$work/metrics.jsonl"
    "$zinf" train --model gpt-overlap --hw cpu-dev --config "$work/config.yaml" --steps 8 --nvme-dir "$NVME" \
      --metrics "$work/metrics.jsonl" > "$work/train.log" 2>&1 || { cat "$work/train.log"; exit 1; }
    python3 - "$work/metrics.jsonl" "$which" "$round" >> "$work/steps.txt" <<'PY'
import json, statistics, sys
steps = [json.loads(line) for line in open(sys.argv[1])]
times = [s["step_seconds"] for s in steps if s.get("kind") == "step"][1:]
print(sys.argv[2], sys.argv[3], statistics.median(times))
PY
    tail -1 "$work/steps.txt"
  done
done
python3 - "$work/steps.txt" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    which, round_, seconds = line.split()
    runs[which][round_] = float(seconds)
for which in "AB":
    print(f"{which}: median step {statistics.median(runs[which].values()):.4f} s over {len(runs[which])} runs")
ratios = [runs["B"][r] / runs["A"][r] for r in runs["A"]]
print(f"B / A: median {statistics.median(ratios):.3f} (rounds {min(ratios):.3f} to {max(ratios):.3f})")
PY
