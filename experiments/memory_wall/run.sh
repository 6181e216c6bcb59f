#!/usr/bin/env bash
# The largest model this machine trains: a GPT whose model states are FACTOR x this machine's RAM
# (default 2.5), every state on NVMe, trained for STEPS steps (default 3). Reports the plan's memory
# against the measured peak RSS, the NVMe lanes' bandwidth in the last step and the step against
# its bounds. Then (unless CHECKPOINT=0) it saves a checkpoint, resumes from it in a new process for
# one more step and saves again, reporting the peak RSS while saving and while loading against the
# plan's RAM: both stream a parameter group at a time, so neither holds the model. Checks free disk
# first (the states, embeddings included, and with checkpoints two of 12 B/param more, with
# RESERVE_GB, default 8, left free) and scales the model down, saying so, when it is short. Before training (unless IO_BENCH=0) it runs `zinf io-bench` on the
# same directory: the run config takes its best block size and queue depth, and the NVMe lanes'
# bandwidth while busy is reported against its best read and best write, the step against
# max(compute alone, read bytes / best read + written bytes / best write). TASKS_IN_FLIGHT
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
# TILING (default auto) is tiling_factor; a number skips the `auto` search, which simulates candidates.
TILING=${TILING:-auto}
ZINF=${ZINF:-build/zinf}
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
block="1 MiB"; depth=32; best_read=0; best_write=0
if [ "$IO_BENCH" != 0 ]; then
  "$ZINF" io-bench --dir "$NVME" --size "2 GiB" --block-sizes "1 MiB,8 MiB" --queue-depths 8,32 | tee "$work/io.txt" | tr '\r' '\n' | grep -E "write .* read .*/s *$"
  read -r block depth best_read best_write < <(python3 - "$work/io.txt" <<'PY'
import re, sys
units = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
def bps(v, u): return float(v) * units[u[:-3]] if u[:-3] in units else float(v)
pts = []
for line in open(sys.argv[1]).read().replace("\r", "\n").splitlines():
    m = re.search(r"\]\s+(\d+) (KiB|MiB)\s+qd\s+(\d+)\s+write\s+([\d.]+) (\S+)\s+read\s+([\d.]+) (\S+)", line)
    if m:
        block = int(m[1]) << (20 if m[2] == "MiB" else 10)
        pts.append((block, int(m[3]), bps(m[4], m[5]), bps(m[6], m[7])))
best = max(pts, key=lambda p: 2 / (1 / p[2] + 1 / p[3]))
print(best[0], best[1], max(p[3] for p in pts), max(p[2] for p in pts))
PY
)
  echo "memory_wall: io-bench best read $(numfmt --to=si "${best_read%.*}")B/s, best write $(numfmt --to=si "${best_write%.*}")B/s; aio block $block, queue depth $depth"
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
description: every state on NVMe, checkpoints on the host
zero_stage: 3
offload: {params: nvme, gradients: nvme, optimizer: nvme}
activation_checkpoint: {interval: 1, tier: host}
tiling_factor: $TILING
aio: {block_size: $block, queue_depth: $depth, tasks_in_flight: $TASKS_IN_FLIGHT}
optimizer: {type: adamw, lr: 1.0e-5, grad_clip: 1.0, sub_group_size: 10000000, timing: $OPTIMIZER_TIMING,
            sub_groups_in_flight: $SUB_GROUPS_IN_FLIGHT, nvme_phases: $NVME_PHASES}
reserve_nvme_for_checkpoint: false
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
python3 - "$work/last.csv" "$best_read" "$best_write" "${THREAD_CPU:-}" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
best = {"nvme_read": float(sys.argv[2]), "nvme_write": float(sys.argv[3])}
def union_busy(spans):
    """Seconds covered by the union of (start, end) intervals."""
    busy, lo, hi = 0.0, None, None
    for a, b in sorted(spans):
        if hi is None or a > hi:
            busy += (hi - lo) if hi is not None else 0.0
            lo, hi = a, b
        else:
            hi = max(hi, b)
    return busy + ((hi - lo) if hi is not None else 0.0)
def lane(name):
    # Busy time is the union of the lane's task intervals: tasks of an NVMe lane overlap.
    spans = [(float(r["start"]), float(r["end"])) for r in rows if r["lane"] == name]
    return sum(float(r["bytes"]) for r in rows if r["lane"] == name), union_busy(spans)
