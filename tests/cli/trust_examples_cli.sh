#!/usr/bin/env bash
# The hostile and unlucky examples the trust work set out to close, each as its own case against the
# zinf binary: unbounded reads (--config on a FIFO, /dev/zero, /dev/urandom, a 100 GB sparse file, a
# directory; a sweep's huge CSV), unsafe writes (outputs onto a device node or a FIFO, links planted
# at <out>.tmp and <out>.partial, profile-hw's and io-bench's scratch beside links planted in
# $TMPDIR, a full disk, an export into a missing directory), hostile files (safetensors shapes that
# overflow, a tokenizer id near 2^31, DeepSpeed numbers of 1e400), counts that run away (a spec of
# 10^9 points, --nodes x GPUs, validate --ranks), and commands that write and stop (two sweeps on one
# CSV, validate stopped by a signal, tune with its default outputs).
#
# Each case runs in a fresh directory of its own, with HOME and TMPDIR inside it, under `timeout`,
# and asserts the README's exit code for its class, a message naming the flag, field or file, and
# that nothing in the directory but the case's named outputs changed (TMPDIR left empty). Nothing
# here can harm the machine: device nodes are made with mknod in the case directory (as root only;
# else those cases say why they are skipped), and a full disk is a 4 KiB tmpfs mounted there (as
# root, where mount works; else /dev/full, which the writer refuses as a device).
# Usage: trust_examples_cli.sh ZINF_BINARY. Prints "N passed, M failed".
set -u
ZINF=$(readlink -f "$1")
ROOT=$(mktemp -d /var/tmp/zinf-examples-XXXXXX)
MOUNTS=()
cleanup() {
  for m in "${MOUNTS[@]}"; do umount "$m" 2> /dev/null; done
  rm -rf "$ROOT"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
source "$(dirname "${BASH_SOURCE[0]}")/harness.sh"
LOG=$ROOT/log
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
SKIPPED=0
skip() { SKIPPED=$((SKIPPED + 1)); echo "skipped: $1"; }
AS_ROOT=0; [ "$(id -u)" = 0 ] && AS_ROOT=1

N=0
CASE=
# A fresh case directory with the hostile fixtures; the previous one is removed.
new_case() {
  [ -n "$CASE" ] && { for m in "${MOUNTS[@]}"; do umount "$m" 2> /dev/null; done; MOUNTS=(); rm -rf "$CASE"; }
  N=$((N + 1))
  CASE=$ROOT/case-$N
  mkdir -p "$CASE/tmp" "$CASE/home" "$CASE/dir"
  mkfifo "$CASE/fifo"
  truncate -s 100G "$CASE/sparse"
  echo victim > "$CASE/victim"
  printf 'abc abc ab' > "$CASE/text.txt"
  mkdir "$CASE/tok"
  printf '{"a": 0, "b": 1, "c": 2, "\\u0120": 3}' > "$CASE/tok/vocab.json"
  printf '#version: 0.2\n' > "$CASE/tok/merges.txt"
  printf 'models: [gpt-tiny]\nhwprofiles: [cpu-dev]\nconfigs: [zero3]\nnodes: [1, 2]\n' > "$CASE/ok.yaml"
  # The null device's numbers, as root only: a command that replaced this node would replace only
  # this copy, never /dev/null.
  [ $AS_ROOT = 0 ] || mknod "$CASE/cdev" c 1 3
}
# What a case may not change: every path in the case directory but OUTS (names relative to it, each
# with what lies under it), with type, size, mode, link target and, for files, modification time.
OUTS=()
snapshot() {
  local prune=()
  for o in "${OUTS[@]}"; do prune+=(-path "$CASE/$o" -prune -o); done
  (cd "$CASE" && find "$CASE" -mindepth 1 "${prune[@]}" \( -type d -printf '%P d %m\n' -o -printf '%P %y %s %m %T@ %l\n' \) | sort)
}
# probe NAME RC REGEX ARGS...: zinf ARGS in the case directory within LIMIT seconds (and within
# MEMORY KiB of address space when set); exit code RC, a line matching REGEX, nothing touched but
# OUTS, TMPDIR empty, and CHECK (shell, run in the case directory) true when set.
LIMIT=20
MEMORY=
CHECK=
probe() {
  local name=$1 want=$2 regex=$3; shift 3
  local before after rc problems=""
  before=$(snapshot)
  (cd "$CASE" && export HOME="$CASE/home" TMPDIR="$CASE/tmp" && { [ -z "$MEMORY" ] || ulimit -v "$MEMORY"; } &&
    exec timeout -k 5 "$LIMIT" "$ZINF" "$@") > "$LOG" 2>&1
  rc=$?
  [ "$rc" = "$want" ] || problems+="exit code $rc, wanted $want; "
  [ -z "$regex" ] || grep -Eq -- "$regex" "$LOG" || problems+="no line matches /$regex/; "
  after=$(snapshot)
  [ "$before" = "$after" ] || problems+="changed: $(diff <(echo "$before") <(echo "$after") | grep '^[<>]' | head -4 | tr '\n' ' '); "
  [ -z "$(ls -A "$CASE/tmp")" ] || problems+="left in TMPDIR: $(ls -A "$CASE/tmp" | head -3 | tr '\n' ' '); "
  [ -z "$CHECK" ] || (cd "$CASE" && eval "$CHECK") || problems+="failed: $CHECK; "
  if [ -z "$problems" ]; then pass "$name"; else fail "$name: $problems" "$LOG"; fi
}
# One case: a fresh directory, then the probe; OUTS, LIMIT, MEMORY and CHECK go back to their defaults.
one() { new_case; probe "$@"; OUTS=(); LIMIT=20; MEMORY=; CHECK=; }
SMALL=(--model gpt-tiny --hw cpu-dev --config zero3)

# --- Reads without bounds: exit 2, naming the option and the file, at once.
for cmd in plan sim tune; do
  one "$cmd --config on a FIFO" 2 "fifo: the file given to --config must be a regular file, and this is a FIFO" \
    $cmd --model gpt-tiny --hw cpu-dev --config fifo
  for dev in /dev/zero /dev/urandom; do
    one "$cmd --config $dev" 2 "$dev: the file given to --config must be a regular file, and this is a character device" \
      $cmd --model gpt-tiny --hw cpu-dev --config $dev
  done
  one "$cmd --config a 100 GB sparse file" 2 "sparse: the file given to --config is larger than" \
    $cmd --model gpt-tiny --hw cpu-dev --config sparse
  one "$cmd --config a directory" 2 "dir: the file given to --config is a directory" \
    $cmd --model gpt-tiny --hw cpu-dev --config dir
done
new_case; mv "$CASE/sparse" "$CASE/s.csv"
CHECK='[ "$(stat -c %s s.csv)" = 107374182400 ]'
probe "sweep -o an existing 100 GB CSV refused by its size, left as it was" 2 "s.csv: the results file is larger than" \
  sweep ok.yaml -o s.csv
CHECK=
probe "sweep -o an existing FIFO refused, left a FIFO" 1 "zinf sweep --out: .*fifo.*it is a FIFO" sweep ok.yaml -o fifo

# --- Writes that are not safe. Device nodes and FIFOs as outputs: refused (exit 1), left as they are.
# device_outputs WHAT NODE KIND TEST: TEST (shell) holds of NODE after each refusal.
device_outputs() {
  local what=$1 node=$2 kind=$3 test=$4
  CHECK=$test one "sweep -o onto $what" 1 "zinf sweep --out: .*$node.*it is a $kind" sweep ok.yaml -o $node
  CHECK=$test one "tokenize -o onto $what" 1 "zinf tokenize --output: .*$node.*it is a $kind" \
    tokenize --tokenizer tok -o $node text.txt
  CHECK="$test && ! grep -q 'step 1/' \"\$LOG\"" one "train --export onto $what, before training" 1 \
    "zinf train --export: .*$node.*it is a $kind" train "${SMALL[@]}" --steps 1 --export $node
  CHECK=$test one "plan --program onto $what" 1 "zinf plan --program: .*$node.*it is a $kind" plan "${SMALL[@]}" --program $node
  CHECK=$test one "tune --yaml onto $what" 1 "zinf tune --yaml: .*$node.*it is a $kind" \
    tune "${SMALL[@]}" --yaml $node --deepspeed ''
}
if [ $AS_ROOT = 1 ]; then
  device_outputs "a character device (mknod c 1 3)" cdev "character device" '[ -c cdev ]'
else
  skip "outputs onto a character device: mknod needs root, and /dev/null is never used as a target here"
fi
device_outputs "a FIFO" fifo FIFO '[ -p fifo ]'

# Links planted at the old fixed temporary names: not followed, the output written, no temporary left.
planted() {
  local name=$1 out=$2 regex=$3; shift 3
  new_case
  ln -s victim "$CASE/$out.tmp"
  ln -s victim "$CASE/$out.partial"
  OUTS=("$out" "$out.lock")
  CHECK="[ -s $out ] && [ -L $out.tmp ] && [ -L $out.partial ] && ! ls -A | grep -q '^\\..*tmp\$'"
  LIMIT=${PLANT_LIMIT:-20}
  probe "$name beside links planted at $out.tmp and $out.partial" 0 "$regex" "$@"
  OUTS=(); CHECK=; LIMIT=20
}
planted "plan --program" p.json "" plan "${SMALL[@]}" --program p.json
planted "sim --trace" t.json "" sim "${SMALL[@]}" --trace t.json
planted "tune --yaml" t.yaml "wrote t.yaml" tune "${SMALL[@]}" --yaml t.yaml --deepspeed ''
planted "tokenize -o" t.bin "wrote .*t.bin" tokenize --tokenizer tok -o t.bin text.txt
planted "sweep -o" s.csv "2 points in" sweep ok.yaml -o s.csv
PLANT_LIMIT=60 planted "train --export" w.safetensors "" train "${SMALL[@]}" --steps 1 --export w.safetensors

# profile-hw and io-bench: scratch goes under a private mkdtemp directory, so links planted at the
# pid-named paths they once used (in $TMPDIR and in the measured directory) change nothing. The
# shell's pid is the command's: `exec` keeps it.
new_case
mkdir "$CASE/attacker"
PLANT='for p in profile profile-comm profile-skew profile-step profile-disk io-bench; do
  ln -s "$PWD/attacker" "$TMPDIR/zinf-$p-$$"; ln -s "$PWD/victim" "$TMPDIR/zinf-$p-$$.txt"
  ln -s "$PWD/attacker" "zinf-$p-$$"; done'
# With mpirun the collective and the rank skew are measured too (their scratch was the pid-named one).
MPI=--no-mpi
command -v mpirun > /dev/null && MPI= || skip "profile-hw's collective and rank skew: no mpirun (measured without them)"
(cd "$CASE" && export HOME="$CASE/home" TMPDIR="$CASE/tmp" &&
  exec timeout -k 5 180 sh -c "$PLANT; exec '$ZINF' profile-hw --quick $MPI --nvme-dir \"\$TMPDIR\" -o out.yaml") > "$LOG" 2>&1
rc=$?
problems=""
[ $rc = 0 ] || problems+="exit code $rc; "
[ -s "$CASE/out.yaml" ] || problems+="no profile written; "
[ -z "$(ls -A "$CASE/attacker")" ] || problems+="the planted directory received $(ls -A "$CASE/attacker" | head -3 | tr '\n' ' '); "
[ "$(cat "$CASE/victim")" = victim ] || problems+="the victim file was written; "
[ -z "$(find "$CASE/tmp" "$CASE" -maxdepth 1 -name 'zinf-*' ! -type l)" ] || problems+="scratch left: $(find "$CASE/tmp" "$CASE" -maxdepth 1 -name 'zinf-*' ! -type l | head -2); "
[ -z "$problems" ] && pass "profile-hw --quick $MPI beside links planted at its old scratch names: measured, nothing followed, nothing left" \
  || fail "profile-hw beside planted links: $problems" "$LOG"
new_case
mkdir "$CASE/attacker"
(cd "$CASE" && export HOME="$CASE/home" TMPDIR="$CASE/tmp" &&
  exec timeout -k 5 120 sh -c "$PLANT; exec '$ZINF' io-bench --dir . --size 64MiB --block-sizes 1MiB --queue-depths 4") > "$LOG" 2>&1
rc=$?
problems=""
[ $rc = 0 ] || problems+="exit code $rc; "
[ -z "$(ls -A "$CASE/attacker")" ] || problems+="the planted directory received $(ls -A "$CASE/attacker" | head -3 | tr '\n' ' '); "
[ -z "$(find "$CASE" -maxdepth 1 -name 'zinf-*' ! -type l)" ] || problems+="scratch left; "
[ -z "$problems" ] && pass "io-bench beside a link planted at its old scratch name: measured, nothing followed, nothing left" \
  || fail "io-bench beside planted links: $problems" "$LOG"

# A full disk: a 4 KiB tmpfs, filled, as root where mount works.
full_disk() {
  mkdir "$CASE/full"
  [ $AS_ROOT = 1 ] && mount -t tmpfs -o "size=${1:-4k}" zinf-full "$CASE/full" 2> /dev/null || return 1
  MOUNTS+=("$CASE/full")
  [ "${1:-4k}" = 4k ] && dd if=/dev/zero of="$CASE/full/fill" bs=4k 2> /dev/null
  return 0
}
new_case
if full_disk; then
  CHECK='[ "$(ls -A full)" = fill ]'
  probe "plan --program on a full disk: exit 1, naming the file, nothing left" 1 \
    "zinf plan --program: write full/p.json: No space left on device" plan "${SMALL[@]}" --program full/p.json
  probe "plan --trace on a full disk: exit 1, naming the file, nothing left" 1 \
    "zinf plan --trace: write full/t.json: No space left on device" plan "${SMALL[@]}" --trace full/t.json
  CHECK='[ "$(ls -A full)" = fill ] && [ -s t.yaml ] && grep -q "samples/s" "$LOG"'
  OUTS=(t.yaml)
  probe "tune --deepspeed on a full disk: the report printed, exit 1, saying what was written" 1 \
    "DeepSpeed config full/t.json was not written: .*No space left.*\(t.yaml holds the best" \
    tune "${SMALL[@]}" --yaml t.yaml --deepspeed full/t.json
  OUTS=(); CHECK=
  OUTS=(full/v)
  LIMIT=60 CHECK='[ ! -e full/v/validate.json ] && ! ls -A full/v | grep -q tmp && ! pgrep -f -- "--out-dir full/v --nvme-dir" > /dev/null' probe \
    "validate --out-dir on a full disk: exit 1, saying the disk is full, no worker left" 1 \
    "the measured run failed .*the disk holding full/v is full" validate "${SMALL[@]}" --out-dir full/v
  OUTS=(); LIMIT=20; CHECK=
  # The last word on a full disk: a refusal whose stderr cannot be written keeps its exit code.
  (cd "$CASE" && exec timeout -k 5 20 "$ZINF" plan --model gpt-tiny --hw cpu-dev --config /dev/zero 2> full/err) > "$LOG" 2>&1
  rc=$?
  [ $rc = 2 ] && pass "a refusal with stderr on a full disk: exit 2, not an abort" \
    || fail "a refusal with stderr on a full disk: exit code $rc, wanted 2" "$LOG"
  rm -f "$CASE/full/err"
  # Room for the measured run but not every output: each size ends whole (exit 0, validate.json
  # written) or says which file it could not write (exit 1), with no temporary left.
  problems=""
  for size in 32k 48k 64k 96k; do
    umount "$CASE/full"; MOUNTS=(); rm -rf "$CASE/full"; full_disk "$size"
    (cd "$CASE" && exec timeout -k 5 60 "$ZINF" validate "${SMALL[@]}" --out-dir full/v) > "$LOG" 2>&1
    rc=$?
    if [ $rc = 0 ]; then
      [ -s "$CASE/full/v/validate.json" ] || problems+="$size: exit 0 without validate.json; "
    elif [ $rc = 1 ]; then
      grep -Eq "write full/v/[a-z.0-9]+: No space left.*no validate.json" "$LOG" || problems+="$size: $(tail -1 "$LOG"); "
    else
      problems+="$size: exit code $rc; "
    fi
    ls -A "$CASE/full/v" 2> /dev/null | grep -q 'tmp$' && problems+="$size: a temporary left; "
  done
  [ -z "$problems" ] && pass "validate's outputs on a disk that fills: whole, or the file named and no temporary left" \
    || fail "validate on a disk that fills: $problems" "$LOG"
else
  # The writer refuses a device as a target rather than write through it: /dev/full is left alone.
  probe "plan --program /dev/full (no tmpfs here) refused as a device" 1 "zinf plan --program: .*/dev/full.*character device" \
    plan "${SMALL[@]}" --program /dev/full
  skip "a full disk: mounting a tmpfs needs root"
fi
CHECK='! grep -q "step 1/" "$LOG"' one "train --export into a missing directory refused before training" 1 \
  "zinf train --export: .*missing does not exist" train "${SMALL[@]}" --steps 50 --export missing/w.safetensors

# --- Hostile files: exit 1 for weights and tokenizers, 2 for configs, naming the file and key.
new_case
python3 - "$CASE" <<'EOF'
import json, struct, sys
def st(name, shape):
    h = json.dumps({"wte.weight": {"dtype": "F32", "shape": shape, "data_offsets": [0, 16]}}).encode()
    open(sys.argv[1] + "/" + name, "wb").write(struct.pack("<Q", len(h)) + h + b"\0" * 16)
st("wrap.safetensors", [2**32, 2**32, 4])          # the count wraps to 2^66 mod 2^64 = 0
st("past.safetensors", [3037000500, 3037000500])   # the count passes 2^63
st("zero.safetensors", [2**62, 4])                 # the count is 2^64: 0 in 64 bits
st("bytes.safetensors", [2**61, 1])                # the count fits; its F32 bytes do not
EOF
for f in wrap past zero bytes; do
  probe "sample --weights: a shape whose count or size overflows ($f)" 1 "$f.safetensors: tensor 'wte.weight': shape" \
    sample --model gpt-tiny --weights $f.safetensors --prompt hi
  LIMIT=60 probe "train --init-from: a shape whose count or size overflows ($f)" 1 "$f.safetensors: tensor 'wte.weight': shape" \
    train "${SMALL[@]}" --steps 1 --init-from $f.safetensors
done
LIMIT=20
new_case
mkdir "$CASE/big-id"
printf '{"a": 0, "b": 2147483646, "c": 2, "\\u0120": 3}' > "$CASE/big-id/vocab.json"
printf '#version: 0.2\n' > "$CASE/big-id/merges.txt"
python3 -c "
import json, sys
json.dump({'model': {'type': 'BPE', 'vocab': {'a': 0, 'b': 1}, 'merges': []},
           'added_tokens': [{'id': 2147483647, 'content': '<x>', 'special': True}]}, open(sys.argv[1], 'w'))" "$CASE/added.json"
# A table sized by the id would take gigabytes: a 1 GiB address space holds the refusal.
MEMORY=1048576
for args in "tokenize --tokenizer big-id -o t.bin text.txt" "tokenize --tokenizer added.json -o t.bin text.txt" \
    "sample --model gpt-tiny --weights zero.safetensors --tokenizer big-id --prompt hi" \
    "train --model gpt-tiny --hw cpu-dev --config zero3 --steps 1 --tokenizer big-id --data text.txt"; do
  : > "$CASE/zero.safetensors"
  # The refusal blames the tokenizer's file, not "the configuration".
  CHECK='! grep -q configuration "$LOG"' probe "${args%% *} --tokenizer with an id near 2^31, in 1 GiB" 1 \
    "(big-id/vocab.json|added.json).*(2147483646|2147483647)" $args
done
MEMORY=
new_case
for field in lr eps weight_decay gradient_clipping warmup_min_lr warmup_max_lr warmup_num_steps; do
  python3 - "$CASE/ds-$field.json" "$field" <<'EOF'
import sys
text = """{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.0}},
 "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 3e-4, "warmup_num_steps": 10}},
 "zero_optimization": {"stage": 3}}"""
import re
field = sys.argv[2]
text, n = re.subn(r'"%s": [^,}]+' % field, '"%s": 1e400' % field, text)
assert n == 1, field
open(sys.argv[1], "w").write(text)
EOF
  printf 'models: [gpt-tiny]\nhwprofiles: [cpu-dev]\nconfigs: [ds-%s.json]\nnodes: [1]\n' $field > "$CASE/spec-$field.yaml"
  key="key '[a-z_.]*$field': a number beyond a double's range"
  : > "$CASE/w.safetensors"
  for cmd in plan sim tune train validate sample sweep; do
    case $cmd in
      train) args=(--steps 1) ;;
      validate) args=(--out-dir v) ;;
      sample) args=(--weights w.safetensors --prompt hi) ;;
      *) args=() ;;
    esac
    if [ $cmd = sweep ]; then
      probe "sweep: a spec naming a DeepSpeed JSON with $field 1e400 refused before any point runs" 2 "ds-$field.json: $key" \
        sweep spec-$field.yaml -o s.csv
    else
      probe "$cmd --config: DeepSpeed JSON with $field 1e400" 2 "ds-$field.json: $key" \
        $cmd --model gpt-tiny --hw cpu-dev --config ds-$field.json "${args[@]}"
    fi
  done
