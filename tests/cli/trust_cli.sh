#!/usr/bin/env bash
# `zinf train` against hostile and unlucky input, end to end: a loss that explodes while finite,
# the checkpoint kept then, signals that stop a run (SIGHUP, SIGQUIT, SIGUSR1) and a closed output
# pipe, files that are devices, FIFOs, alias bombs or too large, checkpoints edited or resumed with
# other settings, a swap file corrupted mid-run, output paths inside locked directories, a
# directory named twice or under a world-writable parent, and (with MPI) ranks started with
# different settings. The lower layers have their own tests (checkpoint_dir_test, bounded_input_test,
# divergence_test, mpi_collectives_late_rank); experiments/trust/probes.sh runs the longer probes.
# Usage: trust_cli.sh ZINF_BINARY [MPIEXEC]. Prints "N passed, M failed".
set -u
ZINF=$1
MPIEXEC=${2:-}
BASE=$(mktemp -d /var/tmp/zinf-trust-XXXXXX)
trap 'rm -rf "$BASE"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/harness.sh"
TINY=(--model gpt-tiny --config train-nvme)
fresh() { local d="$BASE/$1"; rm -rf "$d"; mkdir -p "$d/nv"; echo "$d"; }
wait_for_step() { for _ in $(seq 1 120); do grep -q "step " "$1" 2>/dev/null && return 0; sleep 0.5; done; return 1; }
printf 'zero_stage: 3\noffload: {params: nvme, optimizer: nvme}\noptimizer: {lr: 1.0e-3}\n' > "$BASE/ok.yaml"
printf 'zero_stage: 3\noffload: {params: nvme, optimizer: nvme}\noptimizer: {lr: 1.0e6, grad_clip: 0}\n' > "$BASE/hot.yaml"

# Divergence: three good steps, then lr 1e6 (allowed as a change). Step 4 trains from the good
# state and its update explodes the weights; step 5's loss, finite but huge, breaks the rule. The
# checkpoint of step 4 waited for step 5 to confirm it, so it is set aside and latest stays on
# step 3, whose first step resumed with the same settings recomputes the loss that confirmed it.
D=$(fresh diverge)
"$ZINF" train --model gpt-tiny --config "$BASE/ok.yaml" --nvme-dir "$D/nv" --steps 3 --checkpoint-dir "$D/ck" > "$D/a.log" 2>&1
"$ZINF" train --model gpt-tiny --config "$BASE/hot.yaml" --nvme-dir "$D/nv" --steps 30 --checkpoint-dir "$D/ck" \
  --checkpoint-every 1 --resume --allow-changes --export "$D/out.st" --print-every 1 > "$D/log" 2>&1; rc=$?
expect "lr 1e6: a finite explosion stops with exit 4, naming the rule" 4 "step 5: loss .* median loss" "$D/log" $rc
[ "$(cat "$D/ck/latest")" = step-00000003 ] && [ -d "$D/ck/step-00000004.diverged-1" ] && [ ! -e "$D/out.st" ] \
  && pass "latest stays on the confirmed step 3; step 4, which the explosion came from, is set aside; no export" \
  || fail "checkpoints after the divergence: latest $(cat "$D/ck/latest" 2>/dev/null)" "$D/log"
WANT=$(sed -n 's/.*step 4\/30 | loss \([0-9.]*\).*/\1/p' "$D/log")
"$ZINF" train --model gpt-tiny --config "$BASE/hot.yaml" --nvme-dir "$D/nv" --steps 4 --checkpoint-dir "$D/ck" \
  --resume --allow-changes --print-every 1 > "$D/r.log" 2>&1; rc=$?
expect "the kept checkpoint's first step trains on with the diverging settings, at the loss that confirmed it" 0 \
  "step 4/4 \| loss ${WANT:-none} " "$D/r.log" $rc