step = max(float(r["end"]) for r in rows) - min(float(r["start"]) for r in rows)
traffic = 0.0
for name in ("nvme_read", "nvme_write"):
    b, busy = lane(name)
    rate = b / busy if busy else 0
    ratio = f", {rate / best[name]:.2f} x io-bench's best" if best[name] else ""
    print(f"{name}: {b / 1e9:.1f} GB in {busy:.1f} s busy = {rate / 1e9:.2f} GB/s while busy{ratio}, {b / step / 1e9:.2f} GB/s over the step")
    if best[name]:
        traffic += b / best[name]
# The disk as a whole: both lanes share it, so each lane's rate while busy falls when they overlap.
# Its efficiency is the time io-bench's best rates need for the step's traffic over the time at
# least one NVMe lane was busy.
rows.extend([dict(r, lane="nvme") for r in rows if r["lane"] in ("nvme_read", "nvme_write")])
total, disk_busy = lane("nvme")
if best["nvme_read"] and best["nvme_write"]:
    need = lane("nvme_read")[0] / best["nvme_read"] + lane("nvme_write")[0] / best["nvme_write"]
    print(f"disk: {total / 1e9:.1f} GB in {disk_busy:.1f} s with either lane busy; at io-bench's best that traffic takes {need:.1f} s: {need / disk_busy:.2f} x")
_, compute = lane("compute")
t0 = min(float(r["start"]) for r in rows)
last_bwd = max((float(r["end"]) for r in rows if r["kind"] == "backward"), default=t0)
print(f"last step {step:.1f} s: compute lane busy {compute:.1f} s; {step - (last_bwd - t0):.1f} s of it after backward")
# After backward: the optimizer's waves. Their bytes over the disk's busy time then.
def after(name, t):
    spans = [(max(float(r["start"]), t), float(r["end"]), float(r["bytes"]) * max(0.0, float(r["end"]) - max(float(r["start"]), t)) / max(1e-9, float(r["end"]) - float(r["start"])))
             for r in rows if r["lane"] == name and float(r["end"]) > t]
    return sum(x for _, _, x in spans), union_busy([(a, b) for a, b, _ in spans])
rb, rbusy = after("nvme_read", last_bwd)
wb, wbusy = after("nvme_write", last_bwd)
_, dbusy = after("nvme", last_bwd)
_, abusy = after("cpu_optim", last_bwd)
if rbusy and wbusy:
    print(f"after backward: read {rb / 1e9:.1f} GB at {rb / rbusy / 1e9:.2f} GB/s while busy, write {wb / 1e9:.1f} GB at {wb / wbusy / 1e9:.2f} GB/s;"
          f" disk busy {dbusy:.1f} s, cpu_optim lane busy {abusy:.1f} s")
if sys.argv[4]:
    # Cores used per thread class in the window after backward; the sampler's last row is the
    # process's end, which the last step's end precedes by about a second. A thread's CPU time at
    # t is its last sample at or before t (0 before its first: it did not exist); the NVMe
    # threads are those above the process's real-time priority.
    samples = list(csv.DictReader(open(sys.argv[4])))
    if samples:
        t_end = max(float(r["t"]) for r in samples)
        lo = t_end - (step - (last_bwd - t0))
        base_rt = min(int(r["rt_priority"]) for r in samples)
        per = {}
        for r in samples:
            per.setdefault(r["tid"], []).append((float(r["t"]), float(r["cpu_s"]), int(r["rt_priority"]) > base_rt))
        def cpu_at(pts, t):
            v = 0.0
            for ts, c, _ in pts:
                if ts <= t:
                    v = c
            return v
        by = {"io": 0.0, "other": 0.0}
        for pts in per.values():
            by["io" if any(x[2] for x in pts) else "other"] += cpu_at(pts, t_end) - cpu_at(pts, lo)
        m = sorted({(float(r["t"]), float(r["machine_busy_s"]), float(r["machine_steal_s"])) for r in samples})
        def mach(t):
            v = m[0]
            for x in m:
                if x[0] <= t:
                    v = x
            return v
        (ta, ba, sa), (tb, bb, sb) = mach(lo), mach(t_end)
        span = max(1e-9, tb - ta)
        print(f"threads after backward ({span:.1f} s): NVMe threads {by['io'] / span:.2f} cores, the others {by['other'] / span:.2f} cores;"
              f" the machine busy {(bb - ba) / span:.2f} cores, steal {(sb - sa) / span:.2f} (of {__import__('os').cpu_count()})")
if traffic:
    bound = max(compute, traffic)
    print(f"step bound max(compute {compute:.1f} s, NVMe traffic / io-bench best {traffic:.1f} s) = {bound:.1f} s: step = {step / bound:.2f} x bound")
PY

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
