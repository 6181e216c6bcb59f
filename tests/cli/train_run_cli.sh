#!/usr/bin/env bash
# A training run as people run one, end to end through `zinf`: a learning-rate schedule from the
# run config (zinf's, and DeepSpeed's `scheduler` section) that `zinf plan --json` reports, a
# --metrics record that a resumed run appends to, its plot, and the schedule's errors.
#   bash tests/cli/train_run_cli.sh ZINF SOURCE_DIR
set -u
ZINF=$1
SRC=$2
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
. "$(dirname "$0")/harness.sh"
mkdir -p "$D/nvme"

printf 'zero_stage: 3\noffload: {params: cpu, optimizer: cpu}\noptimizer: {lr: 2.0e-3}\nlr_schedule: {warmup_steps: 2, decay: cosine, decay_steps: 5, min_lr_ratio: 0.1}\n' > "$D/run.yaml"
"$ZINF" plan --model gpt-tiny --hw cpu-dev --config "$D/run.yaml" --json > "$D/plan.json" 2> "$D/plan.err"; rc=$?
expect "plan --json runs" 0 "" "$D/plan.err" $rc
/usr/bin/python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["config"]["lr_schedule"]; assert s=={"type":"warmup","warmup_steps":2,"decay":"cosine","decay_steps":5,"min_lr_ratio":0.1}, s' "$D/plan.json" > "$D/check.log" 2>&1; rc=$?
expect "plan --json reports the schedule" 0 "" "$D/check.log" $rc

"$ZINF" train --model gpt-tiny --hw cpu-dev --config "$D/run.yaml" --nvme-dir "$D/nvme" --steps 5 \
  --metrics "$D/straight.jsonl" > "$D/a.log" 2>&1; rc=$?
expect "train with a schedule and --metrics" 0 "lr schedule: warmup 2 steps, cosine decay" "$D/a.log" $rc
/usr/bin/python3 - "$D/straight.jsonl" > "$D/check.log" 2>&1 <<'PY'; rc=$?
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["step"] for r in rows] == [1, 2, 3, 4, 5], rows
lr = [r["lr"] for r in rows]
assert abs(lr[0] - 1e-3) < 1e-12 and abs(lr[1] - 2e-3) < 1e-12 and abs(lr[4] - 2e-4) < 1e-12, lr
for r in rows:
    for k in ("loss", "grad_norm", "tokens_per_s", "step_seconds"):
        assert r[k] > 0, (k, r)
    assert r["lane_busy_seconds"]["compute"] > 0 and r["peak_bytes"]["device"] > 0, r
PY
expect "one metrics line per step: the warmup, the cosine's floor at the last step" 0 "" "$D/check.log" $rc

# Three steps, a checkpoint, then resumed to five: the record is appended to, and the resumed steps
# run at the rates and give the losses of the straight run, bit for bit.
"$ZINF" train --model gpt-tiny --hw cpu-dev --config "$D/run.yaml" --nvme-dir "$D/nvme" --steps 3 \
  --checkpoint-dir "$D/ck" --metrics "$D/m.jsonl" > "$D/b.log" 2>&1; rc=$?
expect "three steps and a checkpoint" 0 "checkpoint:" "$D/b.log" $rc
"$ZINF" train --model gpt-tiny --hw cpu-dev --config "$D/run.yaml" --nvme-dir "$D/nvme" --steps 5 \
  --checkpoint-dir "$D/ck" --resume --metrics "$D/m.jsonl" > "$D/c.log" 2>&1; rc=$?
expect "resumed run" 0 "resumed at step 3" "$D/c.log" $rc
/usr/bin/python3 - "$D/m.jsonl" "$D/straight.jsonl" > "$D/check.log" 2>&1 <<'PY'; rc=$?
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
straight = [json.loads(l) for l in open(sys.argv[2])]
assert [r["step"] for r in rows] == [1, 2, 3, 4, 5], [r["step"] for r in rows]
for r, s in zip(rows, straight):
    assert r["lr"] == s["lr"] and r["loss"] == s["loss"], (r["step"], r["lr"], s["lr"], r["loss"], s["loss"])
PY
expect "a resumed run appends, continuing the schedule and the losses bit for bit" 0 "" "$D/check.log" $rc
/usr/bin/python3 "$SRC/analysis/train_report.py" "$D/m.jsonl" --out "$D/m.png" > "$D/report.log" 2>&1; rc=$?
expect "train_report.py plots the record" 0 "steps 1-5" "$D/report.log" $rc
[ -s "$D/m.png" ] && pass "the plot is written" || fail "no $D/m.png"

# DeepSpeed's scheduler section, and its mistakes.
cat > "$D/ds.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": true}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
 "zero_optimization": {"stage": 3},
 "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_max_lr": "auto", "warmup_num_steps": 2, "total_num_steps": "auto", "warmup_type": "linear"}}}
