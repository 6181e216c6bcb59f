#!/usr/bin/env bash
# Activation offload against checkpoint-and-recompute, in two parts.
#
# 1. Measured on this machine (CPU backend): a GPT trained ROUNDS times (default 5) for STEPS steps
#    (default 2) under each of: keep every activation on the device (the reference), checkpoint every
#    block to the host and recompute, offload every block's activations to the host, and to NVMe;
#    and the lifetime pass on NVMe with the device budget cut to 0.9 GB (keeping everything needs
#    about 1.3 GB), choosing per tensor and per block. Configurations run interleaved within a
#    round; it prints the median last-step time, its median ratio to the reference of the same
#    round, the device arena's peak and the NVMe bytes of the last step (from its Timeline).
# 2. Simulated on GPU profiles: a 70B-class GPT (80 layers x 8192, 64 heads: Llama-70B's depth and
#    width, 65B parameters as zinf counts a GPT; seq 1024, micro-batch MB (default 8) x 4 accumulated)
#    on one H200 node (8 GPUs) with parameters and optimizer states in host memory: recompute
#    (ZeRO-Infinity's way) and lifetime-aware offload to the host, to NVMe through the host, to NVMe
#    over GDS, or either, each chosen per tensor (the default) and per block; each against an
#    unlimited-memory GPU (everything resident, nothing recomputed). With either path (tier auto)
#    the whole choices are compared by simulated step (tune/auto_config.hpp); its line gives each.
#    Prints step time, throughput, fraction of the unlimited GPU's, device peak, NVMe traffic and
#    the pass's split (items kept / offloaded / recomputed, and their bytes), and draws each run's
#    fraction of the unlimited GPU's throughput into docs/results/img/activation-offload.png.
#   bash experiments/activation_offload/run.sh NVME_DIR [ROUNDS] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
NVME=${1:?usage: run.sh NVME_DIR [ROUNDS] [STEPS]}
ROUNDS=${2:-5}
STEPS=${3:-2}
MB=${MB:-8}
ZINF=${ZINF:-build/zinf}
mkdir -p "$NVME"
work=$(mktemp -d)
trap 'rm -rf "$work" "$NVME"/rank*' EXIT

cat > "$work/model.yaml" <<YAML
name: gpt-act-offload
layers: 8
hidden: 512
heads: 8
seq: 256
vocab: 256
micro_batch: 8
YAML
declare -A cfg=(
  [keep]="activation_checkpoint: {interval: 0}"
  [recompute]="activation_checkpoint: {interval: 1, tier: host}"
  [offload-host]="activation_offload: {policy: offload_all, tier: host}"
  [offload-nvme]="activation_offload: {policy: offload_all, tier: nvme}"
  [lifetime-tensor]="activation_offload: {policy: lifetime, tier: nvme, granularity: tensor}"
  [lifetime-block]="activation_offload: {policy: lifetime, tier: nvme, granularity: block}"
)
names=(keep recompute offload-host offload-nvme lifetime-tensor lifetime-block)
for n in "${names[@]}"; do printf 'zero_stage: 3\n%s\n' "${cfg[$n]}" > "$work/$n.yaml"; done
# The lifetime rows run on a device budget of 0.9 GB: the CPU backend's arena (hwprofiles/local.yaml's gpu.memory).
sed 's/^\(    memory:\) 2.147e+09 /\1 0.9e+09 /' hwprofiles/local.yaml > "$work/local-0.9gb.yaml"
grep -q 'memory: 0.9e+09' "$work/local-0.9gb.yaml" || { echo "could not set the device budget in $work/local-0.9gb.yaml" >&2; exit 1; }
echo "== measured: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; GPT 8 x 512, seq 256, micro-batch 8; $ROUNDS rounds of $STEPS steps"
for r in $(seq 1 "$ROUNDS"); do
  for n in "${names[@]}"; do
    hw=hwprofiles/local.yaml
    case $n in lifetime-*) hw="$work/local-0.9gb.yaml" ;; esac
    "$ZINF" train --model "$work/model.yaml" --hw "$hw" --config "$work/$n.yaml" --nvme-dir "$NVME" \
      --steps "$STEPS" --timeline "$work/$n.r$r.csv" > "$work/$n.r$r.out"
  done
