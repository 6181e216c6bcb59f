#!/usr/bin/env bash
# One verdict on the command line: zinf plan prints the Program's verdict (core/fit.hpp) and zinf
# sim and zinf train refuse with the same words, for a run that is short on the device, for
# parameters on NVMe at ZeRO stage 2 and for tensor parallel 2 over 25 heads; and gpt2-xl at
# micro-batch 64 with lifetime activation offload to NVMe, which fits as its Program does, is
# "fits: yes" (the closed form, which says short, is the second view).
# Usage: fit_cli.sh ZINF_BINARY. Prints "N passed, M failed".
set -u
ZINF=$1
D=$(mktemp -d /var/tmp/zinf-fit-XXXXXX)
source "$(dirname "${BASH_SOURCE[0]}")/harness.sh"
cd "$(dirname "$0")/../.."
trap 'rm -rf "$D"' EXIT

# verdict LOG: the text after "fits: NO - " in zinf plan's output.
verdict() { sed -n 's/^fits: NO - //p' "$1" | head -n 1; }
# refusal LOG: the text after "zinf: plan refused: " in a refused command's output.
refusal() { sed -n 's/^zinf: plan refused: //p' "$1" | head -n 1; }

# agree NAME MODEL HW CONFIG [TRAIN_MODEL]: plan's verdict is sim's refusal (and train's, with TRAIN_MODEL).
agree() {
  local name=$1 model=$2 hw=$3 config=$4 train_model=${5:-} rc
  "$ZINF" plan --model "$model" --hw "$hw" --config "$config" > "$D/$name.plan" 2>&1; rc=$?
  local v
  v=$(verdict "$D/$name.plan")
  if [ "$rc" = 0 ] && [ -n "$v" ]; then pass "$name: zinf plan says fits: NO"; else fail "$name: zinf plan (exit $rc)" "$D/$name.plan"; fi
  "$ZINF" sim --model "$model" --hw "$hw" --config "$config" > "$D/$name.sim" 2>&1; rc=$?
  # A refusal for a reason that is not memory reads "refused: <reason>" in plan's verdict.
  if [ "$rc" = 3 ] && { [ "$(refusal "$D/$name.sim")" = "$v" ] || [ "refused: $(refusal "$D/$name.sim")" = "$v" ]; }; then
    pass "$name: zinf sim refuses with plan's words"
  else
    fail "$name: zinf sim (exit $rc) does not say '$v'" "$D/$name.sim"
  fi
  [ -n "$train_model" ] || return 0
  "$ZINF" train --model "$train_model" --hw "$hw" --config "$config" --steps 1 --nvme-dir "$D" > "$D/$name.train" 2>&1; rc=$?
  if [ "$rc" = 3 ] && { [ "$(refusal "$D/$name.train")" = "$v" ] || [ "refused: $(refusal "$D/$name.train")" = "$v" ]; }; then
    pass "$name: zinf train refuses with plan's words"
  else
    fail "$name: zinf train (exit $rc) does not say '$v'" "$D/$name.train"
  fi
}

# Short on the device: gpt-tiny with every activation kept on a 4 MiB device.
sed 's/^\(    memory:\).*\(# the device budget.*\)/\1 4 MiB  \2/' hwprofiles/cpu-dev.yaml > "$D/small.yaml"
printf 'zero_stage: 3\nactivation_checkpoint: {interval: 0}\n' > "$D/short.yaml"
agree short gpt-tiny "$D/small.yaml" "$D/short.yaml" gpt-tiny
if grep -q "device is short by .* per rank .*the largest item is .*: " "$D/short.plan"; then
  pass "the verdict names the tier, the shortfall, the largest item and its knob"
else fail "the short verdict's words" "$D/short.plan"; fi

# Parameters on NVMe at ZeRO stage 2.
printf 'zero_stage: 2\noffload: {params: nvme, optimizer: nvme}\n' > "$D/stage2.yaml"
agree stage2 gpt2-small dgx2-v100 "$D/stage2.yaml" gpt-tiny

# Tensor parallel 2 over 25 heads (gpt2-xl).
printf 'zero_stage: 3\ntensor_parallel: 2\n' > "$D/tp2.yaml"
agree tp25 gpt2-xl dgx2-v100 "$D/tp2.yaml"

# gpt2-xl at micro-batch 64 on one V100, activations offloaded to NVMe by lifetime: it fits.
sed 's/^  gpus: 16/  gpus: 1/' hwprofiles/dgx2-v100.yaml > "$D/v100.yaml"
printf 'zero_stage: 3\nmicro_batch: 64\noffload: {params: cpu, optimizer: cpu}\nactivation_checkpoint: {interval: 0}\nactivation_offload: {policy: lifetime, tier: nvme}\n' > "$D/xl.yaml"
"$ZINF" plan --model gpt2-xl --hw "$D/v100.yaml" --config "$D/xl.yaml" > "$D/xl.plan" 2>&1; rc=$?
if [ "$rc" = 0 ] && grep -q "^fits: yes" "$D/xl.plan" && grep -q "^closed form: device short by" "$D/xl.plan"; then
  pass "gpt2-xl, micro-batch 64, lifetime offload to NVMe: fits: yes (the closed form's shortfall is the second view)"
else fail "gpt2-xl micro-batch 64 with lifetime offload (exit $rc)" "$D/xl.plan"; fi
"$ZINF" plan --model gpt2-xl --hw "$D/v100.yaml" --config "$D/xl.yaml" --json > "$D/xl.json" 2> "$D/xl.err"; rc=$?
if [ "$rc" = 0 ] && /usr/bin/python3 - "$D/xl.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["fits"] and j["fit"]["verdict"] == "fits", j["fit"]
dev = j["memory"]["device"]
assert abs(sum(i["bytes"] for i in dev["items"]) - dev["peak"]) <= 1e-6 * dev["peak"] and dev["peak"] <= dev["budget"], dev
assert any(i["category"] == "activations offloaded" for i in j["memory"]["nvme"]["items"]), j["memory"]["nvme"]
assert not j["closed_form"]["fits"] and j["closed_form"]["short"]["tier"] == "device", j["closed_form"]
assert any(d["category"] == "activations kept" and d["program_less_closed_form"]["device_per_gpu"] < 0 for d in j["difference"])
PY
then pass "zinf plan --json carries the Program's accounting, the verdict, the closed form and the difference"
else fail "zinf plan --json (exit $rc)" "$D/xl.err"; fi
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
