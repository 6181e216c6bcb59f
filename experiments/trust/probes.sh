#!/usr/bin/env bash
# `zinf train` tried as a hostile or unlucky user would: divergence, ranks that disagree, inputs
# without bounds, checkpoints edited by hand, swap files corrupted mid-run, signals, output paths,
# and a few small mistakes. Each case says what must hold (a clear error naming the file, field or
# rank, or a clean stop with nothing lost, in bounded time) and prints "hold" or "FAIL"; the last
# line counts them. It runs against any zinf binary, older ones included, so the count before and
# after a change can be compared.
#   bash experiments/trust/probes.sh [ZINF] [MPIEXEC]      (defaults: build/zinf, mpiexec if found)
# About 3 minutes on 2 cores. Cases needing MPI are counted as failures without an MPI launcher.
set -u
cd "$(dirname "$0")/../.."
Z=$(realpath "${1:-build/zinf}")
MPI=${2:-$(command -v mpiexec || true)}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
BASE=$(mktemp -d /var/tmp/zinf-probes-XXXXXX)
trap 'rm -rf "$BASE"' EXIT
HOLD=0
FAILS=0
hold() { HOLD=$((HOLD + 1)); echo "hold: $1"; }
miss() { FAILS=$((FAILS + 1)); echo "FAIL: $1"; [ -f "${2:-}" ] && tail -n 4 "$2" | cut -c1-300 | sed 's/^/      /'; }
# check NAME COND LOG: COND is a shell test evaluated after the command ran.
check() { if eval "$2"; then hold "$1"; else miss "$1" "${3:-}"; fi; }
fresh() { local d="$BASE/$1"; rm -rf "$d"; mkdir -p "$d/nv"; echo "$d"; }
wait_step() { for _ in $(seq 1 120); do grep -q "step " "$1" 2>/dev/null && return 0; sleep 0.5; done; return 1; }
wait_gone() { for _ in $(seq 1 "$2"); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.5; done; return 1; }
# The pid of MPI rank R among the processes whose command line mentions PATTERN.
rank_pid() { pgrep -f -- "$2" | while read -r p; do grep -qz "OMPI_COMM_WORLD_RANK=$1" "/proc/$p/environ" 2>/dev/null && echo "$p"; done | head -n 1; }
TINY=(--model gpt-tiny --config train-nvme)
loss_at() { sed -n "s/.*step $2\/[0-9]* | loss \([0-9.e+-]*\).*/\1/p" "$1" | tail -n 1; }
sane() { awk -v x="${1:-nan}" 'BEGIN { exit !(x + 0 == x && x < 10) }'; }
printf 'zero_stage: 3\noffload: {params: nvme, optimizer: nvme}\noptimizer: {lr: 1.0e-3}\n' > "$BASE/ok.yaml"
printf 'zero_stage: 3\noffload: {params: nvme, optimizer: nvme}\noptimizer: {lr: 1.0e6, grad_clip: 0}\n' > "$BASE/hot.yaml"
printf 'zero_stage: 3\noffload: {params: nvme, optimizer: nvme}\noptimizer: {lr: 1.0e10, grad_clip: 0}\n' > "$BASE/hotter.yaml"

echo "== divergence"
D=$(fresh div6)
"$Z" train --model gpt-tiny --config "$BASE/hot.yaml" --nvme-dir "$D/nv" --steps 50 --checkpoint-dir "$D/ck" \
  --checkpoint-every 1 --export "$D/out.safetensors" --print-every 1 > "$D/log" 2>&1; rc=$?
