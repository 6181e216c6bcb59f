#!/usr/bin/env bash
# Activation offload as a user meets it on the command line: zinf plan prints what the planner's
# activation pass chose per block, zinf train runs an offloading plan on the CPU backend to the
# end, zinf sim simulates one over GDS, and a bad policy is an error naming the key. Two checkpoints
# per block are simulated and refused by the engine.
# Usage: activation_offload_cli.sh ZINF_BINARY. Prints "N passed, M failed".
set -u
ZINF=$1
D=$(mktemp -d /var/tmp/zinf-act-XXXXXX)
source "$(dirname "${BASH_SOURCE[0]}")/harness.sh"
cd "$(dirname "$0")/../.."
trap 'rm -rf "$D"' EXIT
printf 'zero_stage: 3\nactivation_offload: {policy: offload_all, tier: nvme}\n' > "$D/nvme.yaml"
printf 'zero_stage: 3\nactivation_offload: {policy: whenever}\n' > "$D/bad.yaml"
sed 's/^  nvlink:/  gds: {bandwidth_per_switch: 13 GB\/s}\n  nvlink:/' hwprofiles/h200-node.yaml > "$D/h200-gds.yaml"

"$ZINF" plan --model gpt-tiny --hw cpu-dev --config configs/activation-offload.yaml > "$D/plan.log" 2>&1; rc=$?
expect "zinf plan prints the activation pass's choices" 0 "activation offload \\(lifetime\\): [0-9]+ (segment|tensor)" "$D/plan.log" $rc
"$ZINF" train --model gpt-tiny --hw cpu-dev --config "$D/nvme.yaml" --steps 2 --nvme-dir "$D" > "$D/train.log" 2>&1; rc=$?
expect "zinf train runs activations offloaded to NVMe" 0 "step 2/2" "$D/train.log" $rc
"$ZINF" sim --model gpt2-small --hw "$D/h200-gds.yaml" --config "$D/nvme.yaml" --json > "$D/sim.json" 2> "$D/sim.err"; rc=$?
expect "zinf sim simulates activation offload over GDS" 0 '"samples_per_s"' "$D/sim.json" $rc
"$ZINF" plan --model gpt-tiny --hw cpu-dev --config "$D/bad.yaml" > "$D/bad.log" 2>&1; rc=$?
if [ "$rc" != 0 ] && grep -q "policy" "$D/bad.log" && grep -q "bad.yaml" "$D/bad.log"; then
  pass "a bad activation_offload.policy is refused naming the file and the key"
else
  fail "activation_offload.policy: whenever (exit $rc)" "$D/bad.log"
fi
# simulated_not_trained NAME WHAT KEY CONFIG: `zinf sim` simulates CONFIG; `zinf train` refuses it,
# naming the file and KEY.
simulated_not_trained() {
  local name=$1 what=$2 key=$3 rc
  printf '%s' "$4" > "$D/$name.yaml"
  "$ZINF" sim --model gpt2-small --hw dgx2-v100 --config "$D/$name.yaml" --json > "$D/$name.json" 2> "$D/$name.err"; rc=$?
  expect "zinf sim simulates $what" 0 '"samples_per_s"' "$D/$name.json" $rc
  "$ZINF" train --model gpt-tiny --hw cpu-dev --config "$D/$name.yaml" --steps 1 --nvme-dir "$D" > "$D/$name.log" 2>&1; rc=$?
  if [ "$rc" != 0 ] && grep -q "$name.yaml: $key" "$D/$name.log"; then
    pass "zinf train refuses $what, naming the file and the key"
  else
    fail "zinf train with $key (exit $rc)" "$D/$name.log"
  fi
}
# Two checkpoints per block (Megatron's --split-transformers).
simulated_not_trained split "two checkpoints per block" "activation_checkpoint.per_block 2" \
  $'zero_stage: 3\nactivation_checkpoint: {interval: 1, tier: host, copies: synchronous, per_block: 2}\n'
# DeepSpeed's fp32 host path.
simulated_not_trained dshost "DeepSpeed's host path" "optimizer.host_path deepspeed-0.3" \
  $'zero_stage: 2\noffload: {optimizer: cpu, gradients: cpu}\noptimizer: {host_path: deepspeed-0.3}\n'
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
