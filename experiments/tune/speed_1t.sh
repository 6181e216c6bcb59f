#!/usr/bin/env bash
# How long `zinf tune` takes for the 1T model on 512 GPUs (32 DGX-2 nodes), and what it picks.
#
#   bash experiments/tune/speed_1t.sh              # ZINF_BUILD=build, OUT=analysis/tune
#
# Goal: at most 60 s on this 2-core machine. Writes OUT/tune-1t-512.json (zinf tune --json), the
# table (OUT/tune-1t-512.txt), the picked configs, and the Pareto front (analysis/tune_report.py).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${ZINF_BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
ZINF="$BUILD/zinf"
OUT=${OUT:-analysis/tune}  # relative to the tree: the table names the files it wrote by this path
[ -x "$ZINF" ] || { echo "no $ZINF: build first (cmake --build $BUILD --target zinf)" >&2; exit 1; }
cd "$ROOT"
mkdir -p "$OUT"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
start=$(date +%s.%N)
"$ZINF" tune --model gpt-1t --hw dgx2-v100 --nodes 32 --config infinity-nvme \
  --yaml "$OUT/tune-1t-512.yaml" --deepspeed "$OUT/tune-1t-512.deepspeed.json" > "$OUT/tune-1t-512.txt"
end=$(date +%s.%N)
cat "$OUT/tune-1t-512.txt"
echo
echo "zinf tune, gpt-1t on 512 GPUs: $(echo "$end - $start" | bc) s wall (goal: 60 s); load after: $(cut -d' ' -f1-3 /proc/loadavg)"
# The same search as JSON, for the Pareto front.
"$ZINF" tune --model gpt-1t --hw dgx2-v100 --nodes 32 --config infinity-nvme --yaml "" --deepspeed "" --json \
  > "$OUT/tune-1t-512.json"
/usr/bin/python3 analysis/tune_report.py "$OUT/tune-1t-512.json" --out "$OUT" --img "$ROOT/docs/results/img/tuning" | tail -n 2