# A run stopped (kill -9, power loss) after saving a step but before the next step confirmed it
# leaves a step directory and no `latest`; removing `latest` makes that state without a race. A
# fresh start is refused pointing at --resume, which verifies the newest step, continues from it
# bitwise and confirms it; an unconfirmed step whose first step diverges is set aside.
D=$(fresh unconfirmed)
"$ZINF" train "${TINY[@]}" --nvme-dir "$D/nv" --steps 4 --export "$D/ref.st" > "$D/ref.log" 2>&1
"$ZINF" train "${TINY[@]}" --nvme-dir "$D/nv" --steps 2 --checkpoint-dir "$D/ck" > "$D/a.log" 2>&1
rm "$D/ck/latest"
"$ZINF" train "${TINY[@]}" --nvme-dir "$D/nv" --steps 4 --checkpoint-dir "$D/ck" > "$D/f.log" 2>&1; rc=$?
expect "no latest: a fresh start is refused, pointing at --resume" 1 "no .latest.*--resume verifies" "$D/f.log" $rc
"$ZINF" train "${TINY[@]}" --nvme-dir "$D/nv" --steps 4 --checkpoint-dir "$D/ck" --resume --export "$D/out.st" \
  > "$D/log" 2>&1; rc=$?
expect "no latest: --resume continues from the newest whole step, said" 0 "step-00000002 stopped before a step confirmed" "$D/log" $rc
cmp -s "$D/ref.st" "$D/out.st" && [ "$(cat "$D/ck/latest" 2>/dev/null)" = step-00000004 ] \
  && pass "... ending bitwise equal to an uninterrupted run, latest on step 4" || fail "resumed without latest: not bitwise, or latest wrong" "$D/log"
D=$BASE/diverge
# The resumed run above saved a sound step 4 over it: the exploded one takes its place.
rm -rf "$D/ck/step-00000004" && mv "$D/ck/step-00000004.diverged-1" "$D/ck/step-00000004" && rm "$D/ck/latest"
"$ZINF" train --model gpt-tiny --config "$BASE/hot.yaml" --nvme-dir "$D/nv" --steps 6 --checkpoint-dir "$D/ck" \
  --resume --print-every 1 > "$D/u.log" 2>&1; rc=$?
expect "no latest, the newest step holds exploded weights: its first step stops with exit 4" 4 "step 5: loss" "$D/u.log" $rc
[ -d "$D/ck/step-00000004.diverged-1" ] && [ ! -e "$D/ck/step-00000004" ] && [ ! -e "$D/ck/latest" ] \
  && pass "... and sets it aside, pointing latest at nothing" || fail "the unconfirmed diverged step was not set aside" "$D/u.log"

# Signals: each stops after the step with a checkpoint; a closed output pipe does not end training.
for sig in HUP QUIT USR1; do
  D=$(fresh "sig-$sig")
  "$ZINF" train "${TINY[@]}" --nvme-dir "$D/nv" --steps 100000 --checkpoint-dir "$D/ck" > "$D/log" 2>&1 &
  RUN=$!
  if wait_for_step "$D/log"; then kill -"$sig" $RUN; wait $RUN; rc=$?; else rc=none; kill -9 $RUN; fi
  expect "SIG$sig stops after the step and saves" $((128 + $(kill -l "$sig"))) "SIG$sig after step [0-9]+: stopped, checkpoint saved" "$D/log" $rc
done
D=$(fresh pipe)
"$ZINF" train "${TINY[@]}" --nvme-dir "$D/nv" --steps 12 --print-every 1 --checkpoint-dir "$D/ck" 2> "$D/log" | head -n 2 > /dev/null
rc=${PIPESTATUS[0]}
expect "zinf train | head -2: training goes on to the end (SIGPIPE ignored)" 0 "standard output is closed" "$D/log" $rc
[ "$(cat "$D/ck/latest" 2>/dev/null)" = step-00000012 ] && pass "... and saves its last step" || fail "no step 12 after a closed pipe" "$D/log"

