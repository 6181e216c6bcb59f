#!/usr/bin/env bash
# Runs of the memory wall at 1.5x RAM with the compute-alone and under-load references (item4k):
# ZINF=frozen binary; RUNS="1 2 3" (default) names the runs, PREFIX (default R) the output files
# PREFIX<run>.txt beside this script; other variables (GRADIENTS=cpu, ...) pass to run.sh.
set -u
cd "$(dirname "$0")/../../.."
out=analysis/memory_wall/item4k
for i in ${RUNS:-1 2 3}; do
  ZINF=${ZINF:-build/zinf} GRAD_CLIP=0 TILING=1 PLAN=0 CHECKPOINT=0 BIG_BENCH=0 STORE_FIO=0 AIO_BLOCK=8388608 QUEUE_DEPTH=64 \
    TIMELINE_OUT=/tmp/item4k-${PREFIX:-R}$i.csv bash experiments/memory_wall/run.sh /work/nvme-mw 1.5 2 > $out/${PREFIX:-R}$i.txt 2>&1
done
