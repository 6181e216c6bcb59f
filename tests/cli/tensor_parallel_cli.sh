#!/usr/bin/env bash
# Tensor parallelism as a user meets it on the command line: zinf sim plans and simulates it,
# zinf plan counts a rank's share in its memory table, zinf tune searches the degree, zinf train
# trains, checkpoints and exports it under mpirun and refuses, naming the file, what it cannot do (a
# rank count the degree does not divide, owner-based partitioning), and a degree that does not divide the heads is an error
# naming them.
# Usage: tensor_parallel_cli.sh ZINF_BINARY [MPIEXEC]. Prints "N passed, M failed".
set -u
ZINF=$1
MPIEXEC=${2:-}
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
expect "zinf plan counts a rank's share over the data-parallel ranks" 0 "tensor_parallel 2: a rank holds its group's share.* 8 data-parallel ranks" "$D/plan.log" $rc
"$ZINF" plan --model gpt2-small --hw dgx2-v100 --config configs/zero3.yaml > "$D/plan1.log" 2>&1
states() { grep -E '^model states' "$1" | awk '{print $3 $4}'; }
if [ -n "$(states "$D/plan.log")" ] && [ "$(states "$D/plan.log")" != "$(states "$D/plan1.log")" ] || grep -q "partitioned across the group" "$D/plan.log"; then
  pass "the memory table under tensor parallelism differs from degree 1"
else
  fail "zinf plan's table with tensor_parallel 2 equals degree 1's" "$D/plan.log"
fi
printf 'zero_stage: 3\ntensor_parallel: 2\ntiling_factor: auto\nactivation_checkpoint: {interval: 1, tier: host, partitioned: true}\n' > "$D/tp2auto.yaml"
"$ZINF" plan --model gpt2-small --hw dgx2-v100 --config "$D/tp2auto.yaml" --tiling-probe 4 --json > "$D/plan.json" 2> "$D/planjson.err"; rc=$?
if [ "$rc" = 0 ] && /usr/bin/python3 - "$D/plan.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
c, h = j["config"], j["largest_hidden"]
assert c["tensor_parallel"] == 2 and c["data_parallel_ranks"] == 8 and c["checkpoints_partitioned"], c
assert c["tiling_factor"] >= 1 and "auto" in j and "closed form" in j["auto"], j.get("auto")  # auto resolved in closed form
assert h["tiling_factor"] == 4 and h["tiled"] >= h["untiled"] > 0, h
PY
then pass "zinf plan --json: the config as planned (tensor parallel, auto tiling resolved) and the largest hidden sizes"
else fail "zinf plan --json with tensor_parallel 2 and tiling auto (exit $rc)" "$D/planjson.err"; fi
"$ZINF" train --model gpt-tiny --config "$D/tp2.yaml" --steps 1 --nvme-dir "$D" > "$D/train.log" 2>&1; rc=$?
if [ "$rc" != 0 ] && grep -q "tp2.yaml" "$D/train.log" && grep -q "tensor_parallel 2 does not divide the job's 1 rank" "$D/train.log"; then
  pass "zinf train with tensor_parallel 2 on one process says to run it on a multiple of 2 ranks, naming the file"
else
  fail "zinf train with tensor_parallel 2 on one process (exit $rc)" "$D/train.log"
fi
if [ -n "$MPIEXEC" ]; then
  printf 'zero_stage: 3\ntensor_parallel: 2\noffload: {optimizer: cpu}\n' > "$D/tp2train.yaml"
  "$MPIEXEC" -np 2 "$ZINF" train --model gpt-tiny --config "$D/tp2train.yaml" --steps 3 --nvme-dir "$D" \
    --checkpoint-dir "$D/ckpt" --checkpoint-every 2 --export "$D/tp2.safetensors" > "$D/mpitrain.log" 2>&1; rc=$?
  if [ "$rc" = 0 ] && grep -q "step 3" "$D/mpitrain.log" && [ -s "$D/tp2.safetensors" ] && [ -d "$D/ckpt/step-00000002" ] &&
     grep -q "on 2 ranks (tensor parallel 2 x data parallel 1" "$D/mpitrain.log"; then
    pass "mpirun -np 2 zinf train trains tensor_parallel 2, checkpoints and exports"
  else fail "mpirun -np 2 zinf train with tensor_parallel 2 (exit $rc)" "$D/mpitrain.log"; fi
  printf 'zero_stage: 3\ntensor_parallel: 2\npartitioning: owner-based\n' > "$D/tp2owner.yaml"
  "$MPIEXEC" -np 2 "$ZINF" train --model gpt-tiny --config "$D/tp2owner.yaml" --steps 1 --nvme-dir "$D" > "$D/mpiowner.log" 2>&1; rc=$?
  if [ "$rc" != 0 ] && grep -q "tp2owner.yaml: tensor_parallel 2: owner-based partitioning" "$D/mpiowner.log"; then
    pass "zinf train refuses owner-based partitioning with tensor_parallel 2, naming the file"
  else
    fail "zinf train, owner-based with tensor_parallel 2 (exit $rc)" "$D/mpiowner.log"
  fi
fi
"$ZINF" tune --model gpt-tiny --hw dgx2-v100 --config "$D/tp2.yaml" --json --yaml "" --deepspeed "" > "$D/tune.json" 2> "$D/tune.log"; rc=$?
expect "zinf tune searches from a tensor-parallel base config" 0 '"tensor_parallel"' "$D/tune.json" $rc
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
