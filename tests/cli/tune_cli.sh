#!/usr/bin/env bash
# End-to-end tests of `zinf tune` as a user runs it: the ranked table, the configs it writes (read
# back by plan, sim and train's readers), --json, determinism, the refusal when nothing fits, and a
# progress bar only on a terminal. Usage: tune_cli.sh ZINF_BINARY. Prints "N passed, M failed".
set -u
ZINF=$1
D=$(mktemp -d /var/tmp/zinf-tune-XXXXXX)
source "$(dirname "${BASH_SOURCE[0]}")/harness.sh"
cd "$(dirname "$0")/../.."
trap 'rm -rf "$D"' EXIT
TINY=(--model gpt-tiny --hw cpu-dev --config infinity-nvme --plan-budget 6 --finalists 2)

"$ZINF" tune "${TINY[@]}" --yaml "$D/t.yaml" --deepspeed "$D/t.json" > "$D/table.log" 2> "$D/table.err"; rc=$?
expect "tune prints the ranked table" 0 "^1 +[0-9.e+]+ " "$D/table.log" $rc
expect "each finalist's bottleneck lane" 0 "#1: busiest lane [a-z_0-9]+ \([0-9]+% of the step\)" "$D/table.log" $rc
expect "what was not searched" 0 "tensor parallelism" "$D/table.log" $rc
expect "the time spent" 0 "^time: [0-9.]+ s" "$D/table.log" $rc
if grep -q $'\r' "$D/table.err"; then fail "a progress bar on a stderr that is no terminal" "$D/table.err"; else pass "no progress bar without a terminal"; fi

"$ZINF" plan --model gpt-tiny --hw cpu-dev --config "$D/t.yaml" > "$D/plan.log" 2>&1; rc=$?
expect "zinf plan reads the YAML tune wrote" 0 "fits: yes" "$D/plan.log" $rc
"$ZINF" sim --model gpt-tiny --hw cpu-dev --config "$D/t.yaml" > "$D/sim.log" 2>&1; rc=$?
expect "zinf sim reads the YAML tune wrote" 0 "step time" "$D/sim.log" $rc
"$ZINF" plan --model gpt-tiny --hw cpu-dev --config "$D/t.json" > "$D/plands.log" 2>&1; rc=$?
expect "zinf plan reads the DeepSpeed JSON tune wrote" 0 "fits: yes" "$D/plands.log" $rc
if grep -q "warning" "$D/plands.log"; then fail "DeepSpeed keys zinf does not read" "$D/plands.log"; else pass "every DeepSpeed key written is read"; fi
# The simulated step of the best, as the table says, is what zinf sim says of the written YAML.
best=$(awk '$1 == "1" {print $4, $5; exit}' "$D/table.log")
simstep=$(sed -n 's/^step time *\([0-9.]* [a-zµ]*s\).*/\1/p' "$D/sim.log")
[ "$best" = "$simstep" ] && pass "the table's step is zinf sim's ($best)" || fail "table says '$best', zinf sim '$simstep'" "$D/sim.log"

# The DeepSpeed config tune writes, read back by zinf sim, simulates within 1 % of the step tune printed
# for it: from a zinf base, an HF "auto" base, a base whose best finalist DeepSpeed cannot express
# (AutoTP with stage 3) and a ZeRO-Offload recipe on two nodes.
DS=tests/data/deepspeed
for base in "gpt-tiny cpu-dev 1 infinity-nvme" "gpt2-small dgx-a100 1 $DS/accelerate/zero_stage3_offload_config.json" \
            "gpt2-small dgx2-v100 2 $DS/llama-factory/ds_z3_offload_config.json" \
            "gpt-tiny dgx-a100 2 $DS/deepspeedexamples/ds_zero-offload_10B_config.json"; do
  read -r m hw n cfg <<< "$base"
  "$ZINF" tune --model "$m" --hw "$hw" --nodes "$n" --config "$cfg" --plan-budget 6 --finalists 2 --yaml "" \
    --deepspeed "$D/rt.json" > "$D/rt.log" 2>&1; rc=$?
  "$ZINF" sim --model "$m" --hw "$hw" --nodes "$n" --config "$D/rt.json" > "$D/rtsim.log" 2>&1; rc2=$?
  if [ $rc = 0 ] && [ $rc2 = 0 ] && /usr/bin/python3 - "$D/rt.log" "$D/rtsim.log" <<'PY'
