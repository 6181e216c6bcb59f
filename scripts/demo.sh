#!/usr/bin/env bash
# Sets everything up, builds, and runs zinf's main job on built-in defaults: a small GPT trained
# for real with its parameters, gradients and optimizer states on NVMe (the directory below), on
# the fortunes corpus; then the same kind of run predicted at paper scale: a 100B model with its
# states on NVMe on one simulated DGX-2.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh build
cmake --build build -j"$(nproc)" --target zinf
OUT=${ZINF_DEMO_DIR:-$PWD/out/demo}
rm -rf "$OUT" && mkdir -p "$OUT/nvme"
./build/zinf train --model gpt-mini --config train-nvme --nvme-dir "$OUT/nvme" --steps ${ZINF_DEMO_STEPS:-150} \
  --checkpoint-dir "$OUT/checkpoints" --timeline "$OUT/timeline" --export "$OUT/gpt-mini.safetensors"
echo
./build/zinf sim --model gpt-100b --hw dgx2-v100 --config experiments/sim/paper-node-nvme.yaml
