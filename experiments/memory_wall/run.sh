#!/usr/bin/env bash
# The largest model this machine trains: a GPT whose model states are FACTOR x this machine's RAM
# (default 2.5), every state on NVMe, trained for STEPS steps (default 3). Reports the plan's memory
# against the measured peak RSS, the NVMe lanes' bandwidth in the last step and the step against
# its bounds. Then (unless CHECKPOINT=0) it saves a checkpoint, resumes from it in a new process for
# one more step and saves again, reporting the peak RSS while saving and while loading against the
# plan's RAM: both stream a parameter group at a time, so neither holds the model. Checks free disk
# first (the states, embeddings included, and with checkpoints two of 12 B/param more, with
# RESERVE_GB, default 8, left free) and scales the model down, saying so, when it is short. Before training (unless IO_BENCH=0) it runs `zinf io-bench` on the
# same directory: the run config takes its recommended block size and queue depth, and the NVMe lanes'
# bandwidth while busy is reported against its best read and best write, the step against
# max(compute alone, read bytes / best read + written bytes / best write). io-bench moves 2 GiB; the
# disk here sustains about half its rates over the tens of GB a step moves, so after training (unless
# STORE_FIO=0) fio also reads and rewrites the run's own state files and (unless BIG_BENCH=0, and
# only with CHECKPOINT=0) io-bench runs again on a file the size of the states; the report
# (experiments/memory_wall/report.py) gives every figure against each reference. On this kind of VM
# the virtual disk needs the vCPUs the step computes on (idle io-bench rates halve while both cores
# run GEMMs), so after training (unless LOADED_BENCH=0) io-bench also measures the disk under the
# CPU backend's GEMMs (`--compute-load`, LOADED_GIB GiB, default 8) as one more reference. Before
# training (unless COMPUTE_ALONE=0) the same shape trains with every state resident at 1 and 6 layers
# (experiments/memory_wall/compute_alone.py): extrapolated to the run's layers, the step without
# offload, the bound's "compute alone" with the step's Adam, gathers and copies in it (the median of
# steps 2..ALONE_STEPS at each count, default 9). TASKS_IN_FLIGHT
# (default 4) is aio.tasks_in_flight: NVMe tasks each NVMe lane runs at once. TIMELINE_OUT=FILE
# keeps the last step's Timeline (CSV). OPTIMIZER_TIMING (default overlap-backward: sub-groups are
# updated, and their states move, while backward computes) is optimizer.timing. SUB_GROUPS_IN_FLIGHT
# (default auto: a share of the host budget) and NVME_PHASES (default true: the optimizer's reads and
# writes in waves) are optimizer.sub_groups_in_flight and optimizer.nvme_phases.
#   bash experiments/memory_wall/run.sh NVME_DIR [FACTOR] [STEPS]
set -euo pipefail -o pipefail
cd "$(dirname "$0")/../.."
NVME=${1:?usage: run.sh NVME_DIR [FACTOR] [STEPS]}
FACTOR=${2:-2.5}
STEPS=${3:-3}
CHECKPOINT=${CHECKPOINT:-1}
IO_BENCH=${IO_BENCH:-1}
TASKS_IN_FLIGHT=${TASKS_IN_FLIGHT:-4}
OPTIMIZER_TIMING=${OPTIMIZER_TIMING:-overlap-backward}
SUB_GROUPS_IN_FLIGHT=${SUB_GROUPS_IN_FLIGHT:-auto}
NVME_PHASES=${NVME_PHASES:-true}
# READ_AHEAD (default true) is optimizer.read_ahead: states read ahead of their gradients.
READ_AHEAD=${READ_AHEAD:-true}
# NVME_DISTANCE (default 36) is prefetch.nvme_distance: operators ahead that parameters are read
# from NVMe. The read lane starts its tasks in order, so a parameter read issued too close to its
# use waits behind the optimizer's state reads (held in waves) while compute waits for it. The
# configs' 3 left this disk idle between fetches (1.5x RAM: 8-15 s of a 69-82 s step); 12 kept it
# busy but compute still waited 8-10 s per step for parameters on a faster disk; 36 (about three
# blocks) cut that to 2-5 s: step median 28.6 s against 33.1 s, 3 pairs (analysis/memory_wall/item4h/).
NVME_DISTANCE=${NVME_DISTANCE:-36}
# ALLGATHER_DISTANCE and H2D_DISTANCE (defaults 1 and 2, the run config's) are prefetch.allgather_distance
# and prefetch.h2d_distance: operators ahead that a parameter is gathered and copied to the device.
ALLGATHER_DISTANCE=${ALLGATHER_DISTANCE:-1}
H2D_DISTANCE=${H2D_DISTANCE:-2}
# GRAD_CLIP (default 1.0) is optimizer.grad_clip; 0 turns clipping off, so no update waits for the
# gradient norm of the whole model (the end of backward).
GRAD_CLIP=${GRAD_CLIP:-1.0}
# TILING (default auto) is tiling_factor; a number skips the `auto` search, which simulates candidates.
TILING=${TILING:-auto}
# GRAD_STORES_IN_FLIGHT (default 16; the run config's default is 4) is gradient_stores_in_flight:
# backward waits until the gradient stored that many stores ago is on its tier. At 4, the gradient
# writes queue behind the optimizer's state writes and stall the backward (1.5x RAM: step median
# 32.0 s against 28.75 s at 16, 4 runs each; analysis/memory_wall/item4e/).
GRAD_STORES_IN_FLIGHT=${GRAD_STORES_IN_FLIGHT:-16}
# GRADIENTS (default nvme) is offload.gradients: cpu keeps the bf16 gradients (2 B/param) in host
# memory instead of writing them to NVMe and reading them back for the optimizer.
GRADIENTS=${GRADIENTS:-nvme}
ZINF=${ZINF:-build/zinf}
# OPENBLAS_KERNELS (default native): native unsets OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE for this
# script, so that OpenBLAS runs the CPU's own kernels (some environments force Haswell's, half the
# GEMM rate of an AVX-512 CPU); keep leaves them as the environment sets them. The run prints the
# set that ran (`zinf --version`).
OPENBLAS_KERNELS=${OPENBLAS_KERNELS:-native}
case "$OPENBLAS_KERNELS" in
  native) unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE ;;
  keep) ;;
  *) echo "memory_wall: OPENBLAS_KERNELS must be native or keep, not '$OPENBLAS_KERNELS'" >&2; exit 2 ;;
