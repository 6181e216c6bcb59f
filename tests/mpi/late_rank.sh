#!/usr/bin/env bash
# A rank that reaches a collective long after its peers: the peers must name it as the rank that did
# not arrive, and it must say it came late, blaming no one. Usage: late_rank.sh CHECK_BINARY MPIEXEC
set -u
out=$(timeout -k 5 120 "$2" -np 3 "$1" --late-rank 1 2>&1 < /dev/null)
echo "$out"
for r in 0 1 2; do
  echo "$out" | grep -q "late-rank check: rank $r passed" || { echo "FAILED: rank $r"; exit 1; }
done
echo "3 passed, 0 failed"