check "lr 1e6 (loss finite but exploding) stops with exit 4" '[ $rc = 4 ]' "$D/log"
check "lr 1e6: no export written from the diverged run" '[ ! -e "$D/out.safetensors" ]' "$D/log"
kept_trains_on() {  # DIR CONFIG: the checkpoint `latest` names, if any, trains a first step at a sane loss
  local d=$1 latest
  latest=$(cat "$d/ck/latest" 2>/dev/null | sed 's/step-0*//')
  if [ -z "$latest" ]; then grep -qiE "no checkpoint (was )?(kept|confirmed|saved)|nothing (was )?saved" "$d/log"; return; fi
  "$Z" train --model gpt-tiny --config "$2" --nvme-dir "$d/nv" --steps $((latest + 1)) --checkpoint-dir "$d/ck" --resume \
    --print-every 1 "${@:3}" > "$d/resume.log" 2>&1 && sane "$(loss_at "$d/resume.log" $((latest + 1)))"
}
check "lr 1e6: the kept checkpoint trains on (first step from it at a sane loss)" 'kept_trains_on "$D" "$BASE/hot.yaml"' "$D/resume.log"
D=$(fresh div10)
"$Z" train --model gpt-tiny --config "$BASE/hotter.yaml" --nvme-dir "$D/nv" --steps 20 --checkpoint-dir "$D/ck" \
  --checkpoint-every 1 > "$D/log" 2>&1; rc=$?
check "lr 1e10 stops with exit 4" '[ $rc = 4 ]' "$D/log"
check "lr 1e10: the kept checkpoint trains on" 'kept_trains_on "$D" "$BASE/hotter.yaml"' "$D/resume.log"
D=$(fresh divlate)
"$Z" train --model gpt-tiny --config "$BASE/ok.yaml" --nvme-dir "$D/nv" --steps 3 --checkpoint-dir "$D/ck" > "$D/a.log" 2>&1
"$Z" train --model gpt-tiny --config "$BASE/hot.yaml" --nvme-dir "$D/nv" --steps 30 --checkpoint-dir "$D/ck" \
  --checkpoint-every 1 --resume --allow-changes > "$D/log" 2>&1; rc=$?
check "good steps, then lr 1e6 on resume: exit 4, the kept checkpoint trains on" \
  '[ $rc = 4 ] && [ -s "$D/ck/latest" ] && kept_trains_on "$D" "$BASE/hot.yaml" --allow-changes' "$D/log"