import re, sys
unit = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "min": 60.0, "h": 3600.0}
tuned = re.search(r"wrote .*DeepSpeed .*step ([0-9.]+) ([a-zµ]+)\)", open(sys.argv[1]).read())
sim = re.search(r"^step time +([0-9.]+) ([a-zµ]+)", open(sys.argv[2]).read(), re.M)
assert tuned and sim, "both steps printed"
a, b = float(tuned[1]) * unit[tuned[2]], float(sim[1]) * unit[sim[2]]
assert abs(b / a - 1) <= 0.01, f"tune printed {a} s, zinf sim {b} s"
PY
  then pass "tune --deepspeed round-trips within 1 % ($m, $hw x $n, $(basename "$cfg"))"
  else fail "tune --deepspeed round trip ($m, $hw x $n, $(basename "$cfg"); exit $rc, $rc2)" "$D/rt.log"; cat "$D/rtsim.log" >&2; fi
done

"$ZINF" tune "${TINY[@]}" --json --yaml "" --deepspeed "" > "$D/a.json" 2>/dev/null; rc1=$?
"$ZINF" tune "${TINY[@]}" --json --yaml "" --deepspeed "" > "$D/b.json" 2>/dev/null; rc2=$?
if [ $rc1 = 0 ] && [ $rc2 = 0 ] && /usr/bin/python3 - "$D/a.json" "$D/b.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for j in (a, b):
    j.pop("seconds")
    assert j["finalists"] and j["planned"], "finalists and planned candidates"
    assert all("peak" in p["planned"] for p in j["planned"]), "peak memory per tier of each planned candidate"
assert a == b, "two runs differ"
PY
then pass "--json: deterministic, with finalists and every planned candidate"; else fail "--json runs (exit $rc1, $rc2)"; fi

"$ZINF" tune --model gpt-tiny --hw dgx2-v100 --nodes 2 --config zero3 --global-batch 64 --objective cost \
  --plan-budget 4 --finalists 2 --yaml "" --deepspeed "" > "$D/cost.log" 2>&1; rc=$?
expect "--objective cost: ranked by GPU-seconds per sample, node count shown" 0 "nodes +GPU-s/smpl" "$D/cost.log" $rc
expect "--objective cost: the finalists compared per sample" 0 "#1: .*cheaper per sample than #2" "$D/cost.log" $rc

"$ZINF" tune --model gpt-1t --hw cpu-dev --config infinity-nvme --plan-budget 2 > "$D/nofit.log" 2>&1; rc=$?
expect "nothing fits: refused with the short tier" 3 "no configuration of gpt-1t .* short by" "$D/nofit.log" $rc
"$ZINF" tune --model gpt-tiny --hw dgx2-v100 --global-batch 17 --yaml "" --deepspeed "" > "$D/batch.log" 2>&1; rc=$?
expect "a global batch the ranks cannot split" 1 "global batch 17 cannot be split" "$D/batch.log" $rc

# `auto` in a run config: zinf plan reports the tiling factor and tiers of the Program it writes.
"$ZINF" plan --model gpt-1t --hw dgx2-v100 --nodes 32 --config experiments/paper/configs/infinity-512.yaml \
  --program "$D/p.json" > "$D/auto.log" 2>&1; rc=$?
reported=$(sed -n 's/.*tiling auto -> \([0-9]*\).*/\1/p' "$D/auto.log")
written=$(sed -n 's/^program: .* tiling \([0-9]*\);.*/\1/p' "$D/auto.log")
if [ $rc = 0 ] && [ -n "$reported" ] && [ "$reported" = "$written" ] && grep -q "auto, by the closed form" "$D/auto.log"; then
  pass "plan reports the auto tiling of the Program it writes ($reported)"
else fail "plan reports tiling '$reported', its Program has '$written' (exit $rc)" "$D/auto.log"; fi

if command -v script > /dev/null; then
  script -qec "$ZINF tune ${TINY[*]} --yaml '' --deepspeed '' > $D/tty.out" /dev/null > "$D/tty.log" 2>&1
  if grep -q "plan *\[#" "$D/tty.log"; then pass "a progress bar on a terminal"; else fail "no progress bar on a terminal" "$D/tty.log"; fi
fi

echo "tune cli: $PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