esac
echo "memory_wall: $("$ZINF" --version | grep 'cpu paths') (OPENBLAS_KERNELS=$OPENBLAS_KERNELS)"
mkdir -p "$NVME"
work=$(mktemp -d)
trap 'rm -rf "$work" "$NVME"/rank* "$NVME"/checkpoints' EXIT

ram=$(awk '/MemTotal/ {printf "%.0f", $2 * 1024}' /proc/meminfo)
free_disk=$(df -B1 --output=avail "$NVME" | tail -n 1)
hidden=3200
vocab=50257
seq=128
per_layer=$((16 * 12 * hidden * hidden))           # bytes of model states per layer (16 B/param)
embed=$((16 * (vocab + seq) * hidden))             # the token and position embeddings' states
layers=$(python3 -c "import math; print(max(1, math.ceil(($FACTOR * $ram - $embed) / $per_layer)))")
# The states once (and two checkpoints of master, m and v: 24 B/param more) must fit the disk with
# RESERVE_GB (default 8) left for everyone else on it.
scale=16
[ "$CHECKPOINT" = 0 ] || scale=40
reserve=$(( ${RESERVE_GB:-8} * 1000000000 ))
max_layers=$(python3 -c "print(int((($free_disk - $reserve) * 16 / $scale - $embed) // $per_layer))")
if [ "$layers" -gt "$max_layers" ]; then
  echo "memory_wall: $NVME has $(numfmt --to=iec "$free_disk") free, $(numfmt --to=iec "$reserve") of it kept for others:" \
       "$layers layers ($FACTOR x RAM) do not fit; scaling down to $max_layers layers" \
       "($(python3 -c "print(round(($max_layers * $per_layer + $embed) / $ram, 2))") x RAM)"
  layers=$max_layers
