#!/usr/bin/env bash
# Regenerates the ZeRO-Infinity paper's evaluation from zinf's planner and simulator, then draws
# every figure (analysis/paper_figures.py) into analysis/paper/ with the paper's stated numbers
# overlaid where the paper gives them.
#
#   bash experiments/paper/run.sh                 # ZINF_BUILD=build-val JOBS=2 to choose
#
# Simulations: zinf sweep over the specs in this folder (resumable: rerunning skips finished points).
# Capacity and tiling: zinf plan. Backward time: zinf sim Timelines.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${ZINF_BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
ZINF="$BUILD/zinf"
JOBS=${JOBS:-2}
OUT="$ROOT/analysis/paper"
HERE="$ROOT/experiments/paper"
[ -x "$ZINF" ] || { echo "no $ZINF: build first" >&2; exit 1; }
mkdir -p "$OUT"
cd "$ROOT"
start=$(date +%s)

echo "== model scale per number of nodes (zinf plan, paper-capacity assumptions)"
for n in 1 2 4 8 16 32; do
  "$ZINF" plan --model gpt-10b --config paper-capacity --nodes "$n" --json >"$OUT/model-scale-$n.json" || true
done

echo "== largest hidden size with and without tiling (zinf plan, paper-tiling assumptions)"
"$ZINF" plan --model gpt-1t --config paper-tiling --tiling-probe 16 --json > "$OUT/plan-tiling.json"
/usr/bin/python3 - "$OUT/plan-tiling.json" "$OUT/tiling.json" <<'PY'
import json, sys
h = json.load(open(sys.argv[1]))["largest_hidden"]
print(f"largest hidden size: {h['untiled']} untiled, {h['tiled']} with tiling factor {h['tiling_factor']}")
json.dump({"untiled": h["untiled"], "tiled": h["tiled"], "factor": h["tiling_factor"]}, open(sys.argv[2], "w"))
PY

for spec in throughput-512 throughput-512-large scaling-1t partitioning prefetch checkpoint-offload; do
  echo "== $spec (zinf sweep)"
  "$ZINF" sweep "$HERE/$spec.yaml" --out "$OUT/$spec.csv" --jobs "$JOBS"
done

echo "== backward time, ZeRO-Offload vs ZeRO-Infinity (zinf sim Timelines)"
for n in 1 4; do
  for c in zero-offload infinity-cpu; do
    "$ZINF" sim --model gpt-10b --nodes "$n" --config "$HERE/configs/$c.yaml" \
      --timeline "$OUT/backward-$c-${n}nodes.csv" --timeline-ranks 0 >/dev/null
  done
done

/usr/bin/python3 analysis/paper_figures.py "$OUT" --img "$ROOT/docs/results/img/paper"
echo "paper figures regenerated in $(( $(date +%s) - start )) s"