done
python3 - "$work" "$ROUNDS" "$STEPS" "${names[@]}" <<'PY'
import csv, re, statistics, sys
work, rounds, steps, names = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
units = {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}
def size(s):
    v, u = s.split()
    return float(v) * units[u]
def run(n, r):
    out = open(f"{work}/{n}.r{r}.out").read()
    m = re.findall(r"step (\d+)/\d+ \| loss ([\d.]+) \| \d+ tok/s \| ([\d.]+) s \| device [^(]*\(arena ([\d.]+ \w+)\)", out)
    step, loss, secs, arena = m[-1]
    nvme = sum(float(row["bytes"]) for row in csv.DictReader(open(f"{work}/{n}.r{r}.csv")) if row["lane"].startswith("nvme"))
    return float(secs), float(loss), size(arena), nvme
res = {n: [run(n, r) for r in range(1, rounds + 1)] for n in names}
print(f"{'config':<14}{'step s (median)':>16}{'vs keep':>9}{'arena peak':>12}{'NVMe bytes/step':>17}{'loss':>9}")
for n in names:
    ratio = statistics.median(res[n][r][0] / res["keep"][r][0] for r in range(rounds))
    print(f"{n:<14}{statistics.median(x[0] for x in res[n]):>16.3f}{ratio:>8.2f}x"
          f"{statistics.median(x[2] for x in res[n]) / 1e6:>9.1f} MB{statistics.median(x[3] for x in res[n]) / 1e6:>13.1f} MB"
          f"{res[n][-1][1]:>9.4f}")
PY

cat > "$work/gpt-70b.yaml" <<YAML
name: gpt-70b
layers: 80
hidden: 8192
heads: 64
seq: 1024
vocab: 50257
micro_batch: $MB
YAML
# An unlimited-memory H200 (the reference), and one with GPUDirect Storage: 8 NVMe drives behind 4
# PCIe switches, about two Gen4 drives (~13 GB/s read) per switch (our estimate).
sed 's/^name: .*/name: h200-unlimited/; s/^\(    memory:\) 141 GB/\1 100 TB/' hwprofiles/h200-node.yaml > "$work/h200-unlimited.yaml"
sed 's/^name: .*/name: h200-gds/; s/^  nvlink:/  gds: {bandwidth_per_switch: 13 GB\/s}\n  nvlink:/' hwprofiles/h200-node.yaml > "$work/h200-gds.yaml"
common="zero_stage: 3
gradient_accumulation: 4
optimizer: {timing: overlap-backward}"
states="offload: {params: cpu, optimizer: cpu}"
printf '%s\nactivation_checkpoint: {interval: 0}\n' "$common" > "$work/unlimited.yaml"
printf '%s\n%s\nactivation_checkpoint: {interval: 1, tier: host}\n' "$common" "$states" > "$work/recompute.yaml"
for t in host nvme auto; do
  for g in tensor block; do
    printf '%s\n%s\nactivation_offload: {policy: lifetime, tier: %s, granularity: %s}\n' "$common" "$states" "$t" "$g" > "$work/lifetime-$t-$g.yaml"
  done
done
sim() {  # hw config name
  "$ZINF" sim --model "$work/gpt-70b.yaml" --hw "$1" --config "$2" --nodes 1 --json --timeline "$work/$3.csv" --timeline-ranks 0 > "$work/$3.json"
  "$ZINF" plan --model "$work/gpt-70b.yaml" --hw "$1" --config "$2" | grep "^activation offload" > "$work/$3.plan" || true
}
echo
echo "== simulated: GPT 80 x 8192, 64 heads (65B, Llama-70B's depth and width), seq 1024, micro-batch $MB x 4 accumulated," \
     "one H200 node (8 GPUs); params and optimizer states in host memory, optimizer overlapping backward"
