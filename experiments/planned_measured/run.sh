#!/usr/bin/env bash
# Planned against measured at scale: a GPT whose model states are FACTOR x this machine's RAM
# (default 0.5; hidden 3200, layers as many as that takes), every state on NVMe, checkpoints on the
# host, on the CPU backend with a DEVICE_GIB (default 8) device arena. Prints what `zinf plan`
# prints for it (the Program's device and host peaks, per tier, with what makes them) and what
# `zinf train` measures over STEPS steps (default 3): the device arena's peak and the process's peak
# RSS (/usr/bin/time), against the Program's device peak and its host + device peak plus the fixed
# overhead (engine::kProcessOverhead). Needs the states' size free on NVME_DIR; peak RSS is about the
# Program's host + device peak (about 7 GB at 0.5 x 24 GiB).
#
#   bash experiments/planned_measured/run.sh NVME_DIR [FACTOR] [STEPS]    # ZINF=build/zinf
set -euo pipefail
cd "$(dirname "$0")/../.."
NVME=${1:?usage: run.sh NVME_DIR [FACTOR] [STEPS]}
FACTOR=${2:-0.5}
STEPS=${3:-3}
ZINF=${ZINF:-build/zinf}
DEVICE_GIB=${DEVICE_GIB:-8}
hidden=3200
vocab=50257
seq=128
ram=$(awk '/MemTotal/ {print $2 * 1024}' /proc/meminfo)
per_layer=$((16 * 12 * hidden * hidden))
embed=$((16 * (vocab + seq) * hidden))
layers=$(python3 -c "print(max(1, round(($FACTOR * $ram - $embed) / $per_layer)))")
states=$((layers * per_layer + embed))
work=$(mktemp -d)
trap 'rm -rf "$work" "$NVME"/rank*' EXIT
mkdir -p "$NVME"
cat > "$work/model.yaml" <<YAML
name: gpt-planned-measured
layers: $layers
hidden: $hidden
heads: 25
seq: $seq
vocab: $vocab
micro_batch: 1
YAML
cat > "$work/config.yaml" <<YAML
zero_stage: 3
offload: {params: nvme, gradients: nvme, optimizer: nvme}
activation_checkpoint: {interval: 1, tier: host}
tiling_factor: auto
optimizer: {type: adamw, lr: 1.0e-5, grad_clip: 1.0, sub_group_size: 10000000, timing: overlap-backward}
prefetch: {nvme_distance: 36}
reserve_nvme_for_checkpoint: false
gradient_stores_in_flight: 16
YAML
free_disk=$(df -B1 --output=avail "$NVME" | tail -n 1)
sed "s/^name: .*/name: local-planned-measured/; s/^\(    capacity:\).*/\1 $free_disk/; s/^\(    memory:\).*\(# the CPU backend.*\)/\1 $DEVICE_GIB GiB  \2/" \
  hwprofiles/local.yaml > "$work/hw.yaml"
echo "planned_measured: $layers layers x hidden $hidden, $(python3 -c "print(round($states / 16e9, 2))")B params," \
     "$(python3 -c "print(round($states / 1e9, 1))") GB of states = $(python3 -c "print(round($states / $ram, 2))") x RAM"
"$ZINF" plan --model "$work/model.yaml" --hw "$work/hw.yaml" --config "$work/config.yaml" > "$work/plan.txt"
sed -n '/^the Program.s memory/,/^fits/p' "$work/plan.txt"
"$ZINF" plan --model "$work/model.yaml" --hw "$work/hw.yaml" --config "$work/config.yaml" --json > "$work/plan.json"
/usr/bin/time -v "$ZINF" train --model "$work/model.yaml" --hw "$work/hw.yaml" --config "$work/config.yaml" \
  --nvme-dir "$NVME" --steps "$STEPS" 2> "$work/time.txt" | tee "$work/train.txt" | grep -E "^(memory per rank|warning|buffers|heap)"
python3 - "$work/plan.json" "$work/train.txt" "$work/time.txt" <<'PY'
import json, re, sys
plan = json.load(open(sys.argv[1]))
train, timing = open(sys.argv[2]).read(), open(sys.argv[3]).read()
units = {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}
m = re.search(r"vs arena peak ([0-9.]+) (B|kB|MB|GB|TB); RAM .*\(device \+ host \+ ([0-9.]+) (B|kB|MB|GB|TB) overhead\)", train)
arena, overhead = float(m.group(1)) * units[m.group(2)], float(m.group(3)) * units[m.group(4)]
rss = float(re.search(r"Maximum resident set size \(kbytes\): (\d+)", timing).group(1)) * 1024
device, host = plan["memory"]["device"]["peak"], plan["memory"]["host"]["peak"]  # one rank: per node = per rank
ram = device + host + overhead
print(f"plan (zinf plan): device {device / 1e9:.2f} GB, host {host / 1e9:.2f} GB; + overhead {overhead / 1e9:.2f} GB = {ram / 1e9:.2f} GB")
print(f"measured: arena {arena / 1e9:.2f} GB ({arena / device:.3f} x plan), peak RSS {rss / 1e9:.2f} GB ({rss / ram:.3f} x plan + overhead)")
own = re.search(r"the run's own RAM ([0-9.]+) (B|kB|MB|GB|TB) \(device \+ host\) vs ([0-9.]+) (B|kB|MB|GB|TB)", train)
if own:  # peak RSS less what the process held before the homes were built, against the Program's host + device
    planned_own, measured_own = float(own.group(1)) * units[own.group(2)], float(own.group(3)) * units[own.group(4)]
    print(f"the run's own RAM: {measured_own / 1e9:.2f} GB ({measured_own / planned_own:.3f} x the Program's {planned_own / 1e9:.2f} GB)")
ok = 0.9 * device <= arena <= 1.1 * device and rss <= ram
print("planned_measured:", "within" if ok else "OUTSIDE", "(arena within 10 % of the device peak, RSS within host + device + overhead)")
sys.exit(0 if ok else 1)
PY
