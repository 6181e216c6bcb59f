#!/usr/bin/env bash
# Program identity: plans a matrix of (model x config x hwprofile x nodes) with two zinf binaries and
# compares what they write byte for byte: the Program (`zinf plan --program`), the plan report
# (`zinf plan --json`), and for cases that do not plan, the error. For refactors of the planner,
# which must not change any Program.
#   bash experiments/arch/program_identity.sh BASELINE_ZINF [NEW_ZINF (default build/zinf)] [OUT_DIR]
# Exit status 0 when every case is identical; the differing cases are listed otherwise.
set -uo pipefail
cd "$(dirname "$0")/../.."
base=${1:?usage: program_identity.sh BASELINE_ZINF [NEW_ZINF] [OUT_DIR]}
new=${2:-build/zinf}
out=${3:-$(mktemp -d /tmp/program_identity.XXXXXX)}
for b in "$base" "$new"; do [ -x "$b" ] || { echo "not an executable: $b" >&2; exit 2; }; done
mkdir -p "$out/configs" "$out/hw" "$out/base" "$out/new"

# Configs beyond configs/: each covers a planner path the shipped ones leave out.
cfg() { printf '%s\n' "$2" > "$out/configs/$1.yaml"; }
cfg tiling-auto       'zero_stage: 3
offload: {params: nvme, optimizer: nvme}
activation_checkpoint: {interval: 1, tier: host}
tiling_factor: auto'
cfg tiling-4          'zero_stage: 3
offload: {params: cpu, optimizer: cpu}
activation_checkpoint: {interval: 1, tier: host}
tiling_factor: 4
prefetch: {max_live_bytes: 64 MB, reuse_distance_bytes: 0}'
cfg all-auto          'zero_stage: 3
offload: {params: auto, optimizer: auto, gradients: auto}
activation_checkpoint: {interval: 1, tier: auto}
tiling_factor: auto'
cfg nvme-grads        'zero_stage: 3
offload: {params: nvme, optimizer: nvme, gradients: nvme}
activation_checkpoint: {interval: 2, tier: nvme}
gradient_accumulation: 3
optimizer: {grad_clip: 1.0, sub_group_size: 20000000, timing: overlap-backward}'
cfg owner-based       'zero_stage: 3
partitioning: owner-based
offload: {params: cpu, optimizer: cpu}
activation_checkpoint: {interval: 1, tier: host, copies: synchronous}
gradient_accumulation: 2'
cfg owner-stage2      'zero_stage: 2
partitioning: owner-based
offload: {params: none, optimizer: cpu, gradients: cpu}
activation_checkpoint: {interval: 1, tier: device}
optimizer: {timing: overlap-backward, grad_clip: 1.0}'
cfg stage1            'zero_stage: 1
offload: {params: none, optimizer: cpu}
activation_checkpoint: {interval: 0}'
cfg tp2               'zero_stage: 3
tensor_parallel: 2
offload: {params: cpu, optimizer: nvme}
activation_checkpoint: {interval: 1, tier: host, partitioned: true}'
cfg offload-all-nvme  'zero_stage: 3
offload: {params: cpu, optimizer: cpu}
activation_checkpoint: {interval: 1, tier: host}
activation_offload: {policy: offload_all, tier: nvme, prefetch_blocks: 1}'
cfg lifetime-host     'zero_stage: 3
offload: {params: device, optimizer: cpu}
activation_checkpoint: {interval: 2, tier: device}
activation_offload: {policy: lifetime, tier: host}
gradient_accumulation: 2'

# A profile with GPUDirect Storage, for activations written to NVMe from the device.
sed 's/^  pcie:/  gds: {bandwidth_per_switch: 20 GB\/s}\n  pcie:/' hwprofiles/dgx-a100.yaml > "$out/hw/dgx-a100-gds.yaml"
grep -q '^  gds:' "$out/hw/dgx-a100-gds.yaml" || { echo "could not add gds to dgx-a100" >&2; exit 2; }

shipped=(activation-offload data-parallel demo infinity-cpu infinity-nvme paper-capacity paper-tiling train-nvme zero-offload zero3)
extra=(tiling-auto tiling-4 all-auto nvme-grads owner-based owner-stage2 stage1 tp2 offload-all-nvme lifetime-host)
configs=()
for c in "${shipped[@]}"; do configs+=("configs/$c.yaml"); done
for c in "${extra[@]}"; do configs+=("$out/configs/$c.yaml"); done

# (model, hwprofile, nodes): small models on the dev profile, paper scales on the multi-GPU profiles.
cases=(
  "gpt-tiny hwprofiles/cpu-dev.yaml 1"
  "gpt-mini hwprofiles/cpu-dev.yaml 1"
  "gpt-demo hwprofiles/cpu-dev.yaml 1"
  "gpt2-small hwprofiles/dgx-a100.yaml 1"
  "gpt-10b hwprofiles/dgx2-v100.yaml 1"
  "gpt-10b $out/hw/dgx-a100-gds.yaml 2"
  "gpt-100b hwprofiles/dgx2-v100.yaml 4"
  "gpt-100b hwprofiles/h200-node.yaml 2"
)

n=0; same=0; differ=()
for cs in "${cases[@]}"; do
  read -r model hw nodes <<< "$cs"
  for config in "${configs[@]}"; do
    n=$((n + 1))
    id="$(printf '%03d' $n)-$model-$(basename "$hw" .yaml)-n$nodes-$(basename "$config" .yaml)"
    for side in base new; do
      bin=$base; [ $side = new ] && bin=$new
      d="$out/$side/$id"; mkdir -p "$d"
      # One path for both binaries: the report names the file it wrote.
      rm -f "$out/program.json"
      "$bin" plan --model "$model" --hw "$hw" --nodes "$nodes" --config "$config" --json --program "$out/program.json" \
        > "$d/report.json" 2> "$d/stderr"
      echo $? > "$d/rc"
      [ -f "$out/program.json" ] && mv "$out/program.json" "$d/program.json"
    done
    if diff -r -q "$out/base/$id" "$out/new/$id" > /dev/null; then
      same=$((same + 1))
    else
      differ+=("$id")
    fi
  done
done
planned=$(ls "$out"/base/*/program.json 2>/dev/null | wc -l)
echo "program identity: $same of $n cases identical ($planned planned, the rest refused with an error); outputs in $out"
for id in "${differ[@]}"; do echo "  differs: $id"; done
[ ${#differ[@]} -eq 0 ]
