#!/usr/bin/env bash
# The memory wall: a GPT whose model states are a multiple of this machine's RAM, every state on NVMe,
# trained through the CPU backend, as a spec file says (experiments/memory_wall/specs/*.yaml; keys in
# spec.py). Reports the plan's memory against the measured peak RSS, the NVMe lanes' bandwidth in the
# last step and the step against its bounds (report.py), each against the disk references the spec
# asks for:
#   io_bench       `zinf io-bench` on 2 GiB before training; the run config takes its block size and
#                  queue depth unless the spec's config sets them;
#   store_fio      fio reading and rewriting the run's own state files right after it;
#   big_bench      io-bench on a file the size of the states (only without checkpoint);
#   loaded_bench   io-bench while the CPU backend's GEMMs keep the cores busy (`--compute-load`);
#   compute_alone  the same shape trained with every state resident at 1 and 6 layers, extrapolated to
#                  the run's layers: the step without offload (compute_alone.py).
# With checkpoint: true it then saves a checkpoint, resumes from it in a new process for one more step
# and saves again, reporting the peak RSS of each against the plan's RAM. Free disk is checked first
# (the states, and with checkpoints two of 12 B/param more, with reserve_gb left free) and the model
# scaled down, saying so, when it is short.
#   bash experiments/memory_wall/run.sh SPEC.yaml NVME_DIR [--zinf BIN] [--out DIR]
# BIN defaults to build/zinf; DIR (default out/memory_wall/SPEC_NAME) keeps the log (run.log), the last
# step's Timeline (timeline.csv) and, with thread_cpu, the threads' CPU samples (threads.csv).
set -euo pipefail
cd "$(dirname "$0")/../.."
SPEC=${1:?usage: run.sh SPEC.yaml NVME_DIR [--zinf BIN] [--out DIR]}
NVME=${2:?usage: run.sh SPEC.yaml NVME_DIR [--zinf BIN] [--out DIR]}
shift 2
ZINF=build/zinf
OUT=
while [ $# -gt 0 ]; do
  case $1 in
    --zinf) ZINF=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "memory_wall: unknown option '$1' (usage: run.sh SPEC.yaml NVME_DIR [--zinf BIN] [--out DIR])" >&2; exit 2 ;;
  esac
done
settings=$(python3 experiments/memory_wall/spec.py env "$SPEC")
eval "$settings"
OUT=${OUT:-out/memory_wall/$MW_SPEC_NAME}
mkdir -p "$OUT" "$NVME"
if [ "$MW_REALTIME_PRIORITY" -gt 0 ] && [ -z "${MW_UNDER_CHRT:-}" ]; then
  MW_UNDER_CHRT=1 exec chrt -r "$MW_REALTIME_PRIORITY" bash "$0" "$SPEC" "$NVME" --zinf "$ZINF" --out "$OUT"
fi
exec > >(tee "$OUT/run.log") 2>&1
[ -z "$MW_ENVIRONMENT" ] || eval "export $MW_ENVIRONMENT"
[ "$MW_OPENBLAS_KERNELS" = keep ] || unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
echo "memory_wall: spec $SPEC; $("$ZINF" --version | grep 'cpu paths') (openblas_kernels: $MW_OPENBLAS_KERNELS)"
[ -z "$MW_ENVIRONMENT" ] || echo "memory_wall: environment $MW_ENVIRONMENT"
work=$(mktemp -d)
trap 'rm -rf "$work" "$NVME"/rank* "$NVME"/checkpoints' EXIT

