#!/usr/bin/env bash
# `zinf sample` end to end: a tiny model trained on a repeated phrase continues it, greedy output is
# the same from the exported weights, from the checkpoint, and with the weights on NVMe; a seed
# repeats a draw; mistakes are refused by name.
#   bash tests/cli/sample_cli.sh ZINF
set -u
ZINF=$1
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
. "$(dirname "$0")/harness.sh"
mkdir -p "$D/nvme"
for _ in $(seq 1 400); do printf 'the zinf engine trains. '; done > "$D/phrase.txt"
printf 'zero_stage: 3\noffload: {params: none, optimizer: none}\noptimizer: {lr: 3.0e-3}\n' > "$D/fast.yaml"

"$ZINF" train --model gpt-tiny --hw cpu-dev --config "$D/fast.yaml" --data "$D/phrase.txt" --val-fraction 0.1 --steps 150 \
  --checkpoint-dir "$D/ck" --checkpoint-every 150 --export "$D/tiny.safetensors" > "$D/train.log" 2>&1; rc=$?
expect "train gpt-tiny on a repeated phrase" 0 "" "$D/train.log" $rc

"$ZINF" sample --weights "$D/tiny.safetensors" --model gpt-tiny --prompt "the zinf en" --tokens 40 --temperature 0 \
  > "$D/greedy.txt" 2> "$D/greedy.err"; rc=$?
expect "greedy sampling from exported weights continues the phrase" 0 "^the zinf engine trains\. the zinf engine trains\." "$D/greedy.txt" $rc
"$ZINF" sample --checkpoint "$D/ck" --prompt "the zinf en" --tokens 40 --temperature 0 > "$D/ck.txt" 2> "$D/ck.err"; rc=$?
expect "sampling from the checkpoint (its model read from it)" 0 "" "$D/ck.err" $rc
[ ! -s "$D/ck.err" ] && pass "sampling from a checkpoint says nothing about training it will not do" \
  || fail "sampling from the checkpoint wrote to stderr" "$D/ck.err"
cmp -s "$D/greedy.txt" "$D/ck.txt" && pass "greedy text from the checkpoint equals the exported weights'" \
  || fail "greedy text differs between checkpoint and weights" "$D/ck.txt"
"$ZINF" sample --weights "$D/tiny.safetensors" --model gpt-tiny --config train-nvme --nvme-dir "$D/nvme" \
  --prompt "the zinf en" --tokens 40 --temperature 0 > "$D/nvme.txt" 2> "$D/nvme.err"; rc=$?
expect "sampling with the weights on NVMe" 0 "" "$D/nvme.err" $rc
cmp -s "$D/greedy.txt" "$D/nvme.txt" && pass "greedy text through NVMe equals the in-memory one" \
  || fail "greedy text through NVMe differs" "$D/nvme.txt"

for run in a b; do
  "$ZINF" sample --weights "$D/tiny.safetensors" --model gpt-tiny --prompt "the" --tokens 30 --temperature 1.5 --seed 7 \
    > "$D/seed-$run.txt" 2>&1
done
cmp -s "$D/seed-a.txt" "$D/seed-b.txt" && pass "a seed repeats its draws" || fail "the same seed drew differently" "$D/seed-b.txt"

# BPE: a tokenizer whose 256 byte tokens are numbered backwards (no merges), so ids are not bytes;
# a model trained through it samples the phrase back only when sampling decodes through it too.
mkdir -p "$D/bpe"
/usr/bin/python3 - "$D/bpe" "$(dirname "$0")/.." <<'PY'
import json, sys
sys.path.insert(0, sys.argv[2])
from gpt2_bytes import byte_char_table  # GPT-2's byte-to-symbol table, as the tokenizer tests build it
symbol = byte_char_table()
json.dump({symbol[b]: 255 - b for b in range(256)}, open(sys.argv[1] + "/vocab.json", "w"))
open(sys.argv[1] + "/merges.txt", "w").write("#version: 0.2\n")
PY
"$ZINF" train --model gpt-tiny --hw cpu-dev --config "$D/fast.yaml" --data "$D/phrase.txt" --tokenizer "$D/bpe" --steps 150 \
  --export "$D/bpe.safetensors" > "$D/bpe-train.log" 2>&1; rc=$?
expect "train through a BPE tokenizer" 0 "" "$D/bpe-train.log" $rc
"$ZINF" sample --weights "$D/bpe.safetensors" --model gpt-tiny --tokenizer "$D/bpe" --prompt "the zinf en" --tokens 40 \
  --temperature 0 > "$D/bpe.txt" 2> "$D/bpe.err"; rc=$?
expect "sampling through the tokenizer continues the phrase" 0 "^the zinf engine trains\. the zinf engine trains\." "$D/bpe.txt" $rc

"$ZINF" sample --weights "$D/tiny.safetensors" --checkpoint "$D/ck" --prompt x > "$D/both.log" 2>&1; rc=$?
expect "--weights and --checkpoint together are refused" 1 "one of them" "$D/both.log" $rc
"$ZINF" sample --weights "$D/tiny.safetensors" --prompt x > "$D/nomodel.log" 2>&1; rc=$?
expect "--weights without --model is refused" 1 "needs --model" "$D/nomodel.log" $rc
"$ZINF" sample --checkpoint "$D/nowhere" --prompt x > "$D/nock.log" 2>&1; rc=$?
expect "a missing checkpoint directory is refused naming it" 1 "nowhere" "$D/nock.log" $rc
"$ZINF" sample --weights "$D/tiny.safetensors" --model gpt-mini --prompt x > "$D/shape.log" 2>&1; rc=$?
expect "weights of another model shape are refused" 1 "tiny.safetensors" "$D/shape.log" $rc

echo "sample cli: $PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
