#!/usr/bin/env bash
# zinf sim --range: the step at every combination of the bounds of profile inputs no source fixes,
# and the range it spans. A 4-node run whose all-gathers cross the NICs: the range over each NIC's
# rate from 100 to 400 Gb/s holds the run at the profile's own 400 Gb/s as its fast end and is wider
# than nothing; a second ranged input doubles the combinations; a key the profile lacks, a key that is
# not one value, a bound the profile reader refuses and a malformed range are refused by name.
# Usage: sim_range_cli.sh ZINF_BINARY. Prints "N passed, M failed".
set -u
ZINF=$1
D=$(mktemp -d /var/tmp/zinf-range-XXXXXX)
source "$(dirname "${BASH_SOURCE[0]}")/harness.sh"
cd "$(dirname "$0")/../.."
trap 'rm -rf "$D"' EXIT

printf 'name: r\nlayers: 4\nhidden: 1024\nheads: 16\nseq: 1024\nvocab: 50368\nmicro_batch: 4\nattention: flash\n' > "$D/m.yaml"
printf 'zero_stage: 3\nactivation_checkpoint: {interval: 0}\n' > "$D/c.yaml"
RUN=(sim --model "$D/m.yaml" --hw dgx-h100 --nodes 4 --config "$D/c.yaml")

"$ZINF" "${RUN[@]}" --json --range "node.nic.bandwidth=100 Gb/s:400 Gb/s" > "$D/one.json" 2> "$D/one.err"; rc=$?
if [ "$rc" = 0 ] && /usr/bin/python3 - "$D/one.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
r = j["range"]
bounds = {b["inputs"]["node.nic.bandwidth"]: b["step_time"] for b in r["per_bound"]}
assert len(bounds) == 2, bounds
assert abs(bounds["400 Gb/s"] - j["step_time"]) <= 1e-9 * j["step_time"], (bounds, j["step_time"])  # the profile's own rate
assert bounds["100 Gb/s"] > 1.05 * bounds["400 Gb/s"], bounds  # a quarter of the NIC rate shows in the step
assert r["step_time"]["low"] == min(bounds.values()) and r["step_time"]["high"] == max(bounds.values()), r
PY
then pass "one ranged input: two bounds, the profile's own rate at the fast end"; else fail "one ranged input (exit $rc)" "$D/one.err"; fi

"$ZINF" "${RUN[@]}" --range "node.nic.bandwidth=100 Gb/s:400 Gb/s" --range "fabric.latency=4 us:20 us" > "$D/two.log" 2>&1; rc=$?
expect "two ranged inputs: four combinations printed" 0 "step time range .* over 4 combination\(s\)" "$D/two.log" "$rc"

"$ZINF" "${RUN[@]}" --range "node.nic.speed=1:2" > "$D/nokey.log" 2>&1; rc=$?
expect "a key the profile lacks is refused by name" 2 "node.nic.speed.*does not have" "$D/nokey.log" "$rc"
"$ZINF" "${RUN[@]}" --range "node=1:2" > "$D/map.log" 2>&1; rc=$?
expect "a key that holds a mapping is refused" 2 "key 'node'.*one value" "$D/map.log" "$rc"
"$ZINF" "${RUN[@]}" --range "node.nic.bandwidth=100 furlongs:400 Gb/s" > "$D/unit.log" 2>&1; rc=$?
expect "a bound the profile reader refuses names the bound" 2 "with --range .*100 furlongs.*not a bandwidth" "$D/unit.log" "$rc"
"$ZINF" "${RUN[@]}" --range "node.nic.bandwidth" > "$D/form.log" 2>&1; rc=$?
expect "a range without bounds is refused" 105 "expected PATH=LOW:HIGH" "$D/form.log" "$rc"
left=$(find /tmp -maxdepth 1 -name 'zinf-range-*' -newer "$D/m.yaml" 2>/dev/null | wc -l)
if [ "$left" = 0 ]; then pass "no temporary profile left behind"; else fail "$left temporary profile(s) left in /tmp"; fi

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
