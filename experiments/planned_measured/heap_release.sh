#!/usr/bin/env bash
# What returning freed memory promptly costs and what it saves: the same `zinf train` run with the
# allocator set to release at once (zinf's default) and left as it is (ZINF_HEAP_RELEASE=0),
# alternated PAIRS times (default 5) so that both see the same machine. A GPT of 2 x 512 with
# GPT-2's vocabulary, every state on NVMe, checkpoints on the host, STEPS steps (default 8) on the
# CPU backend. Prints each run's median step time (the first step left out) and the run's own RAM
# (peak RSS less the RSS before the homes were built) against the Program's, then the medians and
# their ratios.
#
#   bash experiments/planned_measured/heap_release.sh NVME_DIR [PAIRS] [STEPS]    # ZINF=build/zinf
set -euo pipefail
cd "$(dirname "$0")/../.."
NVME=${1:?usage: heap_release.sh NVME_DIR [PAIRS] [STEPS]}
PAIRS=${2:-5}
STEPS=${3:-8}
ZINF=${ZINF:-build/zinf}
work=$(mktemp -d)
trap 'rm -rf "$work" "$NVME"/rank*' EXIT
mkdir -p "$NVME"
printf 'name: gpt-heap\nlayers: 2\nhidden: 512\nheads: 8\nseq: 128\nvocab: 50257\nmicro_batch: 1\n' > "$work/model.yaml"
cat > "$work/config.yaml" <<YAML
zero_stage: 3
offload: {params: nvme, gradients: nvme, optimizer: nvme}
activation_checkpoint: {interval: 1, tier: host}
vocabulary_tiles: 1
optimizer: {type: adamw, lr: 1.0e-5, sub_group_size: 10000000}
YAML
for pair in $(seq 1 "$PAIRS"); do
  for mode in prompt kept; do
    env_value=1
    [ "$mode" = kept ] && env_value=0
    ZINF_HEAP_RELEASE=$env_value "$ZINF" train --model "$work/model.yaml" --hw cpu-dev --config "$work/config.yaml" \
      --nvme-dir "$NVME" --steps "$STEPS" --print-every 1 > "$work/$mode-$pair.log" 2>&1
    rm -rf "$NVME"/rank*
  done
done
python3 - "$work" "$PAIRS" <<'PY'
import re, statistics, sys
work, pairs = sys.argv[1], int(sys.argv[2])
units = {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}
q = r"([0-9.]+) (B|kB|MB|GB)"
res = {"prompt": [], "kept": []}
for mode in res:
    for p in range(1, pairs + 1):
        text = open(f"{work}/{mode}-{p}.log").read()
        steps = [float(s) for s in re.findall(r"step (?:[2-9]|[1-9][0-9]+)/[0-9]+ \|[^|]*\|[^|]*\| ([0-9.]+) s", text)]
        own = re.search(r"the run's own RAM " + q + r" \((?:device \+ )?host\) vs " + q, text)
        planned, measured = (float(own.group(i)) * units[own.group(i + 1)] for i in (1, 3))
        res[mode].append((statistics.median(steps), measured / planned))
        print(f"{mode:6s} run {p}: median step {statistics.median(steps):.3f} s, own RAM {measured / 1e6:.0f} MB "
              f"= {measured / planned:.3f} x the Program's {planned / 1e6:.0f} MB")
med = {m: (statistics.median(s for s, _ in r), statistics.median(o for _, o in r)) for m, r in res.items()}
print(f"median step: prompt release {med['prompt'][0]:.3f} s, allocator as it is {med['kept'][0]:.3f} s "
      f"(ratio {med['prompt'][0] / med['kept'][0]:.3f})")
print(f"median own RAM / Program: prompt release {med['prompt'][1]:.3f}, allocator as it is {med['kept'][1]:.3f}")
PY
