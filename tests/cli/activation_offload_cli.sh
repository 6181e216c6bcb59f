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
# Two checkpoints per block (Megatron's --split-transformers) are simulated; the engine refuses them by name.
printf 'zero_stage: 3\nactivation_checkpoint: {interval: 1, tier: host, copies: synchronous, per_block: 2}\n' > "$D/split.yaml"
"$ZINF" sim --model gpt2-small --hw dgx2-v100 --config "$D/split.yaml" --json > "$D/split.json" 2> "$D/split.err"; rc=$?
expect "zinf sim simulates two checkpoints per block" 0 '"samples_per_s"' "$D/split.json" $rc
"$ZINF" train --model gpt-tiny --hw cpu-dev --config "$D/split.yaml" --steps 1 --nvme-dir "$D" > "$D/split.log" 2>&1; rc=$?
if [ "$rc" != 0 ] && grep -q "split.yaml: activation_checkpoint.per_block 2" "$D/split.log"; then
  pass "zinf train refuses two checkpoints per block, naming the file and the key"
else
  fail "zinf train with activation_checkpoint.per_block 2 (exit $rc)" "$D/split.log"
fi
# DeepSpeed's fp32 host path is simulated; the engine refuses it by name.
printf 'zero_stage: 2\noffload: {optimizer: cpu, gradients: cpu}\noptimizer: {host_path: deepspeed-0.3}\n' > "$D/dshost.yaml"
"$ZINF" sim --model gpt2-small --hw dgx2-v100 --config "$D/dshost.yaml" --json > "$D/dshost.json" 2> "$D/dshost.err"; rc=$?
expect "zinf sim simulates DeepSpeed's host path" 0 '"samples_per_s"' "$D/dshost.json" $rc
"$ZINF" train --model gpt-tiny --hw cpu-dev --config "$D/dshost.yaml" --steps 1 --nvme-dir "$D" > "$D/dshost.log" 2>&1; rc=$?
if [ "$rc" != 0 ] && grep -q "dshost.yaml: optimizer.host_path deepspeed-0.3" "$D/dshost.log"; then
  pass "zinf train refuses DeepSpeed's host path, naming the file and the key"
else
  fail "zinf train with optimizer.host_path deepspeed-0.3 (exit $rc)" "$D/dshost.log"
fi
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