echo "== ranks that must agree"
if [ -n "$MPI" ]; then
  mpmd() {  # DIR ARGS-RANK0 -- ARGS-RANK1: two ranks with different command lines
    local d=$1; shift; local a=() b=(); while [ "$1" != "--" ]; do a+=("$1"); shift; done; shift; b=("$@")
    timeout -k 5 120 "$MPI" -np 1 "$Z" train "${a[@]}" : -np 1 "$Z" train "${b[@]}" > "$d/log" 2>&1 < /dev/null
  }
  D=$(fresh lr)
  sed 's/lr: 1.0e-3/lr: 2.0e-3/' configs/train-nvme.yaml > "$BASE/lr2.yaml"
  mpmd "$D" "${TINY[@]}" --nvme-dir "$D/nv" --steps 3 --checkpoint-dir "$D/ck" -- --model gpt-tiny --config "$BASE/lr2.yaml" \
    --nvme-dir "$D/nv" --steps 3 --checkpoint-dir "$D/ck"; rc=$?
  check "MPI: ranks with different learning rates refused before training, naming ranks and field" \
    '[ $rc != 0 ] && ! grep -q "step 1/" "$D/log" && grep -q "config.optimizer.lr: rank 0 has 0.001; rank 1 has 0.002" "$D/log"' "$D/log"
  check "MPI: a refused start leaves no temporary files" '[ -z "$(find "$D" -name "*.tmp*")" ]'
  D=$(fresh model)
  mpmd "$D" "${TINY[@]}" --nvme-dir "$D/nv" --steps 3 -- --model gpt-mini --config train-nvme --nvme-dir "$D/nv" --steps 3; rc=$?
  check "MPI: ranks with different models refused, naming the model" \
    '[ $rc != 0 ] && grep -qiE "model" "$D/log" && grep -q "rank 1" "$D/log" && ! grep -q "NBC" "$D/log"' "$D/log"
  D=$(fresh steps)
  mpmd "$D" "${TINY[@]}" --nvme-dir "$D/nv" --steps 3 -- "${TINY[@]}" --nvme-dir "$D/nv" --steps 5; rc=$?
  check "MPI: ranks with different --steps refused, naming steps" \
    '[ $rc != 0 ] && grep -qiE "steps" "$D/log" && grep -q "rank 1" "$D/log" && ! grep -q "NBC" "$D/log"' "$D/log"
  D=$(fresh seed)
  mpmd "$D" "${TINY[@]}" --nvme-dir "$D/nv" --steps 3 -- "${TINY[@]}" --nvme-dir "$D/nv" --steps 3 --seed 7; rc=$?
  check "MPI: ranks with different data seeds refused, naming the seed" '[ $rc != 0 ] && grep -qiE "seed" "$D/log"' "$D/log"
  frozen() {  # DIR SLEEP: freeze rank 1 for SLEEP seconds (0: until the job ends)
    local d=$1
    "$MPI" -np 2 "$Z" train "${TINY[@]}" --nvme-dir "$d/nv" --steps 100000 --comm-timeout 5 > "$d/log" 2>&1 < /dev/null &
    local job=$! victim
    wait_step "$d/log" || { kill -9 $job; return 1; }
    victim=$(rank_pid 1 "--nvme-dir $d/nv")
    START=$(date +%s)
    kill -STOP "$victim"
    if [ "$2" -gt 0 ]; then sleep "$2"; kill -CONT "$victim"; fi
    wait_gone $job 120 || { kill -9 $job "$victim"; return 1; }
    ELAPSED=$(( $(date +%s) - START ))
  }
  D=$(fresh frozen)
  frozen "$D" 0
  check "MPI: a frozen rank ends the job within the timeout, named as the rank that did not arrive" \
    '[ "${ELAPSED:-999}" -le 30 ] && grep -qE "rank 1 (did not arrive|was not there|never arrived)" "$D/log"' "$D/log"
  D=$(fresh frozen-late)
  frozen "$D" 9
  check "MPI: the frozen rank, woken late, does not blame the others" \
    '! grep -E "rank 1( of 2)?:" "$D/log" | grep -qiE "a peer|rank 0 did not"' "$D/log"
  D=$(fresh killed)
  "$MPI" -np 2 "$Z" train "${TINY[@]}" --nvme-dir "$D/nv" --steps 100000 > "$D/log" 2>&1 < /dev/null &
  JOB=$!
  if wait_step "$D/log"; then
    kill -9 "$(rank_pid 1 "--nvme-dir $D/nv")"; START=$(date +%s); wait_gone $JOB 60; ELAPSED=$(( $(date +%s) - START ))
  fi
  check "MPI: a killed rank ends the job within seconds" '! kill -0 $JOB 2>/dev/null && [ "${ELAPSED:-999}" -le 15 ]' "$D/log"
  kill -9 $JOB 2>/dev/null
  D=$(fresh mpisig)
  "$MPI" -np 2 "$Z" train "${TINY[@]}" --nvme-dir "$D/nv" --steps 100000 --checkpoint-dir "$D/ck" > "$D/log" 2>&1 < /dev/null &
  JOB=$!
  wait_step "$D/log" && kill -TERM "$(rank_pid 1 "--nvme-dir $D/nv")"; wait_gone $JOB 60; wait $JOB; rc=$?
  check "MPI: SIGTERM to one rank stops the job after the step with a checkpoint" '[ $rc != 0 ] && [ -s "$D/ck/latest" ]' "$D/log"
else
  for c in lr tmp model steps seed frozen frozen-late killed mpisig; do miss "MPI case $c: no MPI launcher"; done
fi

