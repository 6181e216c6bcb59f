#!/usr/bin/env bash
# Every file zinf's commands name, against what is not a file to read or to write. Each input
# option (and each file a sweep spec names) gets a FIFO, /dev/zero, a directory and a sparse 100 GB
# file: refused within seconds, naming the option and the file, with the README's exit code (2 for
# a file refused as input; a directory is "a directory"). Each output option gets /dev/null, a FIFO,
# a directory, a planted symbolic link and a missing directory: refused before any work (exit 1),
# the thing at the path left as it was. Temporaries planted at the old fixed names are not written
# through. Then the commands that write and stop: two sweeps on one CSV (the second refused, naming
# the first), sweep, tune and validate stopped by SIGINT, SIGTERM and SIGHUP (exit 128 + N, saying
# what they leave, their child processes gone), tune's outputs and the number checks of the CLI.
# Usage: file_options_cli.sh ZINF_BINARY. Prints "N passed, M failed".
set -u
ZINF=$(readlink -f "$1")
BASE=$(mktemp -d /var/tmp/zinf-files-XXXXXX)
trap 'rm -rf "$BASE"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/harness.sh"
cd "$BASE" || exit 1
mkfifo "$BASE/fifo"
mkdir "$BASE/dir"
: > "$BASE/w.safetensors"
printf 'abc abc ab' > "$BASE/text.txt"
truncate -s 100G "$BASE/sparse"
LOG=$BASE/log
run() { timeout -k 5 20 "$ZINF" "$@" > "$LOG" 2>&1; rc=$?; }
# ARGS with @F replaced by $1.
fill() { local f=$1; shift; local out=(); for a in "$@"; do out+=("${a//@F/$f}"); done; printf '%s\n' "${out[@]}"; }

# inputs NAME FLAG TAKES_DIRS ARGS...: the four hostile files at @F.
inputs() {
  local name=$1 flag=$2 dirs=$3; shift 3
  local args
  mapfile -t args < <(fill "$BASE/fifo" "$@"); run "${args[@]}"
  expect "$name $flag FIFO refused at once" 2 "fifo: .*given to $flag must be a regular file, and this is a FIFO" "$LOG" $rc
  mapfile -t args < <(fill /dev/zero "$@"); run "${args[@]}"
  expect "$name $flag /dev/zero refused at once" 2 "/dev/zero: .*given to $flag .*character device" "$LOG" $rc
  mapfile -t args < <(fill "$BASE/sparse" "$@"); run "${args[@]}"
  if [ "$dirs" = weights ]; then
    # Weights may be large: the sparse file passes the size bound and its empty header is refused.
    expect "$name $flag a 100 GB sparse file refused by its header, at once" 1 "sparse: header" "$LOG" $rc
  else
    expect "$name $flag a 100 GB sparse file refused by its size" 2 "sparse: .*given to $flag is larger than" "$LOG" $rc
  fi
  mapfile -t args < <(fill "$BASE/dir" "$@"); run "${args[@]}"
  if [ "$dirs" = dirs ]; then
    [ $rc != 0 ] && [ $rc != 124 ] && grep -q "$BASE/dir" "$LOG" \
      && pass "$name $flag an empty directory (which it takes) refused, naming it" || fail "$name $flag empty directory: exit $rc" "$LOG"
  else
    expect "$name $flag a directory refused as a directory" 2 "dir: .*given to $flag .*is a directory" "$LOG" $rc
  fi
}
SMALL=(--model gpt-tiny --hw cpu-dev --config zero3)
for cmd in plan sim tune; do
  inputs "$cmd" --config no "$cmd" --model gpt-tiny --hw cpu-dev --config @F
  inputs "$cmd" --model no "$cmd" --model @F --hw cpu-dev --config zero3
  inputs "$cmd" --hw no "$cmd" --model gpt-tiny --hw @F --config zero3
