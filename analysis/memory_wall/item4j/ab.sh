#!/usr/bin/env bash
# O = old binary (copies and scaling), N = new binary (one rank: widened from the shard, gradient kept); alternating, 3 pairs
cd /work/main
export GRAD_CLIP=0 TILING=1 PLAN=0 CHECKPOINT=0 BIG_BENCH=0 STORE_FIO=0 AIO_BLOCK=8388608 QUEUE_DEPTH=64
for i in 1 2 3; do
  for v in O N; do
    if [ $v = O ]; then z=/tmp/s16/zinf-frozen; else z=/tmp/s16/zinf-new; fi
    rm -rf /work/nvme-mw; mkdir -p /work/nvme-mw
    ZINF=$z TIMELINE_OUT=/tmp/s16/ab/t-$v$i.csv bash experiments/memory_wall/run.sh /work/nvme-mw 1.5 2 > /tmp/s16/ab/out-$v$i.txt 2>&1
    echo "$v$i rc=$? $(date +%T)" >> /tmp/s16/ab/progress2
  done
done
rm -rf /work/nvme-mw
