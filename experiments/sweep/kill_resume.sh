#!/usr/bin/env bash
# A sweep killed with SIGKILL resumes without running its finished points again: starts
# `mpirun -np 2 zinf sweep SPEC`, kills mpirun with SIGKILL after AFTER seconds (default 20),
# waits for its ranks to end, and runs the sweep again on the same CSV. Checks that the second run
# skipped exactly the rows finished at the kill, that those rows are unchanged byte for byte (their
# sim_wall_s included), and, given a REFERENCE CSV of the same spec (e.g. bench_mpi.sh's np1.csv),
# that the final CSV holds the same results.
#   bash experiments/sweep/kill_resume.sh [SPEC] [AFTER] [REFERENCE]
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SPEC=$(realpath "${1:-$ROOT/experiments/sweep/check-1000.yaml}")
AFTER=${2:-20}
REFERENCE=${3:-}
ZINF=${ZINF:-$ROOT/build/zinf}
MPIEXEC=${MPIEXEC:-mpirun}
OUT=${OUT:-$(mktemp -d /tmp/zinf-sweep-kill.XXXXXX)}
mkdir -p "$OUT"
CSV="$OUT/killed.csv"
rm -f "$CSV"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

"$MPIEXEC" -np 2 "$ZINF" sweep "$SPEC" -o "$CSV" 2> "$OUT/first.log" &
job=$!
sleep "$AFTER"
kill -9 "$job"
wait "$job" 2> /dev/null
# The ranks end once they lose mpirun; their command lines name this CSV.
waited=0
while pgrep -f "$CSV" > /dev/null && [ "$waited" -lt 600 ]; do sleep 0.05; waited=$((waited + 1)); done
if pgrep -f "$CSV" > /dev/null; then echo "FAILED: ranks of the killed job still running after 30 s"; exit 1; fi
cp "$CSV" "$OUT/at_kill.csv"
rows=$(($(wc -l < "$CSV") - 1))
cut=$([ -s "$CSV" ] && [ "$(tail -c1 "$CSV" | od -An -c | tr -d ' ')" != '\n' ] && echo "plus one cut-off line" || echo "no cut-off line")
echo "killed mpirun with SIGKILL after $AFTER s: $rows whole rows ($cut); ranks gone $((waited * 50)) ms later"

t0=$(date +%s.%N)
"$MPIEXEC" -np 2 "$ZINF" sweep "$SPEC" -o "$CSV" 2> "$OUT/resume.log" || { cat "$OUT/resume.log"; exit 1; }
t1=$(date +%s.%N)
head -1 "$OUT/resume.log"
tail -1 "$OUT/resume.log"

/usr/bin/python3 - "$OUT/at_kill.csv" "$CSV" "$rows" "$REFERENCE" <<'PY'
import csv, sys
at_kill, final, rows, reference = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
ok = True
with open(at_kill) as f:
    whole = f.read().split("\n")[1:-1]  # the last piece has no newline: a row cut short, or empty
final_lines = set(open(final).read().split("\n"))
kept = sum(line in final_lines for line in whole)
print(f"rows finished at the kill found unchanged in the final CSV: {kept} of {len(whole)}")
ok &= kept == len(whole) == rows
log = open(final.replace("killed.csv", "resume.log")).readline()
ok &= f", {rows} already in" in log
if reference:
    def load(p):
        out = list(csv.DictReader(open(p)))
        for r in out:
            r.pop("sim_wall_s")
        return out
    same = load(reference) == load(final)
    print(f"final CSV vs {reference}: {'same results' if same else 'DIFFERENT'}")
    ok &= same
print("kill/resume check:", "passed" if ok else "FAILED")
sys.exit(0 if ok else 1)
PY