done
inputs train --config no train --model gpt-tiny --config @F --steps 1
inputs train --model no train --model @F --config zero3 --steps 1
inputs train --hw no train --model gpt-tiny --hw @F --config zero3 --steps 1
inputs train --data dirs train "${SMALL[@]}" --data @F --steps 1
inputs train --val-data dirs train "${SMALL[@]}" --val-data @F --steps 1
inputs train --tokenizer dirs train "${SMALL[@]}" --tokenizer @F --steps 1
inputs train --init-from weights train "${SMALL[@]}" --init-from @F --steps 1
inputs validate --config no validate --model gpt-tiny --hw cpu-dev --config @F --out-dir "$BASE/v"
inputs validate --model no validate --model @F --hw cpu-dev --config zero3 --out-dir "$BASE/v"
inputs validate --hw no validate --model gpt-tiny --hw @F --config zero3 --out-dir "$BASE/v"
inputs sample --weights weights sample --model gpt-tiny --weights @F --prompt hi
inputs sample --model no sample --model @F --weights "$BASE/w.safetensors" --prompt hi
inputs sample --config no sample --model gpt-tiny --weights "$BASE/w.safetensors" --config @F --prompt hi
inputs sample --hw no sample --model gpt-tiny --weights "$BASE/w.safetensors" --hw @F --prompt hi
inputs sample --tokenizer dirs sample --model gpt-tiny --weights "$BASE/w.safetensors" --tokenizer @F --prompt hi
inputs tokenize --tokenizer dirs tokenize --tokenizer @F -o "$BASE/t.bin" "$BASE/text.txt"
mkdir -p "$BASE/tok" && printf '{"a": 0, "b": 1, "c": 2, "\\u0120": 3}' > "$BASE/tok/vocab.json" && printf '#version: 0.2\n' > "$BASE/tok/merges.txt"
inputs tokenize inputs dirs tokenize --tokenizer "$BASE/tok" -o "$BASE/t.bin" @F
inputs profile-hw --check no profile-hw --check @F
inputs sweep spec no sweep @F -o "$BASE/s.csv"
for field in models hwprofiles configs; do
  cat > "$BASE/spec.yaml" <<EOF
models: [$([ $field = models ] && echo @F || echo gpt-tiny)]
hwprofiles: [$([ $field = hwprofiles ] && echo @F || echo cpu-dev)]
configs: [$([ $field = configs ] && echo @F || echo zero3)]
nodes: [1]
EOF
  for f in fifo /dev/zero dir sparse; do
    p=$f; [ "${f:0:1}" = / ] || p=$BASE/$f
    sed "s|@F|$p|" "$BASE/spec.yaml" > "$BASE/spec-$field.yaml"
    run sweep "$BASE/spec-$field.yaml" -o "$BASE/s.csv"
    expect "sweep spec field $field: $f refused before any point runs" 2 "spec-$field.yaml's $field " "$LOG" $rc
  done
done