ram=$(awk '/MemTotal/ {printf "%.0f", $2 * 1024}' /proc/meminfo)
free_disk=$(df -B1 --output=avail "$NVME" | tail -n 1)
hidden=$MW_HIDDEN
heads=$MW_HEADS
vocab=50257
seq=128
per_layer=$((16 * 12 * hidden * hidden))           # bytes of model states per layer (16 B/param)
embed=$((16 * (vocab + seq) * hidden))             # the token and position embeddings' states
layers=$(python3 -c "import math; print(max(1, math.ceil(($MW_FACTOR * $ram - $embed) / $per_layer)))")
[ "$MW_LAYERS" = 0 ] || layers=$MW_LAYERS
# The states once (and two checkpoints of master, m and v: 24 B/param more) must fit the disk with
# reserve_gb left for everyone else on it.
scale=16
[ "$MW_CHECKPOINT" = 0 ] || scale=40
reserve=$((MW_RESERVE_GB * 1000000000))
max_layers=$(python3 -c "print(int((($free_disk - $reserve) * 16 / $scale - $embed) // $per_layer))")
if [ "$layers" -gt "$max_layers" ]; then
  echo "memory_wall: $NVME has $(numfmt --to=iec "$free_disk") free, $(numfmt --to=iec "$reserve") of it kept for others:" \
       "$layers layers ($MW_FACTOR x RAM) do not fit; scaling down to $max_layers layers" \
       "($(python3 -c "print(round(($max_layers * $per_layer + $embed) / $ram, 2))") x RAM)"
  layers=$max_layers
fi
[ "$layers" -ge 1 ] || { echo "memory_wall: not enough free disk in $NVME for one layer"; exit 1; }

# The store's own bandwidth on this disk, measured now (the disk's speed drifts from minute to minute).
block=1048576; depth=32; best_read=0; best_write=0
if [ "$MW_IO_BENCH" != 0 ]; then
  "$ZINF" io-bench --dir "$NVME" --size "2 GiB" --block-sizes "1 MiB,8 MiB" --queue-depths 8,32,64 | tee "$work/io.txt" | tr '\r' '\n' | grep -E "write .* read .*/s *$"
  read -r block depth best_read best_write < <(python3 experiments/memory_wall/disk_refs.py io-bench "$work/io.txt")
  echo "memory_wall: io-bench best read $(numfmt --to=si --round=nearest "${best_read%.*}")B/s, best write $(numfmt --to=si --round=nearest "${best_write%.*}")B/s; aio block $block, queue depth $depth"
fi
[ -z "$MW_FIXED_BLOCK" ] || { block=$MW_FIXED_BLOCK; echo "memory_wall: the spec's aio block size $block"; }
[ -z "$MW_FIXED_DEPTH" ] || { depth=$MW_FIXED_DEPTH; echo "memory_wall: the spec's aio queue depth $depth"; }

cat > "$work/model.yaml" <<YAML
name: gpt-memory-wall
layers: $layers
hidden: $hidden
heads: $heads
seq: $seq
vocab: $vocab
micro_batch: 1
YAML
python3 experiments/memory_wall/spec.py config "$SPEC" --block "$block" --depth "$depth" > "$work/config.yaml"
# This machine's profile with room for the states on its disk and a device arena of device_gib: the
# largest layer's fp32 gathered parameters with their gradients, and the auto tiling that bounds them,
# need more than the profile's 2 GiB at hidden 3200.
sed "s/^name: .*/name: local-memory-wall/; s/^\(    capacity:\).*/\1 $free_disk/; s/^\(    memory:\).*\(# the CPU backend.*\)/\1 $MW_DEVICE_GIB GiB  \2/" \
  hwprofiles/local.yaml > "$work/hw.yaml"

states=$((layers * per_layer + embed))
echo "memory_wall: $layers layers x hidden $hidden: $(python3 -c "print(round($states / 16 / 1e9, 2))")B params," \
     "$(numfmt --to=iec $states) of states ($(python3 -c "print(round($states / 1e9, 1))") GB, embeddings included) = $(python3 -c "print(round($states / $ram, 2))") x RAM ($(numfmt --to=iec "$ram"))"
compute_alone=0
if [ "$MW_COMPUTE_ALONE" != 0 ]; then
  python3 experiments/memory_wall/compute_alone.py --zinf "$ZINF" --layers "$layers" --hidden "$hidden" --heads "$heads" \
    --seq "$seq" --vocab "$vocab" --tiling "$MW_TILING" --grad-clip "$MW_GRAD_CLIP" --sub-group-size "$MW_SUB_GROUP_SIZE" \
    --hw "$work/hw.yaml" --work "$work" --steps "$MW_ALONE_STEPS" | tee "$work/alone.txt" || echo "memory_wall: no compute-alone reference"
  compute_alone=$(awk '/^compute_alone_s/ {print $2}' "$work/alone.txt")
  compute_alone=${compute_alone:-0}
