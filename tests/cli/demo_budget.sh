#!/usr/bin/env bash
# The demo's training run (scripts/demo.sh --train-args) shows the point of the engine: its model
# states are at least ten times its device budget, and it trains within that budget (the CPU
# backend's arena refuses any allocation past it, which would end the run with an error), and its
# measured memory (device arena, peak RSS) is not over what the plan counts.
# Usage: demo_budget.sh ZINF_BINARY SOURCE_DIR
set -euo pipefail
ZINF=$1
SRC=$2
work=$(mktemp -d /var/tmp/zinf-demo-XXXXXX)
trap 'rm -rf "$work"' EXIT
read -r -a args <<< "$(bash "$SRC/scripts/demo.sh" --train-args)"
device_gib=""
for ((i = 0; i < ${#args[@]}; ++i)); do
  [ "${args[$i]}" = --device-memory ] && device_gib=${args[$((i + 1))]}
done
[ -n "$device_gib" ] || { echo "FAILED: demo.sh --train-args gives no --device-memory"; exit 1; }
mkdir -p "$work/nvme"
if ! "$ZINF" train "${args[@]}" --nvme-dir "$work/nvme" --steps 3 > "$work/log" 2>&1; then
  echo "FAILED: the demo's run does not train within its budget:"; tail -n 5 "$work/log"; exit 1
fi
# "zinf train: gpt-demo (12.7M params) ...": model states are 16 bytes per parameter.
params=$(sed -n 's/^zinf train: [^ ]* (\([0-9.]*[KMBT]\?\) params).*/\1/p' "$work/log" | head -n 1)
python3 - "$params" "$device_gib" <<'PY'
import sys
text, gib = sys.argv[1], float(sys.argv[2])
scale = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}
params = float(text[:-1]) * scale[text[-1]] if text[-1] in scale else float(text)
states, budget = 16 * params, gib * 2**30
ratio = states / budget
print(f"demo: {params / 1e6:.1f}M params, states {states / 1e6:.0f} MB, device budget {budget / 1e6:.1f} MB: {ratio:.1f}x")
sys.exit(0 if ratio >= 10 else 1)
PY
grep "memory per rank" "$work/log"
if grep -q "measured memory is over the plan" "$work/log"; then
  echo "FAILED: the demo's run holds more memory than its plan:"; grep -A1 "memory per rank" "$work/log"; exit 1
fi