fi
[ "$layers" -ge 1 ] || { echo "memory_wall: not enough free disk in $NVME for one layer"; exit 1; }

# The store's own bandwidth on this disk, measured now (the disk's speed drifts from minute to minute).
block=1048576; depth=32; best_read=0; best_write=0
if [ "$IO_BENCH" != 0 ]; then
  "$ZINF" io-bench --dir "$NVME" --size "2 GiB" --block-sizes "1 MiB,8 MiB" --queue-depths 8,32,64 | tee "$work/io.txt" | tr '\r' '\n' | grep -E "write .* read .*/s *$"
  read -r block depth best_read best_write < <(python3 experiments/memory_wall/disk_refs.py io-bench "$work/io.txt")
  echo "memory_wall: io-bench best read $(numfmt --to=si --round=nearest "${best_read%.*}")B/s, best write $(numfmt --to=si --round=nearest "${best_write%.*}")B/s; aio block $block, queue depth $depth"
fi

# QUEUE_DEPTH and AIO_BLOCK (bytes) override the queue depth and block size io-bench recommends (its
# pick can flip between runs within its 5 % margin: fix both for an A/B).
if [ -n "${QUEUE_DEPTH:-}" ]; then
  depth=$QUEUE_DEPTH
  echo "memory_wall: QUEUE_DEPTH=$depth in place of io-bench's queue depth"
fi
if [ -n "${AIO_BLOCK:-}" ]; then
  block=$AIO_BLOCK
  echo "memory_wall: AIO_BLOCK=$block in place of io-bench's block size"
fi

cat > "$work/model.yaml" <<YAML
name: gpt-memory-wall
layers: $layers
hidden: $hidden
heads: 25
seq: $seq
vocab: $vocab
micro_batch: 1
YAML
cat > "$work/config.yaml" <<YAML
description: parameters and optimizer states on NVMe, gradients on $GRADIENTS, checkpoints on the host
zero_stage: 3
offload: {params: nvme, gradients: $GRADIENTS, optimizer: nvme}
activation_checkpoint: {interval: 1, tier: host}
tiling_factor: $TILING
aio: {block_size: $block, queue_depth: $depth, tasks_in_flight: $TASKS_IN_FLIGHT}
optimizer: {type: adamw, lr: 1.0e-5, grad_clip: $GRAD_CLIP, sub_group_size: 10000000, timing: $OPTIMIZER_TIMING,
            sub_groups_in_flight: $SUB_GROUPS_IN_FLIGHT, nvme_phases: $NVME_PHASES, read_ahead: $READ_AHEAD}
prefetch: {nvme_distance: $NVME_DISTANCE, h2d_distance: $H2D_DISTANCE, allgather_distance: $ALLGATHER_DISTANCE}
reserve_nvme_for_checkpoint: false
gradient_stores_in_flight: $GRAD_STORES_IN_FLIGHT
YAML
# This machine's profile with room for the states on its disk and a device arena of DEVICE_GIB
# (default 8): the largest layer's fp32 gathered parameters with their gradients, and the auto tiling
# that bounds them, need more than the profile's 2 GiB at hidden 3200.
DEVICE_GIB=${DEVICE_GIB:-8}
sed "s/^name: .*/name: local-memory-wall/; s/^\(    capacity:\).*/\1 $free_disk/; s/^\(    memory:\).*\(# the CPU backend.*\)/\1 $DEVICE_GIB GiB  \2/" \
  hwprofiles/local.yaml > "$work/hw.yaml"

