#!/usr/bin/env bash
# A rank killed in the middle of a training step: the survivors must stop with an error message
# within a bounded time, not hang. Usage: kill_rank_mid_step.sh ZINF_BINARY MPIEXEC
set -u
ZINF=$1
MPIEXEC=$2
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
mkdir -p "$DIR/nvme"
"$MPIEXEC" -np 2 "$ZINF" train --model gpt-tiny --config train-nvme --nvme-dir "$DIR/nvme" --steps 100000 \
  > "$DIR/log" 2>&1 < /dev/null &
MPIRUN=$!
# Wait until both ranks are training (a step has been printed), then kill rank 1 mid-step.
for _ in $(seq 1 120); do
  grep -q "step " "$DIR/log" 2>/dev/null && break
  sleep 0.5
done
VICTIM=$(pgrep -f "zinf train --model gpt-tiny --config train-nvme --nvme-dir $DIR/nvme" | while read -r p; do
  grep -qz "OMPI_COMM_WORLD_RANK=1" "/proc/$p/environ" 2>/dev/null && echo "$p"; done | head -n 1)
if [ -z "$VICTIM" ]; then
  echo "could not find rank 1"; cat "$DIR/log"; kill "$MPIRUN"; exit 1
fi
START=$(date +%s)
kill -9 "$VICTIM"
# Bounded: the job must end well within the collectives' 120 s deadline plus slack.
for _ in $(seq 1 300); do
  kill -0 "$MPIRUN" 2>/dev/null || break
  sleep 0.5
done
if kill -0 "$MPIRUN" 2>/dev/null; then
  echo "FAILED: the job still runs $(( $(date +%s) - START )) s after rank 1 was killed"
  kill -9 "$MPIRUN"
  exit 1
fi
wait "$MPIRUN"
RC=$?
echo "job ended $(( $(date +%s) - START )) s after rank 1 was killed, exit code $RC"
tail -n 8 "$DIR/log"
[ "$RC" -ne 0 ] || { echo "FAILED: exit code 0"; exit 1; }
grep -Eq "did not complete within|exited on signal 9|noticed that process rank 1" "$DIR/log" || { echo "FAILED: no error message"; exit 1; }
echo "1 passed, 0 failed"
