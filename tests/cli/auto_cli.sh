#!/usr/bin/env bash
# `auto` in a run config is the tuner's search (tune/auto_config.hpp), decided once for every
# command: zinf plan, sim and train agree on it, it picks the fastest fitting placement that the
# simulator finds among every fixed one, and its cache answers a second time without searching.
#   bash tests/cli/auto_cli.sh ZINF
set -u
ZINF=$1
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
. "$(dirname "$0")/harness.sh"
export ZINF_CACHE_DIR="$D/cache"

# gpt-100b on one DGX-2: neither parameters nor optimizer states fit on the devices, so the tiers matter.
printf 'zero_stage: 3\noffload: {params: auto, optimizer: auto}\nactivation_checkpoint: {interval: 1, tier: host}\n' > "$D/auto.yaml"
"$ZINF" sim --model gpt-100b --hw dgx2-v100 --config "$D/auto.yaml" --json > "$D/sim.json" 2> "$D/sim.err"; rc=$?
expect "zinf sim resolves auto" 0 "" "$D/sim.err" $rc
best=""; best_t=""
for p in device host nvme; do
  for o in device host nvme; do
    printf 'zero_stage: 3\noffload: {params: %s, optimizer: %s}\nactivation_checkpoint: {interval: 1, tier: host}\n' "$p" "$o" > "$D/f.yaml"
    if "$ZINF" sim --model gpt-100b --hw dgx2-v100 --config "$D/f.yaml" --json > "$D/f.json" 2> /dev/null; then
      t=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["step_time"])' "$D/f.json")
      echo "params $p, optimizer $o: $t s" >> "$D/fixed.log"
      if [ -z "$best_t" ] || /usr/bin/python3 -c "import sys; sys.exit(0 if $t < $best_t else 1)"; then best_t=$t; best="params $p, gradients $p, optimizer $o"; fi
    else
      echo "params $p, optimizer $o: refused" >> "$D/fixed.log"
    fi
  done
done
auto_t=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["step_time"])' "$D/sim.json" 2> /dev/null)
if grep -q "auto, by the tuner's search: $best —" "$D/sim.json" && [ "$auto_t" = "$best_t" ]; then
  pass "auto picks the fastest of the nine fixed placements the simulator accepts ($best, $best_t s)"
else
  echo "auto: $(grep '"auto"' "$D/sim.json") step $auto_t" >> "$D/fixed.log"
  fail "auto's pick is not the fastest fixed placement ($best, $best_t s)" "$D/fixed.log"
fi

# zinf plan decides the same, from the cache (same model, profile, nodes, config and build).
"$ZINF" plan --model gpt-100b --hw dgx2-v100 --config "$D/auto.yaml" --json > "$D/plan.json" 2> "$D/plan.err"; rc=$?
if [ $rc = 0 ] && /usr/bin/python3 - "$D/plan.json" "$best" <<'PY'
import json, sys
j, best = json.load(open(sys.argv[1])), sys.argv[2]
c = j["config"]
assert f"params {c['params']}, gradients {c['gradients']}, optimizer {c['optimizer']}" == best, c
assert j["auto"].startswith(f"auto, by the tuner's search: {best} —") and j["auto"].endswith("(cached)"), j["auto"]
PY
then pass "zinf plan plans what zinf sim simulated, from the cache"
else fail "zinf plan's auto differs from zinf sim's (exit $rc)" "$D/plan.json"; fi

# A damaged cache entry is not taken for an answer: the search runs again.
for f in "$D"/cache/auto-*.txt; do printf 'zinf auto cache\n9 9 9 9 0\n' > "$f"; done
"$ZINF" plan --model gpt-100b --hw dgx2-v100 --config "$D/auto.yaml" > "$D/plan2.log" 2>&1; rc=$?
if [ $rc = 0 ] && grep -q "auto, by the tuner's search: $best —" "$D/plan2.log" && ! grep -q "(cached)" "$D/plan2.log"; then
  pass "a damaged cache entry is searched again"
else fail "a damaged cache entry (exit $rc)" "$D/plan2.log"; fi
ZINF_CACHE_DIR=off "$ZINF" plan --model gpt-100b --hw dgx2-v100 --config "$D/auto.yaml" > "$D/plan3.log" 2>&1; rc=$?
if [ $rc = 0 ] && grep -q "auto, by the tuner's search: $best —" "$D/plan3.log" && ! grep -q "(cached)" "$D/plan3.log"; then
  pass "ZINF_CACHE_DIR=off searches every time"
else fail "ZINF_CACHE_DIR=off (exit $rc)" "$D/plan3.log"; fi

# zinf train decides auto the same way before it plans, and trains what it chose.
printf 'zero_stage: 3\noffload: {params: auto, optimizer: auto}\nactivation_checkpoint: {interval: 1, tier: auto}\ntiling_factor: auto\n' > "$D/train-auto.yaml"
mkdir -p "$D/nvme"
"$ZINF" train --model gpt-tiny --config "$D/train-auto.yaml" --steps 2 --nvme-dir "$D/nvme" --device-memory 0.004 > "$D/train.log" 2>&1; rc=$?
expect "zinf train resolves auto with the tuner's search and trains" 0 "zinf train: auto, by the tuner's search: params .*, optimizer .*, checkpoints .*, tiling [0-9]+ —" "$D/train.log" $rc
choice=$(sed -n "s/.*auto, by the tuner's search: \(.*\) — .*/\1/p" "$D/train.log" | head -1)
if [ -n "$choice" ] && grep -qF "cpu backend | $choice," "$D/train.log"; then pass "zinf train plans what auto chose ($choice)"
else fail "zinf train's plan is not auto's choice '$choice'" "$D/train.log"; fi

echo "auto cli: $PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