echo "== inputs without bounds"
D=$(fresh bounds)
quick() { timeout -k 5 20 "$Z" "$@" > "$D/log" 2>&1; rc=$?; }
quick train --model gpt-tiny --config /dev/zero --nvme-dir "$D/nv" --steps 1
check "--config /dev/zero refused at once, naming it" '[ $rc != 124 ] && [ $rc != 0 ] && grep -q "/dev/zero" "$D/log"' "$D/log"
quick train --model /dev/zero --config train-nvme --nvme-dir "$D/nv" --steps 1
check "--model /dev/zero refused at once, naming it" '[ $rc != 124 ] && [ $rc != 0 ] && grep -q "/dev/zero" "$D/log"' "$D/log"
quick train --model gpt-tiny --hw /dev/zero --config train-nvme --nvme-dir "$D/nv" --steps 1
check "--hw /dev/zero refused at once, naming it" '[ $rc != 124 ] && [ $rc != 0 ] && grep -q "/dev/zero" "$D/log"' "$D/log"
mkfifo "$D/fifo.yaml"
quick train --model gpt-tiny --config "$D/fifo.yaml" --nvme-dir "$D/nv" --steps 1
check "--config on a FIFO refused, no hang" '[ $rc != 124 ] && [ $rc != 0 ] && grep -q "fifo.yaml" "$D/log"' "$D/log"
quick train --model "$D/fifo.yaml" --config train-nvme --nvme-dir "$D/nv" --steps 1
check "--model on a FIFO refused, no hang" '[ $rc != 124 ] && [ $rc != 0 ] && grep -q "fifo.yaml" "$D/log"' "$D/log"
quick sweep /dev/zero -o "$D/sweep.csv"
check "a sweep spec /dev/zero refused at once, naming it" '[ $rc != 124 ] && [ $rc != 0 ] && grep -q "/dev/zero" "$D/log"' "$D/log"
quick train "${TINY[@]}" --nvme-dir "$D/nv" --steps 1 --data /dev/zero
check "--data /dev/zero refused at once, naming it" '[ $rc != 124 ] && [ $rc != 0 ] && grep -q "/dev/zero" "$D/log"' "$D/log"
python3 - "$D/bomb.yaml" <<'EOF'
import sys
lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x","x"]']
for i in range(1, 9):
    lines.append(f'a{i}: &a{i} [' + ','.join([f'*a{i-1}'] * 10) + ']')
lines.append('zero_stage: 3')
open(sys.argv[1], 'w').write('\n'.join(lines) + '\n')
EOF
quick train --model gpt-tiny --config "$D/bomb.yaml" --nvme-dir "$D/nv" --steps 1
check "a YAML alias bomb ($(stat -c %s "$D/bomb.yaml") bytes) refused within seconds, naming the file" \
  '[ $rc != 124 ] && [ $rc != 0 ] && grep -q "bomb.yaml" "$D/log"' "$D/log"
cp "$D/bomb.yaml" "$D/bomb-model.yaml" && cat models/gpt-tiny.yaml | grep -v "^#" | sed 's/^name:.*/name: bomb/' >> "$D/bomb-model.yaml"
sed -i '/^zero_stage/d' "$D/bomb-model.yaml"
quick plan --model "$D/bomb-model.yaml" --hw cpu-dev --config train-nvme
check "a YAML alias bomb as a model file refused within seconds" '[ $rc != 124 ] && [ $rc != 0 ] && grep -q "bomb-model.yaml" "$D/log"' "$D/log"
{ cat "$BASE/ok.yaml"; head -c 64000000 /dev/zero | tr '\0' '#'; echo; } > "$D/huge.yaml"
quick train --model gpt-tiny --config "$D/huge.yaml" --nvme-dir "$D/nv" --steps 1
check "a 64 MB config refused by its size, naming the file" '[ $rc != 0 ] && grep -q "huge.yaml" "$D/log"' "$D/log"
rm -f "$D/huge.yaml"
"$Z" train "${TINY[@]}" --nvme-dir "$D/nv" --steps 2 --checkpoint-dir "$D/ck" > "$D/a.log" 2>&1
cp -a "$D/ck" "$D/ck.orig"
truncate -s 100G "$D/ck/step-00000002/meta.json"
quick train "${TINY[@]}" --nvme-dir "$D/nv" --steps 3 --checkpoint-dir "$D/ck" --resume
check "a 100 GB meta.json refused by its size, naming it" '[ $rc != 124 ] && [ $rc != 0 ] && grep -q "meta.json" "$D/log"' "$D/log"
rm -rf "$D/ck" && cp -a "$D/ck.orig" "$D/ck"
head -c 4096 /dev/zero >> "$D/ck/step-00000002/meta.json"
quick train "${TINY[@]}" --nvme-dir "$D/nv" --steps 3 --checkpoint-dir "$D/ck" --resume
check "a NUL-padded meta.json refused, naming it" '[ $rc != 0 ] && grep -q "meta.json" "$D/log"' "$D/log"
rm -rf "$D/ck" && cp -a "$D/ck.orig" "$D/ck"
rm "$D/ck/latest" && mkfifo "$D/ck/latest"
quick train "${TINY[@]}" --nvme-dir "$D/nv" --steps 3 --checkpoint-dir "$D/ck" --resume
check "a FIFO as latest refused, no hang" '[ $rc != 124 ] && [ $rc != 0 ] && grep -q "latest" "$D/log"' "$D/log"

