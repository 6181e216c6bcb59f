#!/usr/bin/env bash
# End-to-end tests of `zinf train`, `zinf sim` and `zinf validate` as a user runs them, mistakes
# included: each case is a probe that once lost data, hung or ended silently, and must
# now give a clear error or the right result.
# Usage: train_e2e.sh ZINF_BINARY single         the cases of one process
#        train_e2e.sh ZINF_BINARY mpi [MPIEXEC]   the cases of a failing or frozen rank; without
#                                                 MPIEXEC it exits 77 (CTest: Skipped)
# Prints "N passed, M failed"; exits non-zero on any failure. `zinf sweep` (resume of a sweep) is
# tested with sweep's own tests.
set -u
ZINF=$1
PART=${2:?usage: train_e2e.sh ZINF_BINARY single|mpi [MPIEXEC]}
MPIEXEC=${3:-}
case "$PART" in
  single) ;;
  mpi) [ -n "$MPIEXEC" ] || { echo "skipped: no mpiexec in this build"; exit 77; } ;;
  *) echo "train_e2e.sh: unknown part '$PART' (single or mpi)"; exit 2 ;;
esac
BASE=$(mktemp -d /var/tmp/zinf-e2e-XXXXXX)
trap 'rm -rf "$BASE"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/harness.sh"
TINY=(--model gpt-tiny --config train-nvme)

fresh() { local d="$BASE/$1"; rm -rf "$d"; mkdir -p "$d/nvme"; echo "$d"; }
# Waits (up to 60 s) until a run's log shows a step, so that it is training.
wait_for_step() { for _ in $(seq 1 120); do grep -q "step " "$1" 2>/dev/null && return 0; sleep 0.5; done; return 1; }

if [ "$PART" = single ]; then
# 1. A link planted as <nvme-dir>/rank0 is not followed: its target stays as it was.
D=$(fresh symlink)
echo precious > "$D/victim"
mkdir "$D/target" && ln -s "$D/victim" "$D/target/params.zt" && ln -s "$D/target" "$D/nvme/rank0"
"$ZINF" train "${TINY[@]}" --nvme-dir "$D/nvme" --steps 2 > "$D/log" 2>&1; rc=$?
expect "link as rank0 refused" 1 "rank0.*symbolic link" "$D/log" $rc
[ "$(cat "$D/victim")" = precious ] && pass "link target untouched" || fail "link target was overwritten" "$D/log"

# 2. Two runs on one --nvme-dir: the second is refused, naming the first; SIGTERM ends the first
#    after its step with a checkpoint and exit 143, and it resumes from there.
D=$(fresh lock)
"$ZINF" train "${TINY[@]}" --nvme-dir "$D/nvme" --steps 100000 --checkpoint-dir "$D/ck" > "$D/first.log" 2>&1 &
FIRST=$!
if wait_for_step "$D/first.log"; then
  "$ZINF" train "${TINY[@]}" --nvme-dir "$D/nvme" --steps 2 > "$D/second.log" 2>&1; rc=$?
  expect "second run on a locked --nvme-dir refused" 1 "in use by zinf pid $FIRST" "$D/second.log" $rc
  "$ZINF" train "${TINY[@]}" --nvme-dir "$D/other" --steps 2 --checkpoint-dir "$D/ck" > "$D/third.log" 2>&1; rc=$?
  expect "second run on a locked --checkpoint-dir refused" 1 "ck.*in use by zinf pid $FIRST" "$D/third.log" $rc
  kill -TERM "$FIRST"
  wait "$FIRST"; rc=$?
  expect "SIGTERM: step finished, checkpoint saved, exit 143" 143 "SIGTERM after step [0-9]+: stopped, checkpoint saved" "$D/first.log" $rc
  STEP=$(sed -n 's/.*SIGTERM after step \([0-9]*\).*/\1/p' "$D/first.log")
  "$ZINF" train "${TINY[@]}" --nvme-dir "$D/nvme" --steps $((STEP + 2)) --checkpoint-dir "$D/ck" --resume > "$D/resume.log" 2>&1; rc=$?
  expect "resume after SIGTERM continues at its step" 0 "resumed at step $STEP" "$D/resume.log" $rc
else
  fail "the first run never trained" "$D/first.log"; kill -9 "$FIRST"
fi

