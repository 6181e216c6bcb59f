#!/usr/bin/env bash
# Points per second of `zinf sweep` on one MPI rank vs two, measured in the same run: REPS pairs
# (default 3) of `mpirun -np 1` and `mpirun -np 2` over SPEC (default check-1000.yaml, 1,000
# points), each from an empty CSV, back to back and in alternating order, so that load from other
# work on the machine falls on both runs of a pair. Prints every run with the CPU time it used,
# each pair's ratio, the medians, and checks that the two CSVs hold the same results (all but the
# simulator's own wall time). CPU seconds per point show the sweep's own cost of spreading points
# over ranks, which load from other processes does not change.
# Each pair also measures the machine's own ceiling for two simulations at once: two independent
# single-process sweeps of the same spec, pinned to cores 0 and 1 and started together. Their
# combined points per second over the one-rank rate is the most any spreading of points over two
# ranks can reach here (caches and memory are shared; pure arithmetic scales 2x on this machine
# but the simulator does not), so the two-rank ratio is also printed as a fraction of it.
#   bash experiments/sweep/bench_mpi.sh [SPEC] [REPS]
# Each run also prints the share of the cores the hypervisor took (steal time, /proc/stat): a pair
# where it differs between the two runs is not a fair comparison. Under other load, run it as
# `chrt -r 10 bash ...` so that the sweep preempts the other work.
# Environment: ZINF (default build/zinf), MPIEXEC (default mpirun), OUT (default a temporary folder).
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SPEC=${1:-$ROOT/experiments/sweep/check-1000.yaml}
REPS=${2:-3}
ZINF=${ZINF:-$ROOT/build/zinf}
MPIEXEC=${MPIEXEC:-mpirun}
OUT=${OUT:-$(mktemp -d /tmp/zinf-sweep-bench.XXXXXX)}
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

echo "spec $SPEC, $REPS pair(s), $(nproc) cores, load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
: > "$OUT/runs.txt"
steal() { awk '/^cpu /{print $9}' /proc/stat; }  # jiffies the hypervisor took from this VM's CPUs
run() {  # run REP NP
  local csv="$OUT/np$2.csv"
  rm -f "$csv"
  local s0=$(steal)
  /usr/bin/time -f "%e %U %S" -o "$OUT/time.txt" "$MPIEXEC" -np "$2" "$ZINF" sweep "$SPEC" -o "$csv" 2> "$OUT/np$2-$1.log"
  local points=$(($(wc -l < "$csv") - 1))
  read -r wall user sys < "$OUT/time.txt"
  local stolen=$(( $(steal) - s0 ))
  echo "$1 $2 $points $wall $user $sys $(cut -d' ' -f1 /proc/loadavg)" >> "$OUT/runs.txt"
  /usr/bin/python3 -c "print(f'pair $1: -np $2: $points points in {$wall:.1f} s = {$points / $wall:.3f} points/s, CPU {($user + $sys) / $points * 1000:.1f} ms per point, load $(cut -d' ' -f1 /proc/loadavg), stolen by the hypervisor {$stolen / $(getconf CLK_TCK) / ($(nproc) * $wall) * 100:.1f} % of the cores')"
}
ceiling() {  # ceiling REP: two pinned single-process sweeps at once; records the slower one's wall
  rm -f "$OUT/c0.csv" "$OUT/c1.csv"
  taskset -c 0 /usr/bin/time -f "%e" -o "$OUT/c0.txt" "$ZINF" sweep "$SPEC" -j 1 -o "$OUT/c0.csv" 2> "$OUT/c0-$1.log" &
  local pid=$!
  taskset -c 1 /usr/bin/time -f "%e" -o "$OUT/c1.txt" "$ZINF" sweep "$SPEC" -j 1 -o "$OUT/c1.csv" 2> "$OUT/c1-$1.log"
  wait "$pid"
  local points=$(($(wc -l < "$OUT/c0.csv") + $(wc -l < "$OUT/c1.csv") - 2))
  local wall=$(sort -g "$OUT/c0.txt" "$OUT/c1.txt" | tail -1)
  echo "$1 c $points $wall 0 0 $(cut -d' ' -f1 /proc/loadavg)" >> "$OUT/runs.txt"
  /usr/bin/python3 -c "print(f'pair $1: two pinned single-process sweeps at once: $points points in {$wall:.1f} s = {$points / $wall:.3f} points/s')"
}
for rep in $(seq "$REPS"); do
  if [ $((rep % 2)) -eq 1 ]; then run "$rep" 1; run "$rep" 2; ceiling "$rep"; else ceiling "$rep"; run "$rep" 2; run "$rep" 1; fi
done

/usr/bin/python3 - "$OUT" <<'PY'
import csv, statistics, sys
out = sys.argv[1]
runs = [l.split() for l in open(f"{out}/runs.txt")]
rate = {(rep, np): int(points) / float(wall) for rep, np, points, wall, *_ in runs}
cpu = {np: statistics.median((float(u) + float(s)) / int(p) for _, n, p, _, u, s, _ in runs if n == np) for np in "12"}
med = {np: statistics.median(r for (rep, n), r in rate.items() if n == np) for np in "12c"}
pairs = sorted({rep for rep, _ in rate})
ratios = [rate[(rep, "2")] / rate[(rep, "1")] for rep in pairs]
ceilings = [rate[(rep, "c")] / rate[(rep, "1")] for rep in pairs]
print("ratio per pair: " + ", ".join(f"{r:.2f}x" for r in ratios))
print("ceiling per pair (two pinned processes at once / one rank): " + ", ".join(f"{r:.2f}x" for r in ceilings))
print(f"median ceiling {statistics.median(ceilings):.2f}x; two ranks reach "
      f"{statistics.median(r / c for r, c in zip(ratios, ceilings)) * 100:.0f} % of it (median over pairs)")
print(f"median points/s: -np 1 {med['1']:.3f}, -np 2 {med['2']:.3f}; ratio of medians {med['2'] / med['1']:.2f}x, "
      f"median of pair ratios {statistics.median(ratios):.2f}x")
print(f"median CPU per point: -np 1 {cpu['1'] * 1000:.1f} ms, -np 2 {cpu['2'] * 1000:.1f} ms")
def load(p):
    rows = list(csv.DictReader(open(p)))
    for r in rows:
        r.pop("sim_wall_s")
    return rows
a, b = load(f"{out}/np1.csv"), load(f"{out}/np2.csv")
print(f"results of -np 1 and -np 2 {'equal' if a == b else 'DIFFER'} ({len(a)} rows)")
sys.exit(0 if a == b else 1)
PY
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg); CSVs and logs in $OUT"