JSON
"$ZINF" train --model gpt-tiny --hw cpu-dev --config "$D/ds.json" --nvme-dir "$D/nvme" --steps 4 --metrics "$D/ds.jsonl" > "$D/ds.log" 2>&1; rc=$?
expect "train with DeepSpeed's WarmupDecayLR" 0 "DeepSpeed WarmupDecayLR" "$D/ds.log" $rc
if grep -q "scheduler.*not supported" "$D/ds.log"; then fail "the scheduler section is named unsupported" "$D/ds.log"; else pass "no unsupported-key warning for scheduler"; fi
/usr/bin/python3 -c 'import json,sys; lr=[json.loads(l)["lr"] for l in open(sys.argv[1])]; assert lr==[0.0,0.0,0.0005,0.001], lr' "$D/ds.jsonl" > "$D/check.log" 2>&1; rc=$?
expect "DeepSpeed's step timing: min, min, then the linear warmup" 0 "" "$D/check.log" $rc
# DeepSpeed's precisions: neither fp16 nor bf16 is fp32; fp16 with its dynamic loss scale, whose
# overflowing first steps (2^32 overflows a half) are skipped, shown and counted.
printf '{"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3}}\n' > "$D/fp32.json"
"$ZINF" train --model gpt-tiny --hw cpu-dev --config "$D/fp32.json" --nvme-dir "$D/nvme" --steps 2 > "$D/fp32.log" 2>&1; rc=$?
expect "a DeepSpeed config with neither fp16 nor bf16 trains in fp32" 0 "step 2/2" "$D/fp32.log" $rc
printf '{"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3}, "fp16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 32, "hysteresis": 1}}\n' > "$D/fp16.json"
"$ZINF" train --model gpt-tiny --hw cpu-dev --config "$D/fp16.json" --nvme-dir "$D/nvme" --steps 4 > "$D/fp16.log" 2>&1; rc=$?
expect "fp16 with a dynamic loss scale trains, skipping the steps that overflow" 0 "fp16: [1-9][0-9]* of 4 steps skipped" "$D/fp16.log" $rc
expect "an overflowing fp16 step says the scale it falls to" 0 "step 1: fp16 overflow: step skipped; loss scale 4.29497e\\+09 -> 2.14748e\\+09" "$D/fp16.log" $rc
sed 's/"WarmupDecayLR"/"StepLR"/' "$D/ds.json" > "$D/bad.json"
"$ZINF" train --model gpt-tiny --hw cpu-dev --config "$D/bad.json" --nvme-dir "$D/nvme" --steps 1 > "$D/bad.log" 2>&1; rc=$?
expect "an unknown scheduler type is a config error naming it" 2 "scheduler.type.*StepLR" "$D/bad.log" $rc
printf 'lr_schedule: {warmup_steps: 8, decay_steps: 8}\n' > "$D/short.yaml"
"$ZINF" train --model gpt-tiny --hw cpu-dev --config "$D/short.yaml" --nvme-dir "$D/nvme" --steps 8 > "$D/short.log" 2>&1; rc=$?
expect "a decay that ends before its warmup is refused naming the key" 1 "decay_steps" "$D/short.log" $rc
"$ZINF" train --model gpt-tiny --hw cpu-dev --config "$D/run.yaml" --nvme-dir "$D/nvme" --steps 1 --metrics "$D/no/such/dir/m.jsonl" > "$D/m.log" 2>&1; rc=$?
expect "an unwritable --metrics path is refused before training" 1 "--metrics.*(cannot open|does not exist)" "$D/m.log" $rc

# A held-out split: the tail of the data (--val-fraction, the default with --eval-every) or a file of
# its own (--val-data); evaluated every N steps and at the end, recorded and plotted.
"$ZINF" train --model gpt-tiny --hw cpu-dev --config "$D/run.yaml" --nvme-dir "$D/nvme" --steps 4 --eval-every 2 \
  --eval-batches 3 --metrics "$D/eval.jsonl" > "$D/eval.log" 2>&1; rc=$?
expect "train with --eval-every" 0 "held-out loss [0-9.]+ \(perplexity [0-9.]+\) at step 4: 3 micro-batches" "$D/eval.log" $rc
/usr/bin/python3 -c 'import json,sys; e=[json.loads(l) for l in open(sys.argv[1])]; e=[r for r in e if r["kind"]=="eval"]; assert [r["step"] for r in e]==[2,4] and all(r["loss"]>0 and r["batches"]==3 for r in e), e' "$D/eval.jsonl" > "$D/check.log" 2>&1; rc=$?
expect "one eval record per evaluation: every 2 steps and at the end, not twice at the last" 0 "" "$D/check.log" $rc
/usr/bin/python3 "$SRC/analysis/train_report.py" "$D/eval.jsonl" --out "$D/eval.png" > "$D/report.log" 2>&1; rc=$?
expect "train_report.py plots train and held-out loss" 0 "" "$D/report.log" $rc
head -c 20000 "$SRC/README.md" > "$D/val.txt"
"$ZINF" train --model gpt-tiny --hw cpu-dev --config "$D/run.yaml" --nvme-dir "$D/nvme" --steps 2 --val-data "$D/val.txt" \
  > "$D/val.log" 2>&1; rc=$?
expect "--val-data alone evaluates at the end" 0 "held-out loss [0-9.]+ .*at step 2" "$D/val.log" $rc
"$ZINF" train --model gpt-tiny --hw cpu-dev --config "$D/run.yaml" --nvme-dir "$D/nvme" --steps 2 --val-data "$D/val.txt" \
  --val-fraction 0.1 > "$D/both.log" 2>&1; rc=$?
expect "--val-data and --val-fraction together are refused" 1 "choose one" "$D/both.log" $rc
printf 'tiny' > "$D/tiny.txt"
"$ZINF" train --model gpt-tiny --hw cpu-dev --config "$D/run.yaml" --nvme-dir "$D/nvme" --steps 2 --val-data "$D/tiny.txt" \
  > "$D/tiny.log" 2>&1; rc=$?
expect "held-out data shorter than one window is refused naming it" 1 "tiny.txt" "$D/tiny.log" $rc

echo "train run cli: $PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
