#!/usr/bin/env bash
# `auto` in a run config (tune/auto_config.hpp) is decided once, in closed form and by the planner,
# for every command: zinf plan, sim and train agree on it and say how it was chosen; zinf tune
# simulates that choice beside its finalists, so its pick is never slower.
#   bash tests/cli/auto_cli.sh ZINF
set -u
ZINF=$1
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
. "$(dirname "$0")/harness.sh"

# gpt-100b on one DGX-2: neither parameters nor optimizer states fit on the devices, so the tiers matter.
printf 'zero_stage: 3\noffload: {params: auto, optimizer: auto}\nactivation_checkpoint: {interval: 1, tier: host}\n' > "$D/auto.yaml"
"$ZINF" sim --model gpt-100b --hw dgx2-v100 --config "$D/auto.yaml" --json > "$D/sim.json" 2> "$D/sim.err"; rc=$?
expect "zinf sim resolves auto" 0 "" "$D/sim.err" $rc
choice=$(/usr/bin/python3 -c '
import json, re, sys
a = json.load(open(sys.argv[1]))["auto"]
m = re.match(r"auto, by the closed form: (.*) — ", a)
print(m.group(1) if m else "")' "$D/sim.json" 2> /dev/null)
if [ -n "$choice" ]; then pass "zinf sim says what auto chose ($choice)"; else fail "zinf sim's auto line" "$D/sim.json"; fi

# zinf plan decides the same, and prints it as the config it plans.
"$ZINF" plan --model gpt-100b --hw dgx2-v100 --config "$D/auto.yaml" --json > "$D/plan.json" 2> "$D/plan.err"; rc=$?
if [ $rc = 0 ] && /usr/bin/python3 - "$D/plan.json" "$choice" <<'PY'
import json, sys
j, choice = json.load(open(sys.argv[1])), sys.argv[2]
c = j["config"]
assert f"params {c['params']}, gradients {c['gradients']}, optimizer {c['optimizer']}" == choice, (c, choice)
assert j["auto"].startswith(f"auto, by the closed form: {choice} — "), j["auto"]
assert j["fits"], j["fit"]
PY
then pass "zinf plan plans what zinf sim simulated"
else fail "zinf plan's auto differs from zinf sim's (exit $rc)" "$D/plan.json"; fi

# zinf tune simulates plan's choice beside its finalists: its pick is never slower.
"$ZINF" tune --model gpt-100b --hw dgx2-v100 --config "$D/auto.yaml" --json --yaml "" --deepspeed "" --finalists 1 \
  --plan-budget 4 > "$D/tune.json" 2> "$D/tune.err"; rc=$?
if [ $rc = 0 ] && /usr/bin/python3 - "$D/tune.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
f = j["finalists"]
mine = [e for e in f if e["found_by"] == "the base config, as zinf plan resolves it"]
assert f and f[0]["score"] <= min([e["score"] for e in f]) + 1e-12, f
assert all(f[0]["score"] <= e["score"] for e in mine), (f[0], mine)
PY
then pass "zinf tune's pick is never slower than what zinf plan resolves"
else fail "zinf tune beside plan's choice (exit $rc)" "$D/tune.err"; fi

# zinf train decides auto the same way before it plans, and trains what it chose.
printf 'zero_stage: 3\noffload: {params: auto, optimizer: auto}\nactivation_checkpoint: {interval: 1, tier: auto}\ntiling_factor: auto\n' > "$D/train-auto.yaml"
mkdir -p "$D/nvme"
"$ZINF" train --model gpt-tiny --config "$D/train-auto.yaml" --steps 2 --nvme-dir "$D/nvme" --device-memory 0.004 > "$D/train.log" 2>&1; rc=$?
expect "zinf train resolves auto in closed form and trains" 0 "zinf train: auto, by the closed form: params .*, optimizer .*, checkpoints .*, tiling [0-9]+ —" "$D/train.log" $rc
choice=$(sed -n "s/.*auto, by the closed form: \(.*\) — .*/\1/p" "$D/train.log" | head -1)
if [ -n "$choice" ] && grep -qF "cpu backend | $choice," "$D/train.log"; then pass "zinf train plans what auto chose ($choice)"
else fail "zinf train's plan is not auto's choice '$choice'" "$D/train.log"; fi

echo "auto cli: $PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