states=$((layers * per_layer + embed))
echo "memory_wall: $layers layers x hidden $hidden: $(python3 -c "print(round($states / 16 / 1e9, 2))")B params," \
     "$(numfmt --to=iec $states) of states ($(python3 -c "print(round($states / 1e9, 1))") GB, embeddings included) = $(python3 -c "print(round($states / $ram, 2))") x RAM ($(numfmt --to=iec "$ram"))"
compute_alone=0
if [ "${COMPUTE_ALONE:-1}" != 0 ]; then
  python3 experiments/memory_wall/compute_alone.py --zinf "$ZINF" --layers "$layers" --hidden "$hidden" --heads 25 \
    --seq "$seq" --vocab "$vocab" --tiling "$TILING" --grad-clip "$GRAD_CLIP" --sub-group-size 10000000 \
    --hw "$work/hw.yaml" --work "$work" --steps "${ALONE_STEPS:-9}" | tee "$work/alone.txt" || echo "memory_wall: no compute-alone reference"
  compute_alone=$(awk '/^compute_alone_s/ {print $2}' "$work/alone.txt")
  compute_alone=${compute_alone:-0}
fi
# PLAN=0 skips `zinf plan` (its `auto` resolution simulates candidates: minutes on a loaded machine).
[ "${PLAN:-1}" = 0 ] || "$ZINF" plan --model "$work/model.yaml" --hw "$work/hw.yaml" --config "$work/config.yaml" | grep -E "^(total|fits)"
ckpt_args=()
[ "$CHECKPOINT" = 0 ] || ckpt_args=(--checkpoint-dir "$NVME/checkpoints")
# THREAD_CPU=FILE samples every thread's CPU time during training (experiments/memory_wall/thread_cpu.py).
sampler=
if [ -n "${THREAD_CPU:-}" ]; then
  python3 experiments/memory_wall/thread_cpu.py "$work/model.yaml" "$THREAD_CPU" &
  sampler=$!
fi
if ! /usr/bin/time -v "$ZINF" train --model "$work/model.yaml" --hw "$work/hw.yaml" --config "$work/config.yaml" \
  --nvme-dir "$NVME" --steps "$STEPS" --timeline "$work/last" "${ckpt_args[@]}" 2> "$work/time.txt" | tee "$work/train.txt"; then
  grep -v -E '^\s' "$work/time.txt" | head -n 20
  exit 1
