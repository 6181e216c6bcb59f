#!/usr/bin/env bash
# The tuner's pick for gpt-overlap on this machine (states on the host, no checkpoints, optimizer
# overlapping backward) beside its three neighbours (checkpoints on the host every block, optimizer
# after backward), each simulated on hwprofiles/local.yaml and trained for 12 steps with `zinf
# train` (median of steps 4-12), to see whether real_grid.py's gap between the pick and the best
# measured configuration repeats.
#
#   bash experiments/tune/recheck_gpt_overlap.sh      # ZINF_BUILD=build
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${ZINF_BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
ZINF="$BUILD/zinf"
HW="$ROOT/hwprofiles/local.yaml"
export OPENBLAS_NUM_THREADS=1
D=$(mktemp -d /var/tmp/zinf-recheck-XXXXXX)
trap 'rm -rf "$D"' EXIT
config() {  # name interval timing
  cat > "$D/$1.yaml" <<Y
zero_stage: 3
offload: {params: host, optimizer: host}
activation_checkpoint: {interval: $2, tier: host}
optimizer: {type: adamw, lr: 1.0e-3, sub_group_size: 100000, timing: $3}
micro_batch: 4
gradient_accumulation: 1
Y
}
config ckpt-after 1 after-backward
config off-overlap 0 overlap-backward
config ckpt-overlap 1 overlap-backward
config off-after 0 after-backward
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
for c in ckpt-after off-overlap ckpt-overlap off-after; do
  mkdir -p "$D/nvme-$c"
  pred=$("$ZINF" sim --model gpt-overlap --hw "$HW" --config "$D/$c.yaml" --json |
    /usr/bin/python3 -c "import json, sys; print(round(json.load(sys.stdin)['step_time'], 4))")
  # A pseudo-terminal makes zinf train print every step's line.
  meas=$(script -qec "$ZINF train --model gpt-overlap --hw $HW --config $D/$c.yaml --steps 12 --nvme-dir $D/nvme-$c" /dev/null |
    /usr/bin/python3 -c "
import re, statistics, sys
t = {int(m.group(1)): float(m.group(2)) for m in re.finditer(r'step (\d+)/\d+ \|[^|]*\|[^|]*\| ([0-9.]+) s \|', sys.stdin.read())}
print(round(statistics.median([v for k, v in t.items() if k > 3]), 4))")
  echo "$c: predicted $pred s, measured $meas s"
done