sim "$work/h200-unlimited.yaml" "$work/unlimited.yaml" unlimited
sim hwprofiles/h200-node.yaml "$work/recompute.yaml" recompute
for g in tensor block; do
  sim hwprofiles/h200-node.yaml "$work/lifetime-host-$g.yaml" lifetime-host-$g
  sim hwprofiles/h200-node.yaml "$work/lifetime-nvme-$g.yaml" lifetime-nvme-$g
  sim "$work/h200-gds.yaml" "$work/lifetime-nvme-$g.yaml" lifetime-nvme-gds-$g
  sim hwprofiles/h200-node.yaml "$work/lifetime-auto-$g.yaml" lifetime-auto-$g
  sim "$work/h200-gds.yaml" "$work/lifetime-auto-$g.yaml" lifetime-auto-gds-$g
done
mkdir -p docs/results/img
/usr/bin/python3 - "$work" docs/results/img/activation-offload.png <<'PY'
import csv, json, re, sys
work = sys.argv[1]
rows = ["unlimited", "recompute"] + [f"lifetime-{t}-{g}" for g in ("tensor", "block")
                                     for t in ("host", "nvme", "nvme-gds", "auto", "auto-gds")]
path = {"host": "host", "nvme": "NVMe via host", "nvme-gds": "NVMe via GDS", "auto": "host or NVMe", "auto-gds": "host or NVMe (GDS)"}
label = {"unlimited": "unlimited-memory GPU (reference)", "recompute": "checkpoint + recompute (ZeRO-Infinity)"}
for r in rows[2:]:
    t, g = r[len("lifetime-"):].rsplit("-", 1)
    label[r] = f"lifetime per {g}: {path[t]}"
ref = json.load(open(f"{work}/unlimited.json"))
print(f"{'run':<42}{'step s':>8}{'TFLOP/s/GPU':>12}{'of unlimited':>13}{'device peak':>13}{'NVMe GB/step/GPU':>17}  kept/offloaded/recomputed")
auto_lines = []
fractions = []
for r in rows:
    j = json.load(open(f"{work}/{r}.json"))
    fractions.append((label[r], ref["step_time"] / j["step_time"]))
    nvme = sum(float(x["bytes"]) for x in csv.DictReader(open(f"{work}/{r}.csv")) if x["lane"].startswith("nvme"))
    plan = open(f"{work}/{r}.plan").read()
    m = re.search(r"(\d+) (?:segment|tensor)\(s\) kept, (\d+) offloaded, (\d+) recomputed \(([^,]+) kept, ([^,]+) offloaded, ([^ ]+ \w+) recomputed", plan)
    split = "/".join(m.groups()[:3]) + " (" + " / ".join(m.groups()[3:]) + ")" if m else ("all kept" if r == "unlimited" else "all blocks recomputed")
    print(f"{label[r]:<42}{j['step_time']:>8.2f}{j['tflops_per_gpu']:>12.0f}{ref['step_time'] / j['step_time']:>12.1%}"
          f"{j['peak_memory']['device_per_gpu'] / 1e9:>10.1f} GB{nvme / 1e9:>17.1f}  {split}")
    if "auto" in j:
        auto_lines.append(f"  {label[r]}: {j['auto']}")
print("published: TERAIO 80.7 % of an unlimited-memory GPU, ZeRO-Infinity 43 % (Llama-70B, TERAIO's paper)")
print("whole choices compared by simulated step (tier auto):")
print("\n".join(auto_lines))
# The results page's plot: each run's throughput as a fraction of the unlimited-memory GPU's.
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(8, 4.5))
names = [n for n, _ in fractions][::-1]
ax.barh(names, [100 * f for _, f in fractions][::-1], color="C0")
for ref_pct, who in ((80.7, "TERAIO (its paper)"), (43, "ZeRO-Infinity (TERAIO's paper)")):
    ax.axvline(ref_pct, color="gray", linestyle="--", linewidth=1)
    ax.text(ref_pct, -0.9, who, fontsize=7, color="gray", ha="center")
ax.set_xlabel("% of an unlimited-memory GPU's throughput (simulated, same tokens)")
ax.set_title("70B-class GPT on one H200 node, parameters and optimizer in host memory", fontsize=10)
ax.tick_params(axis="y", labelsize=8)
fig.tight_layout()
out = sys.argv[2]
fig.savefig(out, dpi=120)
print(f"wrote {out}")
PY
