#!/usr/bin/env bash
# Sets everything up, builds, and runs zinf's main job on built-in defaults: a GPT trained for real
# with its parameters, gradients and optimizer states on NVMe (the directory below), on the fortunes
# corpus, through a device budget more than ten times smaller than its model states; then the same
# kind of run predicted at paper scale: a 100B model with its states on NVMe on one simulated DGX-2.
# The run warms its learning rate up and decays it by a cosine (configs/demo.yaml), measures its
# loss on a held-out tenth of the corpus every 50 steps, records every step and evaluation in
# out/demo/metrics.jsonl, continues a prompt from its last checkpoint with `zinf sample`, and ends
# with its curves in out/demo/metrics.png.
# `demo.sh --train-args` prints the training run's model, config and device budget (its test uses them).
set -euo pipefail
cd "$(dirname "$0")/.."
# gpt-demo's states are 204 MB (12.7M params x 16 B); the device arena gets 0.018 GiB (19.3 MB).
TRAIN_ARGS=(--model gpt-demo --config demo --device-memory 0.018)
if [ "${1:-}" = --train-args ]; then
  echo "${TRAIN_ARGS[@]}"
  exit 0
fi
bash scripts/setup.sh build
cmake --build build -j"$(nproc)" --target zinf
OUT=${ZINF_DEMO_DIR:-$PWD/out/demo}
rm -rf "$OUT" && mkdir -p "$OUT/nvme"
./build/zinf train "${TRAIN_ARGS[@]}" --nvme-dir "$OUT/nvme" --steps ${ZINF_DEMO_STEPS:-150} \
  --checkpoint-dir "$OUT/checkpoints" --timeline "$OUT/timeline.csv" --trace "$OUT/timeline.trace.json" \
  --export "$OUT/gpt-demo.safetensors" --metrics "$OUT/metrics.jsonl" --eval-every 50 --eval-batches 8
/usr/bin/python3 analysis/train_report.py "$OUT/metrics.jsonl" --out "$OUT/metrics.png"
echo "--- a sample from the trained model (its last checkpoint, through the same tiers):"
./build/zinf sample --checkpoint "$OUT/checkpoints" --config demo --device-memory 0.018 --nvme-dir "$OUT/nvme" \
  --prompt "Q: Why" --tokens 60 --seed 1
echo
./build/zinf sim --model gpt-100b --hw dgx2-v100 --config experiments/sim/paper-node-nvme.yaml