fi
[ "$MW_PLAN" = 0 ] || "$ZINF" plan --model "$work/model.yaml" --hw "$work/hw.yaml" --config "$work/config.yaml" | grep -E "^(peak|fits)"
ckpt_args=()
[ "$MW_CHECKPOINT" = 0 ] || ckpt_args=(--checkpoint-dir "$NVME/checkpoints")
sampler=
if [ "$MW_THREAD_CPU" != 0 ]; then
  python3 experiments/memory_wall/thread_cpu.py "$work/model.yaml" "$OUT/threads.csv" &
  sampler=$!
fi
cap=()
[ -z "$MW_MEMORY_CAP" ] || cap=(bash experiments/memory_wall/memory_cap.sh "$MW_MEMORY_CAP" "$work/cap.txt")
if ! /usr/bin/time -v "${cap[@]}" "$ZINF" train --model "$work/model.yaml" --hw "$work/hw.yaml" --config "$work/config.yaml" \
  --nvme-dir "$NVME" --steps "$MW_STEPS" --timeline "$OUT/timeline.csv" "${ckpt_args[@]}" 2> "$work/time.txt" | tee "$work/train.txt"; then
  grep -v -E '^\s' "$work/time.txt" | head -n 20
  [ ! -f "$work/cap.txt" ] || echo "memory_wall: memory cap: $(cat "$work/cap.txt")"
  exit 1
fi
[ -z "$sampler" ] || wait "$sampler"
rss=$(awk -F': ' '/Maximum resident/ {printf "%.0f", $2 * 1024}' "$work/time.txt")
echo "peak RSS: $(numfmt --to=iec "$rss")"
if [ -n "$MW_MEMORY_CAP" ]; then
  read -r kind _ _ _ limit _ peak < "$work/cap.txt" || true
  if [ "$kind" = cgroup ]; then
    echo "memory_wall: memory cap: a cgroup of $(numfmt --to=iec "$limit") ($(cut -d' ' -f2 "$work/cap.txt")); its peak usage $(numfmt --to=iec "$peak") (page cache included)"
  else
    echo "memory_wall: memory cap: $(cat "$work/cap.txt"); only the plan's RAM check bounds the run"
  fi
fi
echo "memory_wall: states $(numfmt --to=iec $states) over peak RSS $(numfmt --to=iec "$rss"): $(python3 -c "print(f'{$states / $rss:.1f}')")x"
if [ "$MW_SIM" != 0 ]; then
  "$ZINF" sim --model "$work/model.yaml" --hw "$work/hw.yaml" --config "$work/config.yaml" > "$work/sim.txt" 2>&1 &&
    echo "memory_wall: simulated: $(grep -m1 -E '^step' "$work/sim.txt")" || { echo "memory_wall: zinf sim failed:"; tail -n 5 "$work/sim.txt"; }