done

# --- Counts that overflow or run away.
new_case
cat > "$CASE/huge.yaml" <<'EOF2'
# 10^9 points in 18 lines: ten node counts times eight axes of ten values
models: [gpt-tiny]
hwprofiles: [cpu-dev]
configs: [zero3]
nodes: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
axes:
  - key: micro_batch
    values: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
  - key: grad_accum
    values: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
  - key: aio.queue_depth
    values: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
  - key: aio.block_size
    values: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
  - {key: tiling_factor, values: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}
  - {key: nvme_prefetch_distance, values: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}
  - {key: h2d_prefetch_distance, values: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}
  - {key: allgather_prefetch_distance, values: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}
EOF2
LIMIT=5 MEMORY=524288 probe "sweep: an 18-line spec of 10^9 points refused before expansion, in 5 s and 512 MiB" 2 \
  "huge.yaml: the axes multiply to more than 1000000 points" sweep huge.yaml -o s.csv
LIMIT=20; MEMORY=
printf 'models: [gpt-tiny]\nhwprofiles: [dgx2-v100]\nconfigs: [zero3]\nnodes: [1073741824]\n' > "$CASE/nodes.yaml"
probe "sweep: a node count of 2^30 refused, naming the key" 2 "nodes.yaml:4: key 'nodes'" sweep nodes.yaml -o s.csv
for cmd in plan sim tune; do
  probe "$cmd --nodes 2^30 on 16-GPU nodes (the product overflows int)" 105 "--nodes: 1073741824 nodes x 16 GPUs per node .* is 17179869184 GPUs" \
    $cmd --model gpt-tiny --hw dgx2-v100 --nodes 1073741824
  probe "$cmd --nodes 2^20 x --gpus-per-node 4096 (the product wraps 32 bits)" 105 "--nodes: 1048576 nodes x 4096 GPUs per node" \
    $cmd --model gpt-tiny --hw dgx2-v100 --nodes 1048576 --gpus-per-node 4096