echo "== checkpoints"
D=$(fresh ckpt)
"$Z" train "${TINY[@]}" --nvme-dir "$D/nv" --steps 2 --checkpoint-dir "$D/ck" > "$D/a.log" 2>&1
cp -a "$D/ck" "$D/ck.orig"
S="$D/ck/step-00000002"
again() { rm -rf "$D/ck" && cp -a "$D/ck.orig" "$D/ck"; }
resume() { timeout -k 5 60 "$Z" train "${TINY[@]}" --nvme-dir "$D/nv" --steps 3 --checkpoint-dir "$D/ck" --resume "$@" > "$D/log" 2>&1; rc=$?; }
printf '\x7f' | dd of="$S/state.safetensors" bs=1 seek=$(( $(stat -c %s "$S/state.safetensors") - 100 )) conv=notrunc status=none
resume
check "a flipped byte in the state refused, naming the file" '[ $rc = 1 ] && grep -q "state.safetensors" "$D/log"' "$D/log"
again; truncate -s 1000 "$S/state.safetensors"; resume
check "a truncated state refused, naming the file" '[ $rc = 1 ] && grep -q "state.safetensors" "$D/log"' "$D/log"
edit_meta() { python3 -c "import json,sys; p='$S/meta.json'; m=json.load(open(p)); $1; open(p,'w').write(json.dumps(m, indent=2))"; }
unchecksum() { edit_meta "m.pop('checksums', None)"; find "$S" -maxdepth 1 -type f ! -name meta.json ! -name state.safetensors -delete; }
again; unchecksum; resume
check "a checkpoint with its checksums deleted is refused (not loaded unverified)" '[ $rc != 0 ] && grep -qiE "checksum|unverified" "$D/log"' "$D/log"
again; unchecksum; resume --accept-unverified
check "... and loads with --accept-unverified, saying so" '[ $rc = 0 ] && grep -qi "unverified" "$D/log"' "$D/log"
again; edit_meta "m['step'] = 7"; resume
check "an edited step in meta.json refused" '[ $rc != 0 ] && grep -q "meta.json" "$D/log"' "$D/log"
again; edit_meta "m['data_position'] = 0"; resume
check "an edited data_position in meta.json refused" '[ $rc != 0 ] && grep -q "meta.json" "$D/log"' "$D/log"
again; echo extra > "$S/planted.bin"; resume
check "a file planted in a step directory refused (every file is covered)" '[ $rc != 0 ] && grep -q "planted.bin" "$D/log"' "$D/log"
again; resume --seed 99
check "resume with another --seed refused, naming it" '[ $rc != 0 ] && grep -qi "seed" "$D/log"' "$D/log"
again; head -c 200000 README.md > "$D/other.txt"; resume --data "$D/other.txt"
check "resume on another data file refused, naming it" '[ $rc != 0 ] && grep -qi "data" "$D/log"' "$D/log"
sed 's/^micro_batch:.*/micro_batch: 4/; s/^name:.*/name: gpt-tiny/' models/gpt-tiny.yaml > "$D/mb4.yaml"
again; timeout -k 5 60 "$Z" train --model "$D/mb4.yaml" --config train-nvme --nvme-dir "$D/nv" --steps 3 --checkpoint-dir "$D/ck" --resume > "$D/log" 2>&1; rc=$?
check "resume with another micro-batch refused, naming it" '[ $rc != 0 ] && grep -qi "micro_batch\|micro-batch" "$D/log"' "$D/log"
sed 's/lr: 1.0e-3/lr: 2.0e-3/' configs/train-nvme.yaml > "$D/lr2.yaml"
again; timeout -k 5 60 "$Z" train --model gpt-tiny --config "$D/lr2.yaml" --nvme-dir "$D/nv" --steps 3 --checkpoint-dir "$D/ck" --resume > "$D/log" 2>&1; rc=$?
check "resume with a changed config refused, naming the key" '[ $rc != 0 ] && grep -q "lr" "$D/log"' "$D/log"
again; timeout -k 5 60 "$Z" train --model gpt-tiny --config "$D/lr2.yaml" --nvme-dir "$D/nv" --steps 3 --checkpoint-dir "$D/ck" --resume --allow-changes > "$D/log" 2>&1; rc=$?
check "... and resumes with --allow-changes, naming the change" '[ $rc = 0 ] && grep -q "lr" "$D/log"' "$D/log"
D=$(fresh kill9)
# What a fresh start's refusal says: --resume where a whole step directory exists (not a save's
# step-NNNNNNNN.tmp, which a kill mid-save leaves and a fresh start ignores).
has_steps() { compgen -G "$1/step-[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]" > /dev/null; }
"$Z" train "${TINY[@]}" --nvme-dir "$D/nv" --steps 12 --export "$D/ref.st" > "$D/ref.log" 2>&1
ok=1
for delay in 0.7 1.1 1.6 2.2; do
  "$Z" train "${TINY[@]}" --nvme-dir "$D/nv" --steps 12 --checkpoint-dir "$D/ck" --checkpoint-every 1 \
    $(has_steps "$D/ck" && echo --resume) > "$D/k.log" 2>&1 &
  P=$!; sleep $delay; kill -9 $P 2>/dev/null; wait $P 2>/dev/null
