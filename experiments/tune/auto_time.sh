#!/usr/bin/env bash
# How long `auto` takes to resolve in `zinf plan` (and, with SIM=1, `zinf sim`) for every shipped
# model on 1 and 32 DGX-2 nodes (16 and 512 V100s), with every tier and the tiling factor left to
# `auto`. Each point runs REPS times (default 3) and the median is printed: the seconds `auto` took
# (wall_seconds.auto of --json), or, for a zinf whose --json has no such field (before `auto` was
# decided in closed form), the command's whole wall time, which bounds it. A command that fails
# (exit status not 0) stops the script with its message: nothing is timed that did not run. A point the planner
# refuses still resolves `auto` (refusing is an answer), so it is timed too: `zinf plan` reports the
# refusal in its --json; `zinf sim` exits 1 with "plan refused", and then the command's whole wall
# time (which bounds `auto`'s) is taken.
#
#   bash experiments/tune/auto_time.sh [ZINF]      # ZINF default build/zinf; REPS=3 NODES="1 32" SIM=0
#
# Prints one line per point and the largest median; exits 1 when it is over LIMIT seconds (default 1).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
ZINF=${1:-$ROOT/build/zinf}
REPS=${REPS:-3}
NODES=${NODES:-"1 32"}
LIMIT=${LIMIT:-1}
SIM=${SIM:-0}
[ -x "$ZINF" ] || { echo "auto_time: no $ZINF: build first" >&2; exit 2; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cd "$ROOT"
printf 'zero_stage: 3\noffload: {params: auto, optimizer: auto}\nactivation_checkpoint: {interval: 1, tier: auto}\ntiling_factor: auto\n' > "$W/auto.yaml"
export ZINF_CACHE_DIR=off  # an older zinf cached its search: make it search each time
# time_once CMD MODEL NODES: seconds auto took (or the command's wall time), on stdout.
time_once() {
  local cmd=$1 model=$2 nodes=$3 t0 t1
  t0=$(date +%s.%N)
  if ! "$ZINF" "$cmd" --model "$model" --hw dgx2-v100 --nodes "$nodes" --config "$W/auto.yaml" --json > "$W/out.json" 2> "$W/err"; then
    if grep -q "plan refused" "$W/err"; then
      t1=$(date +%s.%N)
      python3 -c "print($t1 - $t0)"
      return 0
    fi
    echo "auto_time: zinf $cmd --model $model --nodes $nodes failed:" >&2
    cat "$W/err" >&2
    return 1
  fi
  t1=$(date +%s.%N)
  python3 - "$W/out.json" "$t0" "$t1" <<'PY'
import json, sys
try:
    print(json.load(open(sys.argv[1]))["wall_seconds"]["auto"])
except Exception:
    print(float(sys.argv[3]) - float(sys.argv[2]))
PY
}
worst=0
cmds="plan"
[ "$SIM" = 1 ] && cmds="plan sim"
for cmd in $cmds; do
  for yaml in models/*.yaml; do
    model=$(basename "$yaml" .yaml)
    for nodes in $NODES; do
      ts=()
      for ((i = 0; i < REPS; ++i)); do ts+=("$(time_once "$cmd" "$model" "$nodes")") || exit 2; done
      med=$(printf '%s\n' "${ts[@]}" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')
      printf 'auto_time: zinf %-4s %-14s %2s node(s) %4s GPUs: median %.3f s (%s)\n' "$cmd" "$model" "$nodes" \
        "$((nodes * 16))" "$med" "${ts[*]}"
      worst=$(python3 -c "print(max($worst, $med))")
    done
  done
done
echo "auto_time: largest median $worst s (limit $LIMIT s)"
python3 -c "import sys; sys.exit(0 if $worst <= $LIMIT else 1)"