# Files that are not what they claim: refused at once, naming them.
D=$(fresh files)
mkfifo "$D/fifo.yaml"
for opt in --config --model --hw; do
  args=(--model gpt-tiny --config train-nvme --hw cpu-dev)
  for i in 0 2 4; do [ "${args[$i]}" = "$opt" ] && args[$((i + 1))]=/dev/zero; done
  timeout -k 5 20 "$ZINF" train "${args[@]}" --steps 1 --nvme-dir "$D/nv" > "$D/log" 2>&1; rc=$?
  expect "$opt /dev/zero refused as a character device" 2 "/dev/zero.*character device" "$D/log" $rc
done
timeout -k 5 20 "$ZINF" train --model gpt-tiny --config "$D/fifo.yaml" --steps 1 --nvme-dir "$D/nv" > "$D/log" 2>&1; rc=$?
expect "--config on a FIFO refused, no hang" 2 "fifo.yaml.*FIFO" "$D/log" $rc
{ echo 'a0: &a0 [x, x, x, x, x, x, x, x, x, x]'
  for i in 1 2 3 4 5 6 7 8; do printf 'a%d: &a%d [' $i $i; for k in 1 2 3 4 5 6 7 8 9; do printf '*a%d, ' $((i - 1)); done; printf '*a%d]\n' $((i - 1)); done
  echo 'zero_stage: 3'; } > "$D/bomb.yaml"
timeout -k 5 20 "$ZINF" train --model gpt-tiny --config "$D/bomb.yaml" --steps 1 --nvme-dir "$D/nv" > "$D/log" 2>&1; rc=$?
expect "a YAML alias bomb refused within seconds" 2 "bomb.yaml.*aliases" "$D/log" $rc

# Checkpoints: edited by hand, without checksums, resumed with other settings.
D=$(fresh ckpt)
"$ZINF" train "${TINY[@]}" --nvme-dir "$D/nv" --steps 2 --checkpoint-dir "$D/ck" > "$D/a.log" 2>&1
cp -a "$D/ck" "$D/ck.orig"
again() { rm -rf "$D/ck" && cp -a "$D/ck.orig" "$D/ck"; }
resume() { timeout -k 5 60 "$ZINF" train "$@" --nvme-dir "$D/nv" --steps 3 --checkpoint-dir "$D/ck" --resume > "$D/log" 2>&1; rc=$?; }
sed -i 's/"step": 2/"step": 7/' "$D/ck/step-00000002/meta.json"
resume "${TINY[@]}"
expect "an edited step in meta.json refused" 1 "meta.json: the file is damaged" "$D/log" $rc
again; head -c 4096 /dev/zero >> "$D/ck/step-00000002/meta.json"; resume "${TINY[@]}"
expect "a NUL-padded meta.json refused" 1 "meta.json: the file is damaged" "$D/log" $rc
again; rm "$D/ck/step-00000002/checksums.json"; resume "${TINY[@]}"
expect "a checkpoint without checksums refused" 1 "no checksums.json.*--accept-unverified" "$D/log" $rc
resume "${TINY[@]}" --accept-unverified
expect "... and resumed with --accept-unverified, saying so" 0 "loaded unverified" "$D/log" $rc
sed 's/lr: 1.0e-3/lr: 2.0e-3/' "$(dirname "$0")/../../configs/train-nvme.yaml" > "$D/lr2.yaml"
again; resume --model gpt-tiny --config "$D/lr2.yaml" --seed 7
expect "resume with another seed and lr refused, naming both" 1 "2 ways" "$D/log" $rc
grep -q "data seed (--seed): 1234 -> 7" "$D/log" && grep -q "config.optimizer.lr: 0.001 -> 0.002" "$D/log" \
  && pass "... each difference named" || fail "the differences are not named" "$D/log"
resume --model gpt-tiny --config "$D/lr2.yaml" --seed 7 --allow-changes
expect "... and resumed with --allow-changes, saying what changed" 0 "with 2 changes" "$D/log" $rc