fi
# The disk on the run's own files, right after it: fio reads each state file the run left (the sizes
# and the recency the step read), then rewrites it in place, with the run's block size and queue depth
# (io_uring, O_DIRECT, registered buffers). The run is over: the rewrite loses nothing it needs (a
# checkpoint, when one is saved, lives in its own files; resuming recreates the store).
store_read=0; store_write=0
if [ "$MW_STORE_FIO" != 0 ]; then
  files=("$NVME"/rank*/*.zt)
  read -r store_read store_write < <(python3 experiments/memory_wall/disk_refs.py fio "$block" "$depth" "${files[@]}")
  echo "memory_wall: fio on the run's ${#files[@]} store files: read $(numfmt --to=si --round=nearest "${store_read%.*}")B/s, rewrite $(numfmt --to=si --round=nearest "${store_write%.*}")B/s"
fi
# io-bench at the run's block size and queue depth on a file as large as the states (what the disk
# has room for once the store is gone, less reserve_gb): the disk's rates over a step's working set.
big_read=0; big_write=0
if [ "$MW_BIG_BENCH" != 0 ] && [ "$MW_CHECKPOINT" = 0 ]; then
  rm -rf "$NVME"/rank*
  avail=$(df -B1 --output=avail "$NVME" | tail -n 1)
  gib=$(python3 -c "print(max(1, int(min($states, $avail - $reserve) // (1 << 30))))")
  "$ZINF" io-bench --dir "$NVME" --size "$gib GiB" --block-sizes "$((block >> 10)) KiB" --queue-depths "$depth" > "$work/io_big.txt"
  read -r _ _ big_read big_write < <(python3 experiments/memory_wall/disk_refs.py io-bench "$work/io_big.txt")
  echo "memory_wall: io-bench on $gib GiB: read $(numfmt --to=si --round=nearest "${big_read%.*}")B/s, write $(numfmt --to=si --round=nearest "${big_write%.*}")B/s"
elif [ "$MW_BIG_BENCH" != 0 ]; then
  echo "memory_wall: no io-bench on the states' size: the store stays for the resume (checkpoint: false for it)"
fi
# The disk while the cores compute: io-bench at the run's settings under the CPU backend's GEMMs.
load_read=0; load_write=0
if [ "$MW_LOADED_BENCH" != 0 ]; then
  avail=$(df -B1 --output=avail "$NVME" | tail -n 1)
  gib=$(python3 -c "print(max(1, min($MW_LOADED_GIB, int(($avail - $reserve) // (1 << 30)))))")
  "$ZINF" io-bench --dir "$NVME" --size "$gib GiB" --block-sizes "$((block >> 10)) KiB" --queue-depths "$depth" --compute-load > "$work/io_load.txt"
  read -r _ _ load_read load_write < <(python3 experiments/memory_wall/disk_refs.py io-bench "$work/io_load.txt")
  echo "memory_wall: io-bench on $gib GiB under compute load: read $(numfmt --to=si --round=nearest "${load_read%.*}")B/s, write $(numfmt --to=si --round=nearest "${load_write%.*}")B/s"
  tr '\r' '\n' < "$work/io_load.txt" | grep -E "^(compute load|read and write at once)" | sed 's/^/memory_wall: /'
fi
refs=(--ref "io-bench" "$best_read" "$best_write" --ref "fio on the store" "$store_read" "$store_write"
      --ref "io-bench on the states' size" "$big_read" "$big_write" --ref "io-bench under compute load" "$load_read" "$load_write")
[ "$compute_alone" = 0 ] || refs+=(--compute-alone "$compute_alone")
[ "$MW_THREAD_CPU" = 0 ] || refs+=(--thread-cpu "$OUT/threads.csv")
python3 experiments/memory_wall/report.py "$OUT/timeline.csv" "${refs[@]}"

[ "$MW_CHECKPOINT" = 0 ] && exit 0
echo "memory_wall: resuming from $(cat "$NVME/checkpoints/latest") in a new process for one more step"
if ! /usr/bin/time -v "$ZINF" train --model "$work/model.yaml" --hw "$work/hw.yaml" --config "$work/config.yaml" \
  --nvme-dir "$NVME" --steps $((MW_STEPS + 1)) --checkpoint-dir "$NVME/checkpoints" --resume \
  2> "$work/time2.txt" | tee "$work/resume.txt"; then
  grep -v -E '^\s' "$work/time2.txt" | head -n 20
  exit 1
fi
rss2=$(awk -F': ' '/Maximum resident/ {printf "%.0f", $2 * 1024}' "$work/time2.txt")
echo "checkpoint: $(du -sh "$NVME/checkpoints/$(cat "$NVME/checkpoints/latest")" | cut -f1) on disk;" \
     "peak RSS of the resumed process (load, one step, save): $(numfmt --to=iec "$rss2")"
grep -E "^(resumed at|checkpoint:)" "$work/train.txt" "$work/resume.txt" | sed 's/^[^:]*://'