done
CHECK='[ ! -e v ]'
probe "validate --ranks 100000 refused before mpirun" 105 "ranks.*--force-ranks" validate "${SMALL[@]}" --ranks 100000 --out-dir v
CHECK=

# --- Concurrency and signals.
new_case
printf 'models: [gpt-10b]\nhwprofiles: [dgx2-v100]\nconfigs: [infinity-nvme]\nnodes: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]\naxes:\n  - {key: micro_batch, values: [1, 2, 3, 4, 5, 6, 7, 8]}\n' > "$CASE/long.yaml"
wait_for() { for _ in $(seq 1 80); do grep -qE "$2" "$1" 2> /dev/null && return 0; sleep 0.25; done; return 1; }
gone() { for _ in $(seq 1 40); do pgrep -f -- "$1" > /dev/null || return 0; sleep 0.25; done; return 1; }
(cd "$CASE" && exec "$ZINF" sweep long.yaml -o long.csv -j 2) > "$ROOT/first.log" 2>&1 &
FIRST=$!
wait_for "$ROOT/first.log" "points, 0 already"
OUTS=(long.csv long.csv.lock)
probe "a second sweep on the same CSV refused, naming the holder" 1 "long.csv.*in use by zinf pid $FIRST" sweep long.yaml -o long.csv
OUTS=()
kill -TERM $FIRST; wait $FIRST; rc=$?
[ $rc = 143 ] && gone "long.yaml -o long.csv" && pass "the first sweep, stopped by SIGTERM: exit 143, no simulation left" \
  || fail "the first sweep stopped by SIGTERM: exit $rc, simulations $(pgrep -f "long.yaml -o long.csv" > /dev/null && echo left || echo gone)" "$ROOT/first.log"