# A swap file corrupted behind the store's back, mid-run: the run stops naming file and offset.
D=$(fresh swap)
"$ZINF" train "${TINY[@]}" --nvme-dir "$D/nv" --steps 100000 > "$D/log" 2>&1 &
RUN=$!
if wait_for_step "$D/log"; then
  sleep 0.5
  # The run rewrites master.zt every step: zeros that land between a step's read and its write are
  # overwritten unseen, so they are written again until the run stops (or 30 s pass).
  for _ in $(seq 1 60); do
    kill -0 $RUN 2>/dev/null || break
    head -c 65536 /dev/zero | dd of="$D/nv/rank0/master.zt" bs=4096 seek=4 conv=notrunc status=none
    sleep 0.5
  done
  kill -0 $RUN 2>/dev/null && { kill -9 $RUN; rc=running; } || { wait $RUN; rc=$?; }
else
  rc=none; kill -9 $RUN
fi
expect "zeros written into master.zt mid-run stop the run, naming file and offset" 1 "master.zt at offset [0-9]+.*checksum mismatch" "$D/log" $rc

# Paths: outputs inside locked directories, a directory named twice, an unsafe parent.
D=$(fresh paths)
"$ZINF" train "${TINY[@]}" --nvme-dir "$D/nv" --steps 1 --checkpoint-dir "$D/ck" > "$D/a.log" 2>&1
"$ZINF" train "${TINY[@]}" --nvme-dir "$D/nv" --steps 2 --checkpoint-dir "$D/ck" --resume --export "$D/ck/latest" > "$D/log" 2>&1; rc=$?
expect "--export CK/latest refused before training" 1 "--export .*inside --checkpoint-dir" "$D/log" $rc
[ "$(cat "$D/ck/latest")" = step-00000001 ] && pass "... latest intact" || fail "latest was replaced" "$D/log"
"$ZINF" train "${TINY[@]}" --nvme-dir "$D/nv" --steps 1 --export "$D/nv/rank0/x.safetensors" > "$D/log" 2>&1; rc=$?
expect "--export into a rank's NVMe directory refused before training" 1 "--export .*inside --nvme-dir .*rank0/" "$D/log" $rc
"$ZINF" train "${TINY[@]}" --nvme-dir "$D/nv" --steps 1 --checkpoint-dir "$D/nv/rank0" > "$D/log" 2>&1; rc=$?
expect "--checkpoint-dir NV/rank0 refused as one directory named twice" 1 "name one directory twice" "$D/log" $rc
mkdir -p "$D/open" && chmod 0777 "$D/open"
"$ZINF" train "${TINY[@]}" --nvme-dir "$D/nv" --steps 1 --checkpoint-dir "$D/open/ck" > "$D/log" 2>&1; rc=$?
expect "a checkpoint directory under a world-writable, non-sticky parent refused" 1 "open is writable by every user and not sticky" "$D/log" $rc
"$ZINF" train "${TINY[@]}" --nvme-dir "$D/nv" --steps 1 --device-memory nan > "$D/log" 2>&1; rc=$?
expect "--device-memory nan refused" 105 "device-memory.*finite" "$D/log" $rc

# MPI: ranks started with different settings are refused before training, naming fields and ranks.
if [ -n "$MPIEXEC" ]; then
  D=$(fresh mpi)
  timeout -k 5 120 "$MPIEXEC" -np 1 "$ZINF" train "${TINY[@]}" --nvme-dir "$D/nv" --steps 3 : \
    -np 1 "$ZINF" train --model gpt-tiny --config "$BASE/ok.yaml" --nvme-dir "$D/nv" --steps 4 > "$D/log" 2>&1 < /dev/null; rc=$?
  [ $rc != 0 ] && ! grep -q "step 1/" "$D/log" && grep -q -- "--steps: rank 0 has 3; rank 1 has 4" "$D/log" \
    && grep -q "config.optimizer.grad_clip: rank 0 has 1; rank 1 has 0" "$D/log" && pass "MPI: ranks with different steps and configs refused before training, each named" \
    || fail "MPI: ranks that disagree (exit $rc)" "$D/log"
else
  echo "skipped: MPI case (no mpiexec given)"
fi

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
