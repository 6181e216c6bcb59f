#!/usr/bin/env bash
# Sets everything up, builds, and runs zinf's main job on built-in defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh build
cmake --build build -j"$(nproc)" --target zinf
./build/zinf plan