for sig in INT TERM; do
  new_case
  (cd "$CASE" && exec "$ZINF" validate "${SMALL[@]}" --steps 1000 --warmup 1 --out-dir "$CASE/val") > "$LOG" 2>&1 &
  JOB=$!
  wait_for "$LOG" "measuring: " && sleep 1
  kill -$sig $JOB; wait $JOB; rc=$?
  want=$((128 + $(kill -l $sig)))
  if [ $rc = $want ] && grep -q "SIG$sig: stopped, and the child process with it.*val holds" "$LOG" && gone "$CASE/val"; then
    pass "validate stopped by SIG$sig: exit $want, its measuring worker gone, saying what val holds"
  else
    fail "validate stopped by SIG$sig: exit $rc (wanted $want), worker $(pgrep -f -- "$CASE/val" > /dev/null && echo left || echo gone)" "$LOG"
  fi
done
# tune with its default outputs: the issue's run (gpt-1t on 32 DGX-2 nodes) writes both configs and
# its report; with every flag at its default the model does not fit one node: exit 3, nothing written.
new_case
OUTS=(tuned.yaml tuned.deepspeed.json)
LIMIT=180 CHECK='[ -s tuned.yaml ] && [ -s tuned.deepspeed.json ] && grep -q "samples/s" "$LOG"' probe \
  "tune --model gpt-1t --nodes 32 with default outputs: both configs and the report" 0 "wrote tuned.deepspeed.json" \
  tune --model gpt-1t --nodes 32
OUTS=(); LIMIT=20; CHECK=
new_case
LIMIT=120 CHECK='[ ! -e tuned.yaml ] && [ ! -e tuned.deepspeed.json ]' probe \
  "tune with every flag at its default: refused by the planner (exit 3), nothing written" 3 "no configuration of gpt-1t" tune
LIMIT=20; CHECK=

echo "$PASSED passed, $FAILED failed, $SKIPPED skipped"
