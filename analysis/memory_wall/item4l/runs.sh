#!/usr/bin/env bash
# item4l: the memory wall at 1.5x RAM with the BLAS on one thread (T runs: OPENBLAS_NUM_THREADS=1, the
# compute-alone reference too) against the default two (N runs), in alternation, one frozen binary; F runs
# are T runs with 16 NVMe tasks in flight per lane (aio.tasks_in_flight) instead of 4.
# ZINF=frozen binary; ORDER (default "T2 N1 T3") names the runs; outputs <name>.txt beside this script.
set -u
cd "$(dirname "$0")/../../.."
out=analysis/memory_wall/item4l
unset OPENBLAS_CORETYPE
for name in ${ORDER:-T2 N1 T3}; do
  threads="" tasks=4
  case $name in T*) threads=1 ;; F*) threads=1 tasks=16 ;; esac
  env ${threads:+OPENBLAS_NUM_THREADS=$threads} TASKS_IN_FLIGHT=$tasks ZINF=${ZINF:-build/zinf} LOADED_BENCH=0 GRAD_CLIP=0 TILING=1 PLAN=0 CHECKPOINT=0 \
    BIG_BENCH=0 STORE_FIO=0 AIO_BLOCK=8388608 QUEUE_DEPTH=64 TIMELINE_OUT=/tmp/item4l-$name.csv \
    bash experiments/memory_wall/run.sh /work/nvme-mw 1.5 2 > $out/$name.txt 2>&1
done