# Outputs: nothing at the path is replaced or written through, and the refusal comes first.
printf 'models: [gpt-tiny]\nhwprofiles: [cpu-dev]\nconfigs: [zero3]\nnodes: [1, 2]\n' > "$BASE/ok-spec.yaml"
echo victim > "$BASE/victim"
ln -s "$BASE/victim" "$BASE/link"
# outputs NAME FLAG ARGS...: @F is the output.
outputs() {
  local name=$1 flag=$2; shift 2
  local args what
  for what in /dev/null "$BASE/fifo" "$BASE/dir" "$BASE/link" "$BASE/missing/out"; do
    mapfile -t args < <(fill "$what" "$@"); run "${args[@]}"
    case $what in
      /dev/null) expect "$name $flag /dev/null refused, not replaced" 1 "$flag.*/dev/null.*character device" "$LOG" $rc
        [ -c /dev/null ] || fail "/dev/null is no longer a character device" "$LOG" ;;
      */fifo) expect "$name $flag a FIFO refused" 1 "$flag.*fifo.*FIFO" "$LOG" $rc ;;
      */dir) if [ "${FOLDER_TARGET:-}" = "$flag" ]; then
          # This flag writes a folder when given a directory (a Hugging Face export), nothing else there.
          expect "$name $flag a directory written as a folder" 0 "" "$LOG" $rc
          [ -f "$BASE/dir/model.safetensors" ] || fail "$name $flag wrote no model.safetensors into the folder" "$LOG"
        else
          expect "$name $flag a directory refused" 1 "$flag.*dir.*directory" "$LOG" $rc
        fi ;;
      */link) expect "$name $flag a planted symbolic link refused, its target untouched" 1 "$flag.*link.*symbolic link" "$LOG" $rc
        [ "$(cat "$BASE/victim")" = victim ] || fail "$name $flag wrote through the link" "$LOG" ;;
      */missing/out) expect "$name $flag into a missing directory refused before any work" 1 "$flag.*missing does not exist" "$LOG" $rc
        grep -qE "step 1/|points in|searched" "$LOG" && fail "$name $flag: work ran before the refusal" "$LOG" ;;
    esac
  done
}
outputs plan --program plan "${SMALL[@]}" --program @F
outputs plan --trace plan "${SMALL[@]}" --trace @F
outputs sim --timeline sim "${SMALL[@]}" --timeline @F
outputs sim --trace sim "${SMALL[@]}" --trace @F
outputs tune --yaml tune "${SMALL[@]}" --yaml @F --deepspeed ''
outputs tune --deepspeed tune "${SMALL[@]}" --yaml '' --deepspeed @F
FOLDER_TARGET=--export outputs train --export train "${SMALL[@]}" --steps 1 --export @F
outputs train --trace train "${SMALL[@]}" --steps 1 --trace @F
outputs train --metrics train "${SMALL[@]}" --steps 1 --metrics @F
outputs tokenize --output tokenize --tokenizer "$BASE/tok" -o @F "$BASE/text.txt"
outputs sweep --out sweep "$BASE/ok-spec.yaml" -o @F
outputs profile-hw --out profile-hw --quick --no-mpi -o @F
echo file > "$BASE/plain"
run validate --model gpt-tiny --hw cpu-dev --config zero3 --out-dir "$BASE/plain"
expect "validate --out-dir naming a file refused" 105 "out-dir.*plain.*not a directory" "$LOG" $rc
mkdir -p "$BASE/vdir/validate.json"
run validate --model gpt-tiny --hw cpu-dev --config zero3 --out-dir "$BASE/vdir"
expect "validate refuses a directory where validate.json goes before measuring" 1 "validate.json.*directory" "$LOG" $rc
[ -e "$BASE/vdir/measure.log" ] && fail "validate measured before refusing its output" "$LOG"
# The old fixed temporary names: links planted there are not followed, and the output is written.
ln -s "$BASE/victim" "$BASE/t.bin.partial"
ln -s "$BASE/victim" "$BASE/s.csv.tmp"
run tokenize --tokenizer "$BASE/tok" -o "$BASE/t.bin" "$BASE/text.txt"
expect "tokenize -o beside a planted <out>.partial link writes its output" 0 "wrote .*t.bin" "$LOG" $rc
run sweep "$BASE/ok-spec.yaml" -o "$BASE/s.csv"
expect "sweep -o beside a planted <out>.tmp link writes its CSV" 0 "2 points" "$LOG" $rc
[ "$(cat "$BASE/victim")" = victim ] && [ -L "$BASE/t.bin.partial" ] && [ -L "$BASE/s.csv.tmp" ] \
  && pass "... the planted links and their target untouched" || fail "a planted temporary link was written through" "$LOG"
ls -a "$BASE" | grep -qE '^\..*\.tmp$' && fail "a temporary was left behind: $(ls -a "$BASE" | grep tmp)" || pass "no temporary left behind"

# Numbers on the command line.
run plan --model gpt-tiny --hw dgx2-v100 --nodes 1073741824
expect "plan --nodes 2^30 on 16-GPU nodes refused (the product overflows int)" 105 "nodes.*GPUs" "$LOG" $rc
run validate --model gpt-tiny --hw cpu-dev --config zero3 --ranks 100000 --out-dir "$BASE/v"
expect "validate --ranks 100000 refused before mpirun" 105 "ranks.*--force-ranks" "$LOG" $rc
[ -e "$BASE/v/measure.log" ] && fail "validate started a measured run" "$LOG"