done
"$Z" train "${TINY[@]}" --nvme-dir "$D/nv" --steps 12 --checkpoint-dir "$D/ck" --checkpoint-every 1 \
  $(has_steps "$D/ck" && echo --resume) --export "$D/out.st" > "$D/log" 2>&1 || ok=0
check "kill -9 during saves, 4 times: resumes and ends bitwise equal to an uninterrupted run" '[ $ok = 1 ] && cmp -s "$D/ref.st" "$D/out.st"' "$D/log"

echo "== NVMe swap files"
corrupt_mid_run() {  # DIR CONFIG
  local d=$1
  "$Z" train --model gpt-tiny --config "$2" --nvme-dir "$d/nv" --steps 100000 --checkpoint-dir "$d/ck" --checkpoint-every 5 \
    > "$d/log" 2>&1 &
  local job=$!
  wait_step "$d/log"; sleep 1
  # The run rewrites master.zt every step: zeros that land between a step's read and its rewrite are
  # overwritten unseen, so they are written again every half second until the run stops (15 s at most).
  for _ in $(seq 1 30); do
    kill -0 $job 2>/dev/null || break
    head -c 65536 /dev/zero | dd of="$d/nv/rank0/master.zt" bs=4096 seek=4 conv=notrunc status=none
    sleep 0.5
  done
  wait_gone $job 30 || { kill -TERM $job; wait $job; return 1; }
  wait $job; rc=$?
}
D=$(fresh swap)
corrupt_mid_run "$D" train-nvme
check "64 KB of zeros written into master.zt mid-run stop the run, naming file and offset (default config)" \
  '[ "${rc:-0}" != 0 ] && grep -qE "master.zt.*offset" "$D/log"' "$D/log"
