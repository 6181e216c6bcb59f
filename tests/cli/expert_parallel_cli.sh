#!/usr/bin/env bash
# Expert parallelism on the command line: zinf sim gives Mixtral-8x7B on one DGX-H100 a step time at
# expert_parallel 1, 2, 4 and 8, the all-to-alls costing time; zinf plan counts a rank's experts;
# a degree that does not divide the ranks is refused naming expert_parallel.
# Usage: expert_parallel_cli.sh ZINF_BINARY. Prints "N passed, M failed".
set -u
ZINF=$1
D=$(mktemp -d /var/tmp/zinf-ep-XXXXXX)
source "$(dirname "${BASH_SOURCE[0]}")/harness.sh"
cd "$(dirname "$0")/../.."
trap 'rm -rf "$D"' EXIT
MIXTRAL=tests/data/hf/mixtral-8x7b-v0.1

for ep in 1 2 4 8; do
  printf 'zero_stage: 3\noffload: {optimizer: cpu}\nactivation_checkpoint: {interval: 1, tier: device}\nexpert_parallel: %s\n' \
    "$ep" > "$D/ep$ep.yaml"
  "$ZINF" sim --model $MIXTRAL --hw dgx-h100 --config "$D/ep$ep.yaml" --seq 1024 --json > "$D/sim$ep.json" 2> "$D/sim$ep.err"
  expect "zinf sim of Mixtral-8x7B at expert_parallel $ep gives a step time" 0 '"step_time": ?[0-9.e-]+' "$D/sim$ep.json" $?
done
if /usr/bin/python3 - "$D" <<'PY'
import json, sys
t = {ep: json.load(open(f"{sys.argv[1]}/sim{ep}.json")) for ep in (1, 2, 4, 8)}
assert all(r["step_time"] > 0 and r["within_budget"] for r in t.values()), t
# The peak device memory falls as the gathered expert block does (experts / E of a layer's).
peaks = [t[ep]["peak_memory"]["device_per_gpu"] for ep in (1, 2, 4, 8)]
assert peaks == sorted(peaks, reverse=True) and peaks[0] > peaks[-1], peaks
PY
then pass "every degree fits, and the device peak falls as expert_parallel grows"
else fail "expert_parallel 1..8: step times and device peaks" "$D/sim8.err"; fi

"$ZINF" plan --model $MIXTRAL --hw dgx-h100 --config "$D/ep4.yaml" --seq 1024 --json > "$D/plan.json" 2> "$D/plan.err"
expect "zinf plan --json carries expert_parallel" 0 '"expert_parallel": ?4' "$D/plan.json" $?
printf 'zero_stage: 3\noffload: {optimizer: cpu}\nexpert_parallel: 3\n' > "$D/ep3.yaml"
"$ZINF" sim --model $MIXTRAL --hw dgx-h100 --config "$D/ep3.yaml" --seq 1024 > "$D/ep3.log" 2>&1; rc=$?
if [ "$rc" != 0 ] && grep -q "expert_parallel 3 does not divide the 8 data-parallel ranks" "$D/ep3.log"; then
  pass "expert_parallel 3 on 8 ranks is refused naming expert_parallel"
else fail "expert_parallel 3 on 8 ranks (exit $rc)" "$D/ep3.log"; fi
echo "expert parallel cli: $PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