# 3. SIGINT as well: exit 130; without --checkpoint-dir it says nothing was saved.
D=$(fresh sigint)
"$ZINF" train "${TINY[@]}" --nvme-dir "$D/nvme" --steps 100000 > "$D/log" 2>&1 &
RUN=$!
if wait_for_step "$D/log"; then
  kill -INT "$RUN"; wait "$RUN"; rc=$?
  expect "SIGINT: exit 130 and a message" 130 "SIGINT after step [0-9]+: stopped \(no --checkpoint-dir: nothing saved\)" "$D/log" $rc
else
  fail "the run never trained" "$D/log"; kill -9 "$RUN"
fi

# 4. No silent overwrite: a fresh run refuses an earlier run's checkpoints.
D=$(fresh overwrite)
"$ZINF" train "${TINY[@]}" --nvme-dir "$D/nvme" --steps 3 --checkpoint-dir "$D/ck" > "$D/a.log" 2>&1
"$ZINF" train "${TINY[@]}" --nvme-dir "$D/nvme" --steps 2 --checkpoint-dir "$D/ck" > "$D/log" 2>&1; rc=$?
expect "fresh run refuses earlier checkpoints" 1 "already holds checkpoints.*latest: step-00000003.*--resume" "$D/log" $rc
[ "$(cat "$D/ck/latest")" = step-00000003 ] && pass "latest unmoved" || fail "latest moved" "$D/log"
"$ZINF" train "${TINY[@]}" --nvme-dir "$D/nvme" --steps 2 --checkpoint-dir "$D/ck" --overwrite-checkpoints > "$D/log" 2>&1; rc=$?
expect "--overwrite-checkpoints starts over" 0 "checkpoint: .*step-00000002" "$D/log" $rc
# 6. Re-saving the step latest names (resume with nothing left to do) keeps a loadable checkpoint.
"$ZINF" train "${TINY[@]}" --nvme-dir "$D/nvme" --steps 2 --checkpoint-dir "$D/ck" --resume > "$D/log" 2>&1; rc=$?
expect "re-save of latest's step" 0 "checkpoint: .*step-00000002" "$D/log" $rc
"$ZINF" train "${TINY[@]}" --nvme-dir "$D/nvme" --steps 3 --checkpoint-dir "$D/ck" --resume > "$D/log" 2>&1; rc=$?
expect "latest loads after a re-save" 0 "resumed at step 2" "$D/log" $rc
[ -d "$D/ck/step-00000003" ] && pass "the earlier run's step-00000003 kept aside, new one written" || fail "no step-00000003" "$D/log"
ls "$D/ck" | grep -q "step-00000003.replaced-1" && pass "replaced step directory kept" || fail "replaced step directory lost" "$D/log"

# 5. A flipped byte in a checkpoint is found, naming the file.
D=$(fresh flip)
"$ZINF" train "${TINY[@]}" --nvme-dir "$D/nvme" --steps 2 --checkpoint-dir "$D/ck" > "$D/a.log" 2>&1
F="$D/ck/step-00000002/state.safetensors"
printf '\x7f' | dd of="$F" bs=1 seek=$(( $(stat -c %s "$F") - 100 )) conv=notrunc status=none
"$ZINF" train "${TINY[@]}" --nvme-dir "$D/nvme" --steps 3 --checkpoint-dir "$D/ck" --resume > "$D/log" 2>&1; rc=$?
expect "flipped byte in a checkpoint refused" 1 "state.safetensors.*damaged" "$D/log" $rc

