#!/usr/bin/env bash
# Aggregate NVMe fetch bandwidth and step time of ZeRO-3 training over
# N = 1, 2, 4 MPI ranks on this machine (params + optimizer on NVMe, bandwidth-centric: every rank
# reads only its own shard), printed beside the NVMe store's single-process bandwidth measured in
# the same run by `zinf io-bench`. One disk here, so the aggregate is bounded by it; the simulator
# shows the multi-node case.
#   bash experiments/mpi/fetch_bandwidth.sh [steps]      (ZINF_BENCH_DIR: the disk directory)
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-6}
ZINF=${ZINF:-build/zinf}
DIR=${ZINF_BENCH_DIR:-/var/tmp}/zinf_fetch_$$
mkdir -p "$DIR"
trap 'rm -rf "$DIR"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

echo "store, one process (zinf io-bench, 1 MiB blocks, qd 32):"
"$ZINF" io-bench --dir "$DIR" --size "512 MiB" --block-sizes "1 MiB" --queue-depths 32 2>/dev/null | tr '\r' '\n' | grep "^best:"

for N in 1 2 4; do
  rm -rf "$DIR/nvme" && mkdir -p "$DIR/nvme"
  mpirun -np "$N" "$ZINF" train --model gpt-overlap --config train-nvme --nvme-dir "$DIR/nvme" --steps "$STEPS" \
    --timeline "$DIR/tl_np$N.csv" > "$DIR/log_np$N" 2>&1 < /dev/null
done

/usr/bin/python3 - "$DIR" <<'PY'
import csv, glob, sys, statistics
d = sys.argv[1]
print(f"\n{'ranks':>5} {'step s':>8} {'NVMe read MB/rank':>18} {'aggregate read GB/s':>20} {'per-rank read GB/s (lane busy)':>31}")
for n in (1, 2, 4):
    files = [f"{d}/tl_np{n}.csv"] if n == 1 else sorted(glob.glob(f"{d}/tl_np{n}.rank*.csv"))
    span, total, per = 0.0, 0.0, []
    for f in files:
        rows = list(csv.DictReader(open(f)))
        span = max(span, max(float(r["end"]) for r in rows))
        reads = [r for r in rows if r["lane"] == "nvme_read"]
        b = sum(float(r["bytes"]) for r in reads)
        busy = sum(float(r["end"]) - float(r["start"]) for r in reads)
        total += b
        per.append(b / busy / 1e9 if busy else 0.0)
    print(f"{n:>5} {span:>8.3f} {total / len(files) / 1e6:>18.1f} {total / span / 1e9:>20.2f} {statistics.median(per):>31.2f}")
PY
