#!/usr/bin/env bash
# Sets everything up, builds, and runs all tests through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh build
cmake --build build -j"$(nproc)"
cd build && ctest --output-on-failure -j"$(nproc)" "$@"
