#!/usr/bin/env bash
# The published-measurements suite: simulates every point of experiments/published/points.yaml and
# writes analysis/published/ (table, CSV, scatter, per-figure panels). About a minute.
#   bash experiments/published/run.sh [run.py options]
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -x build/zinf ] || { echo "build zinf first: bash scripts/setup.sh build && cmake --build build"; exit 1; }
exec /usr/bin/python3 experiments/published/run.py "$@"
