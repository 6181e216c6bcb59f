#!/usr/bin/env bash
# `mpirun -np 2 zinf sweep`: the CSV equals the one a single process writes (all but sim_wall_s),
# sampled rows equal single `zinf sim` runs on files with the swept value written in, and a run
# killed with SIGKILL resumes without running its finished points again.
#   sweep_mpi_check.sh ZINF MPIEXEC
set -u
ZINF=$1
MPIEXEC=$2
SRC=$(cd "$(dirname "$0")/../.." && pwd)
DIR=$(mktemp -d /tmp/zinf-sweep-mpi.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
passed=0
failed=0
check() {  # check NAME COMMAND...
  if "${@:2}"; then passed=$((passed + 1)); echo "ok: $1"; else failed=$((failed + 1)); echo "FAILED: $1"; fi
}

cat > "$DIR/spec.yaml" <<EOF
models: [gpt-mini, gpt2-small]
hwprofiles: [dgx2-v100, dgx-a100]
configs: [infinity-nvme, infinity-cpu]
nodes: [1, 2]
axes:
  - {key: micro_batch, values: [1, 4, 16]}
EOF

"$ZINF" sweep "$DIR/spec.yaml" -j 1 -o "$DIR/one.csv" 2> "$DIR/one.log" || { cat "$DIR/one.log"; exit 1; }
"$MPIEXEC" -np 2 "$ZINF" sweep "$DIR/spec.yaml" -o "$DIR/two.csv" 2> "$DIR/two.log" || { cat "$DIR/two.log"; exit 1; }
check "two ranks said so" grep -q "on 2 rank(s)" "$DIR/two.log"

# Every column but the simulator's own wall time.
same_results() {  # same_results A.csv B.csv
  /usr/bin/python3 - "$1" "$2" <<'EOF'
import csv, sys
def load(p):
    rows = list(csv.DictReader(open(p)))
    for r in rows:
        r.pop("sim_wall_s")
    return rows
a, b = load(sys.argv[1]), load(sys.argv[2])
if len(a) != 48 or a != b:
    print(f"{sys.argv[1]}: {len(a)} rows, {sys.argv[2]}: {len(b)} rows; first difference:",
          next(((x, y) for x, y in zip(a, b) if x != y), None))
    sys.exit(1)
EOF
}
check "np 2 CSV equals the single-process CSV" same_results "$DIR/one.csv" "$DIR/two.csv"

# Rows of the np 2 CSV against zinf sim on a config with micro_batch written in.
sim_equal() {  # sim_equal MODEL HW CONFIG NODES MICRO_BATCH
  cp "$SRC/configs/$3.yaml" "$DIR/cfg.yaml" && printf '\nmicro_batch: %s\n' "$5" >> "$DIR/cfg.yaml"
  "$ZINF" sim --json --model "$1" --hw "$2" --config "$DIR/cfg.yaml" --nodes "$4" > "$DIR/sim.json" || return 1
  /usr/bin/python3 - "$DIR/two.csv" "$DIR/sim.json" "$@" <<'EOF'
import csv, json, sys
path, sim, model, hw, config, nodes, mb = sys.argv[1:]
j = json.load(open(sim))
for r in csv.DictReader(open(path)):
    if (r["model"], r["hwprofile"], r["config"], r["nodes"], r["config.micro_batch"]) == (model, hw, config, nodes, mb):
        want = {"step_time_s": j["step_time"], "tflops_per_gpu": j["tflops_per_gpu"], "busy_comm": j["busy"]["comm"]}
        bad = {k: (r[k], f"{v:.6g}") for k, v in want.items() if r[k] != f"{v:.6g}"}
        if bad:
            print("sweep vs zinf sim:", bad)
        sys.exit(1 if bad else 0)
print("no such row"); sys.exit(1)
EOF
}
check "np 2 row = zinf sim (gpt2-small, dgx-a100, 2 nodes, micro-batch 16)" sim_equal gpt2-small dgx-a100 infinity-nvme 2 16
check "np 2 row = zinf sim (gpt-mini, dgx2-v100, 1 node, micro-batch 4)" sim_equal gpt-mini dgx2-v100 infinity-cpu 1 4

# Kill the whole job with SIGKILL once some rows are in, then resume.
"$MPIEXEC" -np 2 "$ZINF" sweep "$DIR/spec.yaml" -o "$DIR/killed.csv" 2> "$DIR/killed.log" &
job=$!
# Points take tens of milliseconds here: kill at the first rows in, polling often, or the whole
# sweep may be done before the kill lands.
for _ in $(seq 3000); do
  [ -f "$DIR/killed.csv" ] && [ "$(wc -l < "$DIR/killed.csv")" -ge 3 ] && break
  sleep 0.01
done
# The whole job at once, mpirun and its ranks: ranks that only lose mpirun go on for most of a
# second, time enough here to finish a small sweep.
kill -9 "$job"
pkill -9 -f "$DIR/spec.yaml"
wait "$job" 2> /dev/null
# The ranks end once they lose mpirun; wait for them (their command line names this spec).
waited=0
while pgrep -f "$DIR/spec.yaml" > /dev/null && [ "$waited" -lt 300 ]; do sleep 0.05; waited=$((waited + 1)); done
echo "the killed job's ranks ended $((waited * 50)) ms after mpirun"

gone() { ! pgrep -f "$DIR/spec.yaml" > /dev/null; }
check "the killed job's processes are gone" gone
cp "$DIR/killed.csv" "$DIR/at_kill.csv"
rows_at_kill=$(($(wc -l < "$DIR/at_kill.csv") - 1))
check "killed before the end ($rows_at_kill of 48 rows)" test "$rows_at_kill" -lt 48
"$MPIEXEC" -np 2 "$ZINF" sweep "$DIR/spec.yaml" -o "$DIR/killed.csv" 2> "$DIR/resume.log" || { cat "$DIR/resume.log"; exit 1; }
check "the resumed run skipped the $rows_at_kill finished points" grep -q "48 points, $rows_at_kill already in" "$DIR/resume.log"
kept_as_they_were() {  # every row there at the kill is in the final CSV byte for byte (sim_wall_s too: not rerun)
  tail -n +2 "$DIR/at_kill.csv" | while IFS= read -r line; do grep -qxF -- "$line" "$DIR/killed.csv" || exit 1; done
}
check "rows finished before the kill kept as they were" kept_as_they_were
check "the resumed CSV equals the single-process CSV" same_results "$DIR/one.csv" "$DIR/killed.csv"

echo "sweep mpi check: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