# 7. Mistakes that used to pass silently.
D=$(fresh mistakes)
"$ZINF" train "${TINY[@]}" --nvme-dir "$D/nvme" --steps 2 --checkpoint-every -1 > "$D/log" 2>&1; rc=$?
expect "--checkpoint-every -1 refused" 105 "checkpoint-every" "$D/log" $rc
"$ZINF" train "${TINY[@]}" --nvme-dir "$D/nvme" --steps 2 --print-every 0 > "$D/log" 2>&1; rc=$?
expect "--print-every 0 refused" 105 "print-every" "$D/log" $rc
# Not a terminal: a line for the first and the last step and every N-th, here every step of 3.
"$ZINF" train "${TINY[@]}" --nvme-dir "$D/nvme" --steps 3 --print-every 1 > "$D/log" 2>&1; rc=$?
[ "$rc" = 0 ] && [ "$(grep -cE "^\[#*\.*\] step [123]/3 \| loss" "$D/log")" = 3 ] && pass "--print-every 1 prints each step" \
  || fail "--print-every 1: exit $rc, wanted a line per step" "$D/log"
"$ZINF" train "${TINY[@]}" --nvme-dir "$D/nvme" --steps 2 --timeline "$D/missing/t" > "$D/log" 2>&1; rc=$?
expect "--timeline into a missing directory refused before training" 1 "missing does not exist" "$D/log" $rc
grep -q "step " "$D/log" && fail "trained before refusing --timeline" "$D/log"
# The Timeline as plan and sim write it: --timeline X.csv, --trace X.json; the old --timeline PREFIX
# still writes PREFIX.csv and PREFIX.trace.json, and says it is deprecated.
"$ZINF" train "${TINY[@]}" --nvme-dir "$D/nvme" --steps 1 --timeline "$D/tl.csv" --trace "$D/tl.json" > "$D/log" 2>&1; rc=$?
[ "$rc" = 0 ] && head -1 "$D/tl.csv" | grep -q rank && grep -q traceEvents "$D/tl.json" && ! grep -q deprecated "$D/log" \
  && pass "--timeline X.csv --trace X.json write the CSV and the Chrome trace" || fail "--timeline/--trace: exit $rc" "$D/log"
"$ZINF" train "${TINY[@]}" --nvme-dir "$D/nvme" --steps 1 --timeline "$D/old" > "$D/log" 2>&1; rc=$?
[ "$rc" = 0 ] && [ -s "$D/old.csv" ] && [ -s "$D/old.trace.json" ] && grep -q "deprecated" "$D/log" \
  && pass "--timeline PREFIX still writes both, with a deprecation warning" || fail "--timeline PREFIX: exit $rc" "$D/log"
echo x > "$D/a-file"
"$ZINF" train "${TINY[@]}" --nvme-dir "$D/nvme" --steps 2 --checkpoint-dir "$D/a-file/ck" > "$D/log" 2>&1; rc=$?
expect "unusable --checkpoint-dir refused before training" 1 "a-file/ck" "$D/log" $rc
grep -q "step " "$D/log" && fail "trained before refusing --checkpoint-dir" "$D/log"
"$ZINF" train "${TINY[@]}" --nvme-dir "$D/nvme" --steps 2 --adam-threads 100000 > "$D/log" 2>&1; rc=$?
expect "--adam-threads 100000 refused" 105 "adam-threads" "$D/log" $rc
mkfifo "$D/fifo"
timeout 30 "$ZINF" train "${TINY[@]}" --nvme-dir "$D/nvme" --steps 2 --data "$D/fifo" > "$D/log" 2>&1; rc=$?
expect "--data on a FIFO refused, no hang, naming the option (exit 2, a file refused as input)" 2 "fifo.*given to --data must be a regular file" "$D/log" $rc
"$ZINF" train "${TINY[@]}" --steps 2 --resume > "$D/log" 2>&1; rc=$?
expect "--resume without --checkpoint-dir refused" 1 "needs --checkpoint-dir" "$D/log" $rc

# 3/9. Numbers: bad DeepSpeed betas, a diverging lr, a duplicate key.
D=$(fresh numbers)
echo '{"train_batch_size": 8, "zero_optimization": {"stage": 3}, "optimizer": {"type": "Adam", "params": {"betas": [2, -1]}}}' > "$D/ds.json"
"$ZINF" train --model gpt-tiny --config "$D/ds.json" --steps 2 > "$D/log" 2>&1; rc=$?
expect "DeepSpeed betas [2, -1] refused" 2 "betas.*below 1" "$D/log" $rc
echo '{"train_batch_size": 8, "zero_optimization": {"stage": 3}, "zero_optimization": {"stage": 1}}' > "$D/dup.json"
"$ZINF" train --model gpt-tiny --config "$D/dup.json" --steps 2 > "$D/log" 2>&1; rc=$?
expect "duplicate DeepSpeed key refused" 2 "zero_optimization.*appears twice" "$D/log" $rc
printf 'zero_stage: 3\noptimizer: {lr: 1.0e10, grad_clip: 0}\n' > "$D/hot.yaml"
"$ZINF" train --model gpt-tiny --config "$D/hot.yaml" --steps 20 --checkpoint-dir "$D/ck" --checkpoint-every 1 > "$D/log" 2>&1; rc=$?
expect "lr 1e10 stops with exit 4, not NaN weights" 4 "diverged.*no checkpoint was kept.*set aside" "$D/log" $rc
[ ! -e "$D/ck/latest" ] && [ -d "$D/ck/step-00000001.diverged-1" ] && pass "the unconfirmed step-1 checkpoint is set aside, latest never named it" \
  || fail "the diverged run's checkpoints" "$D/log"

# sim: a profile too slow to simulate is refused, not a deadlock with an infinite step.
D=$(fresh sim)
sed 's/peak_flops:.*/peak_flops: 1e-300 FLOP\/s/' "$(dirname "$0")/../../hwprofiles/cpu-dev.yaml" > "$D/slow.yaml"
timeout 120 "$ZINF" sim --model gpt-tiny --hw "$D/slow.yaml" --config train-nvme > "$D/log" 2>&1; rc=$?
expect "sim: tiny peak_flops refused" 2 "peak_flops" "$D/log" $rc

# validate: a mistake in its options, and a small real run.
D=$(fresh validate)
"$ZINF" validate --model gpt-tiny --hw cpu-dev --config train-nvme --steps 3 --warmup 3 --out-dir "$D/out" > "$D/log" 2>&1; rc=$?
expect "validate: --warmup >= --steps refused" 105 "warm-up" "$D/log" $rc
timeout 300 "$ZINF" validate --model gpt-tiny --hw cpu-dev --config train-nvme --steps 3 --warmup 1 --out-dir "$D/out" > "$D/log" 2>&1; rc=$?
expect "validate: a small run" 0 "" "$D/log" $rc

fi

# 4. MPI: one rank's error ends the job within seconds naming the rank; a frozen rank ends it
#    within the collective timeout.
if [ "$PART" = mpi ]; then
  D=$(fresh mpi-error)
  mkdir "$D/elsewhere" && ln -s "$D/elsewhere" "$D/nvme/rank1"  # rank 1 refuses at startup
  START=$(date +%s)
  timeout 100 "$MPIEXEC" -np 2 "$ZINF" train "${TINY[@]}" --nvme-dir "$D/nvme" --steps 5 > "$D/log" 2>&1 < /dev/null; rc=$?
  ELAPSED=$(( $(date +%s) - START ))
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$ELAPSED" -le 30 ] && grep -Eq "rank 1 of 2: error: .*rank1.*symbolic link" "$D/log"; then
    pass "MPI: rank 1's startup error ends the job in ${ELAPSED} s, naming rank 1"
  else
    fail "MPI: rank 1's startup error: exit $rc after ${ELAPSED} s" "$D/log"
  fi
  D=$(fresh mpi-frozen)
  "$MPIEXEC" -np 2 "$ZINF" train "${TINY[@]}" --nvme-dir "$D/nvme" --steps 100000 --comm-timeout 5 > "$D/log" 2>&1 < /dev/null &
  JOB=$!
  if wait_for_step "$D/log"; then
    VICTIM=$(pgrep -f -- "--nvme-dir $D/nvme" | while read -r p; do
      grep -qz "OMPI_COMM_WORLD_RANK=1" "/proc/$p/environ" 2>/dev/null && echo "$p"; done | head -n 1)
    START=$(date +%s)
    [ -n "$VICTIM" ] && kill -STOP "$VICTIM"
    for _ in $(seq 1 120); do kill -0 "$JOB" 2>/dev/null || break; sleep 0.5; done
    ELAPSED=$(( $(date +%s) - START ))
    if kill -0 "$JOB" 2>/dev/null; then
      fail "MPI: a frozen rank 1 left the job running ${ELAPSED} s" "$D/log"; kill -9 "$JOB"; [ -n "$VICTIM" ] && kill -9 "$VICTIM"
    else
      wait "$JOB"; rc=$?
      if [ "$rc" -ne 0 ] && grep -q "did not complete within 5 s" "$D/log"; then
        pass "MPI: a frozen rank ends the job in ${ELAPSED} s (timeout 5 s)"
      else
        fail "MPI: frozen rank: exit $rc after ${ELAPSED} s" "$D/log"
      fi
    fi
  else
    fail "MPI: the job never trained" "$D/log"; kill -9 "$JOB"
  fi
fi

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
