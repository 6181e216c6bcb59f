#!/usr/bin/env bash
# An A/B (or more arms) of memory-wall specs on one binary: ROUNDS rounds, each running every spec once
# in the order given, so that the disk's drift over the hours hits every arm alike. Each run keeps its
# folder out/memory_wall/SPEC_NAME-ROUND (run.log, timeline.csv); at the end, each run's last step and
# its step and disk against io-bench.
#   bash experiments/memory_wall/compare.sh NVME_DIR ROUNDS SPEC.yaml... [--zinf BIN]
set -euo pipefail
cd "$(dirname "$0")/../.."
NVME=${1:?usage: compare.sh NVME_DIR ROUNDS SPEC.yaml... [--zinf BIN]}
ROUNDS=${2:?usage: compare.sh NVME_DIR ROUNDS SPEC.yaml... [--zinf BIN]}
shift 2
specs=()
zinf=(--zinf build/zinf)
while [ $# -gt 0 ]; do
  case $1 in
    --zinf) zinf=(--zinf "$2"); shift 2 ;;
    *) specs+=("$1"); shift ;;
  esac
done
[ ${#specs[@]} -gt 0 ] || { echo "compare: no spec given" >&2; exit 2; }
runs=()
for round in $(seq 1 "$ROUNDS"); do
  for spec in "${specs[@]}"; do
    out=out/memory_wall/$(basename "$spec" .yaml)-$round
    bash experiments/memory_wall/run.sh "$spec" "$NVME" "${zinf[@]}" --out "$out"
    runs+=("$out")
  done
done
for out in "${runs[@]}"; do
  echo "== $out"
  grep -E "^(last step|against io-bench)" "$out/run.log" || echo "(no report: see $out/run.log)"
done