# Two sweeps on one CSV: the second is refused, naming the first; signals stop a sweep, saying
# what it leaves, with its children.
printf 'models: [gpt-10b]\nhwprofiles: [dgx2-v100]\nconfigs: [infinity-nvme]\nnodes: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]\naxes:\n  - {key: micro_batch, values: [1, 2, 3, 4, 5, 6, 7, 8]}\n' > "$BASE/long-spec.yaml"
gone() { for _ in $(seq 1 40); do pgrep -f "$1" > /dev/null || return 0; sleep 0.25; done; return 1; }
wait_for() { for _ in $(seq 1 80); do grep -qE "$2" "$1" 2>/dev/null && return 0; sleep 0.25; done; return 1; }
for sig in INT TERM HUP; do
  rm -f "$BASE/long.csv"
  "$ZINF" sweep "$BASE/long-spec.yaml" -o "$BASE/long.csv" -j 2 > "$BASE/sweep.log" 2>&1 &
  JOB=$!
  wait_for "$BASE/sweep.log" "points, 0 already"
  sleep 3
  if [ $sig = INT ]; then
    run sweep "$BASE/long-spec.yaml" -o "$BASE/long.csv"
    expect "a second sweep on the same CSV refused, naming the holder" 1 "long.csv.*in use by zinf pid $JOB" "$LOG" $rc
  fi
  kill -$sig $JOB; wait $JOB; rc=$?
  expect "SIG$sig stops a sweep (exit $((128 + $(kill -l $sig)))), saying the CSV holds what finished" \
    $((128 + $(kill -l $sig))) "stopped by SIG$sig; .*long.csv holds the rows finished so far" "$BASE/sweep.log" $rc
  gone "long-spec.yaml" && pass "... its simulation processes gone" || fail "SIG$sig left sweep children running" "$BASE/sweep.log"
done
run sweep "$BASE/long-spec.yaml" -o "$BASE/long.csv" -j 2
# Not waited for: only that the resumed sweep keeps what the stopped one finished.
grep -qE "[1-9][0-9]* already in" "$LOG" && pass "the stopped sweep's rows are kept by the next run" || fail "no rows kept after a stop" "$LOG"

# tune stopped mid-search writes nothing and takes its simulations with it.
for sig in INT TERM HUP; do
  "$ZINF" tune --model gpt-10b --hw dgx2-v100 --nodes 4 --plan-budget 400 --yaml "$BASE/tuned-$sig.yaml" \
    --deepspeed "$BASE/tuned-$sig.json" > "$BASE/tune.log" 2>&1 &
  JOB=$!
  sleep 2
  kill -$sig $JOB; wait $JOB; rc=$?
  expect "SIG$sig stops tune (exit $((128 + $(kill -l $sig)))), nothing written" $((128 + $(kill -l $sig))) \
    "stopped by SIG$sig; nothing written" "$BASE/tune.log" $rc
  [ ! -e "$BASE/tuned-$sig.yaml" ] && gone "tuned-$sig.yaml" && pass "... no config written, no simulation left running" \
    || fail "SIG$sig: tune left a file or a child" "$BASE/tune.log"
done

# validate stopped while its measured run trains: the measuring worker goes with it.
for sig in INT TERM HUP; do
  "$ZINF" validate --model gpt-tiny --hw cpu-dev --config zero3 --steps 1000 --warmup 1 --out-dir "$BASE/val-$sig" \
    > "$BASE/val.log" 2>&1 &
  JOB=$!
  wait_for "$BASE/val.log" "measuring: " && sleep 1
  kill -$sig $JOB; wait $JOB; rc=$?
  expect "SIG$sig stops validate (exit $((128 + $(kill -l $sig)))), saying what its directory holds" \
    $((128 + $(kill -l $sig))) "SIG$sig: stopped, and the child process with it.*val-$sig holds" "$BASE/val.log" $rc
  gone "val-$sig" && pass "... the measuring worker gone" || fail "SIG$sig left validate's worker running" "$BASE/val.log"
done

echo "$PASSED passed, $FAILED failed"
