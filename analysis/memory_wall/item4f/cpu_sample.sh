#!/usr/bin/env bash
# Samples the CPU time (user + system, clock ticks) of the running `zinf train` every 0.5 s, as
# "unix-time ticks" lines into OUT, until STOP_FILE exists. Start it, then the memory-wall run:
#   bash cpu_sample.sh OUT STOP_FILE & ZINF=... bash experiments/memory_wall/run.sh ...; touch STOP_FILE
# PATTERN (default: a command line starting with "build/zinf train") picks the process.
out=${1:?usage: cpu_sample.sh OUT STOP_FILE}
stop=${2:?usage: cpu_sample.sh OUT STOP_FILE}
pattern=${PATTERN:-^build/zinf train}
until [ -f "$stop" ]; do
  pid=$(pgrep -f "$pattern" | head -n 1)
  if [ -n "$pid" ]; then
    ticks=$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null)
    [ -n "$ticks" ] && echo "$(date +%s.%N) $ticks" >> "$out"
  fi
  sleep 0.5
done