D=$(fresh swap-on)
{ cat configs/train-nvme.yaml | grep -v "^aio"; echo "aio: {block_size: 1 MiB, queue_depth: 32, checksums: true}"; } > "$D/c.yaml"
corrupt_mid_run "$D" "$D/c.yaml"
check "... and with aio checksums asked for explicitly" '[ "${rc:-0}" != 0 ] && grep -qE "master.zt.*offset" "$D/log"' "$D/log"
resume_next() {  # DIR CONFIG: the run's latest checkpoint trains one more step
  local n; n=$(sed 's/step-0*//' "$1/ck/latest" 2>/dev/null); [ -n "$n" ] || return 1
  "$Z" train --model gpt-tiny --config "$2" --nvme-dir "$1/nv" --steps $((n + 1)) --checkpoint-dir "$1/ck" --resume > "$1/r.log" 2>&1
}
check "... the last checkpoint of that run is intact and resumes" 'resume_next "$D" "$D/c.yaml"' "$D/r.log"

echo "== signals"
stop_with() {  # SIGNAL EXPECTED_RC
  local d want=$2; d=$(fresh "sig-$1")
  "$Z" train "${TINY[@]}" --nvme-dir "$d/nv" --steps 100000 --checkpoint-dir "$d/ck" > "$d/log" 2>&1 &
  local job=$!
  wait_step "$d/log" && kill -"$1" $job; wait_gone $job 60 || kill -9 $job; wait $job; rc=$?
  check "SIG$1 stops after the step with a checkpoint (exit $2)" '[ $rc = $want ] && [ -s "$d/ck/latest" ] && grep -q "checkpoint saved" "$d/log"' "$d/log"
}
stop_with INT 130
stop_with TERM 143
stop_with HUP 129
stop_with QUIT 131
stop_with USR1 138
D=$(fresh pipe)
"$Z" train "${TINY[@]}" --nvme-dir "$D/nv" --steps 20 --print-every 1 --checkpoint-dir "$D/ck" 2> "$D/log" | head -n 2 > /dev/null
rc=${PIPESTATUS[0]}
check "zinf train | head -2: SIGPIPE does not kill training (exit 0, step 20 saved)" '[ $rc = 0 ] && [ "$(cat "$D/ck/latest" 2>/dev/null)" = step-00000020 ]' "$D/log"

echo "== paths"
D=$(fresh paths)
"$Z" train "${TINY[@]}" --nvme-dir "$D/nv" --steps 2 --checkpoint-dir "$D/ck" > "$D/a.log" 2>&1
timeout -k 5 60 "$Z" train "${TINY[@]}" --nvme-dir "$D/nv" --steps 3 --checkpoint-dir "$D/ck" --resume --export "$D/ck/latest" > "$D/log" 2>&1; rc=$?
check "--export CK/latest refused before training, latest intact" \
  '[ $rc != 0 ] && ! grep -q "step 3/" "$D/log" && [ "$(cat "$D/ck/latest")" = step-00000002 ]' "$D/log"
