#!/usr/bin/env bash
# Hugging Face config.json on the command line: zinf plan reads a model's folder and its file and
# prints the exact parameters, total and active per token; zinf sim gives a Llama and a Mixtral a
# step time; a --seq past OPT's learned positions and zinf train of a Llama are refused, naming why.
# Usage: hf_models_cli.sh ZINF_BINARY. Prints "N passed, M failed".
set -u
ZINF=$1
D=$(mktemp -d /var/tmp/zinf-hf-XXXXXX)
source "$(dirname "${BASH_SOURCE[0]}")/harness.sh"
cd "$(dirname "$0")/../.."
trap 'rm -rf "$D"' EXIT
HF=tests/data/hf

"$ZINF" plan --model $HF/mixtral-8x7b-v0.1 --hw dgx-h100 --config zero3 --seq 2048 > "$D/plan" 2>&1
expect "plan of a folder: Mixtral's total and active parameters" 0 \
  "^parameters: 46702792704 total, 12879925248 active per token .*mixtral architecture, 8 experts of which 2" "$D/plan" $?
"$ZINF" plan --model $HF/llama-3.1-70b/config.json --hw dgx-h100 \
  --config tests/data/deepspeed/llama-factory/ds_z3_offload_config.json --json > "$D/json" 2>/dev/null
expect "plan --json of a config.json: Llama-3.1-70B's count" 0 '"total_params": ?70553706496' "$D/json" $?
"$ZINF" sim --model $HF/llama-3.1-8b --hw dgx-h100 --config infinity-cpu --seq 2048 > "$D/sim-llama" 2>&1
expect "sim of Llama-3.1-8B gives a step time" 0 "^step time +[0-9.]+ (ms|s)" "$D/sim-llama" $?
"$ZINF" sim --model $HF/mixtral-8x7b-v0.1 --hw dgx-h100 --config infinity-cpu --seq 2048 > "$D/sim-mixtral" 2>&1
expect "sim of Mixtral-8x7B gives a step time" 0 "^step time +[0-9.]+ (ms|s)" "$D/sim-mixtral" $?
"$ZINF" plan --model $HF/opt-1.3b --hw dgx-h100 --config zero3 --seq 4096 > "$D/opt" 2>&1
expect "a seq past OPT's learned positions is the plan's refusal" 0 "refused: seq 4096 is longer than the 2048 learned positions" "$D/opt" $?
"$ZINF" train --model $HF/mixtral-8x7b-v0.1 --hw cpu-dev --config demo > "$D/train" 2>&1
expect "zinf train refuses a Mixtral, naming its file" 2 "mixtral-8x7b-v0.1/config.json: key 'architecture': zinf train runs the GPT-2 and Llama architectures only" "$D/train" $?
"$ZINF" train --model $HF/llama-3.1-8b --hw cpu-dev --config demo > "$D/train-scaled" 2>&1
expect "zinf train refuses Llama 3.1's scaled rope, naming the key" 2 "llama-3.1-8b/config.json: key 'rope_scaling': zinf train: the engine's Llama has no kernels for rope_scaling 'llama3'" "$D/train-scaled" $?
# LLaMA-33B with stanford_alpaca's ZeRO-3 offload config on 8 A100s: DeepSpeed's own host allocation
# (20 bytes a parameter: bf16 parameters and gradients, fp32 gradients, master, m and v) beside zinf's 16.
"$ZINF" plan --model $HF/llama-33b --hw dgx-a100 --config tests/data/deepspeed/alpaca/default_offload_opt_param.json \
  --seq 2048 > "$D/ds-own" 2>/dev/null
expect "plan of a DeepSpeed offload config: DeepSpeed's own host model states" 0 \
  "^  model states 651 GB: zinf's 520 GB and the fp32 gradient partition" "$D/ds-own" $?
"$ZINF" plan --model $HF/llama-33b --hw dgx-a100 --config tests/data/deepspeed/alpaca/default_offload_opt_param.json \
  --seq 2048 --json 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)["deepspeed_own"]
sys.exit(0 if d["model_states"]["host_per_node"] == 20 * 32528943616 and d["host_path"] == "deepspeed-0.9" else 1)'
expect "plan --json: deepspeed_own holds 20 bytes a parameter on the host" 0 "" /dev/null $?
"$ZINF" plan --model $HF > "$D/folder" 2>&1
expect "a folder without config.json is refused" 2 "holding no config.json" "$D/folder" $?

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