fi
[ -z "${TIMELINE_OUT:-}" ] || cp "$work/last.csv" "$TIMELINE_OUT"
[ -z "$sampler" ] || wait "$sampler"
rss=$(awk -F': ' '/Maximum resident/ {printf "%.0f", $2 * 1024}' "$work/time.txt")
echo "peak RSS: $(numfmt --to=iec "$rss")"
# The disk on the run's own files, right after it (unless STORE_FIO=0): fio reads each state file the
# run left (the sizes and the recency the step read), then rewrites it in place, with the run's block
# size and queue depth (io_uring, O_DIRECT, registered buffers). The run is over: the rewrite loses
# nothing it needs (a checkpoint, when one is saved, lives in its own files; resuming recreates the store).
store_read=0; store_write=0
if [ "${STORE_FIO:-1}" != 0 ]; then
  files=("$NVME"/rank*/*.zt)
  read -r store_read store_write < <(python3 experiments/memory_wall/disk_refs.py fio "$block" "$depth" "${files[@]}")
  echo "memory_wall: fio on the run's ${#files[@]} store files: read $(numfmt --to=si --round=nearest "${store_read%.*}")B/s, rewrite $(numfmt --to=si --round=nearest "${store_write%.*}")B/s"
fi
# Then (unless BIG_BENCH=0, and only without a checkpoint to resume from) `zinf io-bench` again at the
# run's block size and queue depth, on a file as large as the states (what the disk has room for once
# the store is gone, less RESERVE_GB): the disk's rates over a step's working set, not over 2 GiB.
big_read=0; big_write=0
if [ "${BIG_BENCH:-1}" != 0 ] && [ "$CHECKPOINT" = 0 ]; then
  rm -rf "$NVME"/rank*
  avail=$(df -B1 --output=avail "$NVME" | tail -n 1)
  gib=$(python3 -c "print(max(1, int(min($states, $avail - $reserve) // (1 << 30))))")
  "$ZINF" io-bench --dir "$NVME" --size "$gib GiB" --block-sizes "$((block >> 10)) KiB" --queue-depths "$depth" > "$work/io_big.txt"
  read -r _ _ big_read big_write < <(python3 experiments/memory_wall/disk_refs.py io-bench "$work/io_big.txt")
  echo "memory_wall: io-bench on $gib GiB: read $(numfmt --to=si --round=nearest "${big_read%.*}")B/s, write $(numfmt --to=si --round=nearest "${big_write%.*}")B/s"
elif [ "${BIG_BENCH:-1}" != 0 ]; then
  echo "memory_wall: no io-bench on the states' size: the store stays for the resume (run with CHECKPOINT=0 for it)"
fi
# The disk while the cores compute (unless LOADED_BENCH=0): io-bench at the run's settings under the
# CPU backend's GEMMs, on LOADED_GIB GiB (default 8; less when the disk has less to spare).
load_read=0; load_write=0
if [ "${LOADED_BENCH:-1}" != 0 ]; then
  avail=$(df -B1 --output=avail "$NVME" | tail -n 1)
  gib=$(python3 -c "print(max(1, min(${LOADED_GIB:-8}, int(($avail - $reserve) // (1 << 30)))))")
  "$ZINF" io-bench --dir "$NVME" --size "$gib GiB" --block-sizes "$((block >> 10)) KiB" --queue-depths "$depth" --compute-load > "$work/io_load.txt"
  read -r _ _ load_read load_write < <(python3 experiments/memory_wall/disk_refs.py io-bench "$work/io_load.txt")
  echo "memory_wall: io-bench on $gib GiB under compute load: read $(numfmt --to=si --round=nearest "${load_read%.*}")B/s, write $(numfmt --to=si --round=nearest "${load_write%.*}")B/s"
  tr '\r' '\n' < "$work/io_load.txt" | grep -E "^(compute load|read and write at once)" | sed 's/^/memory_wall: /'
fi
refs=(--ref "io-bench" "$best_read" "$best_write" --ref "fio on the store" "$store_read" "$store_write"
      --ref "io-bench on the states' size" "$big_read" "$big_write" --ref "io-bench under compute load" "$load_read" "$load_write")
[ "$compute_alone" = 0 ] || refs+=(--compute-alone "$compute_alone")
[ -z "${THREAD_CPU:-}" ] || refs+=(--thread-cpu "$THREAD_CPU")
python3 experiments/memory_wall/report.py "$work/last.csv" "${refs[@]}"

[ "$CHECKPOINT" = 0 ] && exit 0
echo "memory_wall: resuming from $(cat "$NVME/checkpoints/latest") in a new process for one more step"
if ! /usr/bin/time -v "$ZINF" train --model "$work/model.yaml" --hw "$work/hw.yaml" --config "$work/config.yaml" \
  --nvme-dir "$NVME" --steps $((STEPS + 1)) --checkpoint-dir "$NVME/checkpoints" --resume \
  2> "$work/time2.txt" | tee "$work/resume.txt"; then
  grep -v -E '^\s' "$work/time2.txt" | head -n 20
  exit 1
fi
rss2=$(awk -F': ' '/Maximum resident/ {printf "%.0f", $2 * 1024}' "$work/time2.txt")
echo "checkpoint: $(du -sh "$NVME/checkpoints/$(cat "$NVME/checkpoints/latest")" | cut -f1) on disk;" \
     "peak RSS of the resumed process (load, one step, save): $(numfmt --to=iec "$rss2")"
grep -E "^(resumed at|checkpoint:)" "$work/train.txt" "$work/resume.txt" | sed 's/^[^:]*://'