timeout -k 5 60 "$Z" train "${TINY[@]}" --nvme-dir "$D/nv" --steps 1 --export "$D/nv/rank0/x.safetensors" > "$D/log" 2>&1; rc=$?
check "--export into the NVMe directory refused" '[ $rc != 0 ] && ! grep -q "step 1/" "$D/log"' "$D/log"
timeout -k 5 60 "$Z" train "${TINY[@]}" --nvme-dir "$D/nv" --steps 1 --timeline "$D/nv/rank0/t.csv" > "$D/log" 2>&1; rc=$?
check "--timeline into the NVMe directory refused" '[ $rc != 0 ] && ! grep -q "step 1/" "$D/log"' "$D/log"
mkdir -p "$D/ww" && chmod 0777 "$D/ww"
timeout -k 5 60 "$Z" train "${TINY[@]}" --nvme-dir "$D/nv" --steps 1 --checkpoint-dir "$D/ww/ck" > "$D/log" 2>&1; rc=$?
check "a checkpoint directory inside a world-writable, non-sticky parent refused, naming it" '[ $rc != 0 ] && grep -q "ww" "$D/log"' "$D/log"
mkdir -p "$D/ww2/nvme" && chmod 0777 "$D/ww2"
timeout -k 5 60 "$Z" train "${TINY[@]}" --nvme-dir "$D/ww2/nvme" --steps 1 > "$D/log" 2>&1; rc=$?
check "an NVMe directory inside a world-writable, non-sticky parent refused" '[ $rc != 0 ] && grep -q "ww2" "$D/log"' "$D/log"
mkdir -p "$D/sticky" && chmod 1777 "$D/sticky"
timeout -k 5 60 "$Z" train "${TINY[@]}" --nvme-dir "$D/nv" --steps 1 --checkpoint-dir "$D/sticky/ck" > "$D/log" 2>&1; rc=$?
check "a checkpoint directory inside a sticky, owned parent (like /tmp) accepted" '[ $rc = 0 ]' "$D/log"
timeout -k 5 60 "$Z" train "${TINY[@]}" --nvme-dir "$D/nv" --steps 1 --checkpoint-dir "$D/nv/rank0" > "$D/log" 2>&1; rc=$?
check "--checkpoint-dir NV/rank0 refused as a directory named twice" '[ $rc != 0 ] && grep -qiE "twice|both|same directory|inside" "$D/log"' "$D/log"
D=$(fresh linkswap)
"$Z" train "${TINY[@]}" --nvme-dir "$D/nv" --steps 100000 --checkpoint-dir "$D/ck" --checkpoint-every 1 > "$D/log" 2>&1 &
JOB=$!
mkdir "$D/target"
if wait_step "$D/log"; then sleep 1; mv "$D/ck" "$D/ck.moved" && ln -s "$D/target" "$D/ck"; fi
wait_gone $JOB 20 || { kill -TERM $JOB; wait_gone $JOB 30; }
check "the checkpoint directory swapped for a link mid-run: the next save refused, nothing written through the link" \
  '[ -z "$(ls -A "$D/target")" ] && grep -qE "ck.*(replaced|symbolic link)" "$D/log"' "$D/log"
kill -9 $JOB 2>/dev/null

echo "== small"
D=$(fresh small)
timeout -k 5 60 "$Z" train "${TINY[@]}" --nvme-dir "$D/nv" --steps 1 --device-memory nan > "$D/log" 2>&1; rc=$?
check "--device-memory nan refused" '[ $rc != 0 ] && grep -q "device-memory" "$D/log"' "$D/log"
printf 'zero_stage: 3\noffload: {params: host, optimizer: host}\n' > "$D/host.yaml"
timeout -k 5 120 "$Z" train --model gpt-10b --config "$D/host.yaml" --host-memory 100000 --device-memory 8 --steps 1 > "$D/log" 2>&1; rc=$?
check "a run refused for lack of RAM exits 3 (plan refused), as documented" '[ $rc = 3 ] && grep -q "MemAvailable" "$D/log"' "$D/log"
cat > "$D/ds.json" <<'EOF'
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
 "zero_optimization": {"stage": 3, "offload_parm": {"device": "cpu"}, "offload_optimizer": {"device": "cpu"}}}
EOF
timeout -k 5 60 "$Z" train --model gpt-tiny --config "$D/ds.json" --steps 1 > "$D/log" 2>&1; rc=$?
check "a typo'd DeepSpeed offload key (offload_parm) does not silently leave the parameters on the device" \
  '{ [ $rc != 0 ] && grep -q "offload_parm" "$D/log"; } || grep -q "params host" "$D/log"' "$D/log"

echo "$HOLD of $((HOLD + FAILS)) hold"
