#!/usr/bin/env bash
# A = allgather 1 / h2d 2 (defaults), B = allgather 3 / h2d 4; alternating, 3 pairs
cd /work/main
export ZINF=/tmp/s16/zinf-frozen GRAD_CLIP=0 TILING=1 PLAN=0 CHECKPOINT=0 BIG_BENCH=0 STORE_FIO=0 AIO_BLOCK=8388608 QUEUE_DEPTH=64
for i in 1 2 3; do
  for v in A B; do
    if [ $v = A ]; then ag=1; h2=2; else ag=3; h2=4; fi
    rm -rf /work/nvme-mw; mkdir -p /work/nvme-mw
    ALLGATHER_DISTANCE=$ag H2D_DISTANCE=$h2 TIMELINE_OUT=/tmp/s16/ab/t-$v$i.csv bash experiments/memory_wall/run.sh /work/nvme-mw 1.5 2 > /tmp/s16/ab/out-$v$i.txt 2>&1
    echo "$v$i rc=$? $(date +%T)" >> /tmp/s16/ab/progress
  done
done
rm -rf /work/nvme-mw
