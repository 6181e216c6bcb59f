#!/usr/bin/env bash
# Tensor parallelism as a user meets it on the command line: zinf sim plans and simulates it,
# zinf plan says its memory table does not count the shares yet, zinf train and zinf tune refuse it
# by name, and a degree that does not divide the heads is an error naming them.
# Usage: tensor_parallel_cli.sh ZINF_BINARY. Prints "N passed, M failed".
set -u
ZINF=$1
D=$(mktemp -d /var/tmp/zinf-tp-XXXXXX)
source "$(dirname "${BASH_SOURCE[0]}")/harness.sh"
cd "$(dirname "$0")/../.."
trap 'rm -rf "$D"' EXIT
printf 'zero_stage: 3\ntensor_parallel: 2\nactivation_checkpoint: {interval: 1, tier: host, partitioned: true}\n' > "$D/tp2.yaml"
printf 'zero_stage: 3\ntensor_parallel: 5\n' > "$D/tp5.yaml"

"$ZINF" sim --model gpt2-small --hw dgx2-v100 --config "$D/tp2.yaml" --json > "$D/sim.json" 2> "$D/sim.err"; rc=$?
expect "zinf sim simulates tensor parallel 2" 0 '"samples_per_s"' "$D/sim.json" $rc
"$ZINF" sim --model gpt2-small --hw dgx2-v100 --config "$D/tp5.yaml" > "$D/sim3.log" 2>&1; rc=$?
if [ "$rc" != 0 ] && grep -q "heads" "$D/sim3.log"; then pass "a degree that does not divide the heads names them"; else fail "tensor_parallel 5 on 12 heads (exit $rc)" "$D/sim3.log"; fi
"$ZINF" plan --model gpt2-small --hw dgx2-v100 --config "$D/tp2.yaml" > "$D/plan.log" 2>&1; rc=$?
expect "zinf plan says its memory table does not count the shares" 0 "tensor_parallel 2: the memory table" "$D/plan.log" $rc
"$ZINF" train --model gpt-tiny --config "$D/tp2.yaml" --steps 1 --checkpoint-dir "$D/ckpt" --nvme-dir "$D/nvme" > "$D/train.log" 2>&1; rc=$?
if [ "$rc" != 0 ] && grep -q "tp2.yaml" "$D/train.log" && grep -q "tensor_parallel" "$D/train.log"; then
  pass "zinf train refuses tensor_parallel 2, naming the file and the key"
else
  fail "zinf train with tensor_parallel 2 (exit $rc)" "$D/train.log"
fi
"$ZINF" tune --model gpt-tiny --hw cpu-dev --config "$D/tp2.yaml" > "$D/tune.log" 2>&1; rc=$?
if [ "$rc" != 0 ] && grep -q "tensor_parallel 2" "$D/tune.log"; then pass "zinf tune refuses a tensor-parallel base config"; else fail "zinf tune with tensor_parallel 2 (exit $rc)" "$D/tune.log"; fi
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
