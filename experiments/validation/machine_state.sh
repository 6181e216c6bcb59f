#!/usr/bin/env bash
# Whether two-thread predictions miss when this machine's cores change how cheaply they share data.
# Each of N iterations profiles the machine at OPENBLAS_NUM_THREADS (2 unless set), printing a cache
# line's round trip between two cores at each phase of the profile, then validates mini-cpu (gpt-mini,
# states in host memory) on that profile, with the round trips before and after the run, and prints the
# error and whether `zinf validate` noted a change of state (round trips over 2x apart anywhere).
#
#   bash experiments/validation/machine_state.sh [N] [OUT]     (N 10: about 6 minutes on 2 cores)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
ZINF="$ROOT/${ZINF_BUILD:-build}/zinf"
N=${1:-10}
OUT=${2:-$(mktemp -d /tmp/zinf-machine-state.XXXXXX)}
SCRATCH=$(mktemp -d /tmp/zinf-machine-state-nvme.XXXXXX)
trap 'rm -rf "$SCRATCH"' EXIT
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-2}
mkdir -p "$OUT"
cd "$ROOT"
echo "OpenBLAS: $OPENBLAS_NUM_THREADS thread(s) per process; profiles and runs in $OUT"
for i in $(seq 1 "$N"); do
  "$ZINF" profile-hw --out "$OUT/profile-$i.yaml" --nvme-dir "$SCRATCH" > "$OUT/profile-$i.log" 2>&1
  "$ZINF" validate --model gpt-mini --config experiments/validation/configs/cpu.yaml --ranks 1 --steps 60 --warmup 5 \
    --hw "$OUT/profile-$i.yaml" --out-dir "$OUT/run-$i" --nvme-dir "$SCRATCH" --json > /dev/null < /dev/null
  /usr/bin/python3 - "$i" "$OUT/profile-$i.log" "$OUT/run-$i/validate.json" <<'PY'
import json, sys
i, log, path = sys.argv[1:]
phases = next((l.split("phase", 1)[1].strip() for l in open(log) if "round trip by phase" in l), "not timed")
j = json.load(open(path))
state = j["machine_state"]
run = ", ".join("%s %.0f ns" % (k, 1e9 * v) for k, v in sorted(state["run_round_trips"].items(), reverse=True))
print("%s | profile: %s | run: %s | measured %.4f s predicted %.4f s error %+.1f%% | %s" % (
    i, phases, run or "not timed", j["measured"]["median"], j["predicted"], 100 * j["error"],
    "state changed" if state["note"] else "state held"))
PY
done
