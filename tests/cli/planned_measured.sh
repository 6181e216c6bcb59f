#!/usr/bin/env bash
# Planned equals measured on the CPU backend, as a user sees it: for each configuration, `zinf
# train` prints its Program's device and host peaks against what the run held (the device arena's
# peak, the process's peak RSS), and here the arena is within 10 % of the Program's device peak and
# the peak RSS within the Program's host + device peak plus the stated fixed overhead
# (engine::kProcessOverhead, 512 MiB: libraries, the corpus, BLAS buffers), with no warning; and the
# run's own RAM (peak RSS less what the process held before the homes were built) within 10 % of
# the Program's host + device peak. A model of 12.6M parameters (200 MB of model states) so that the
# Program's bytes, not the overhead, make most of the RSS where states live in host memory.
# Configurations: every state on the device;
# states on the host; every state on NVMe with checkpoints there; tiled linears; activations offloaded
# to the host; and, under mpirun, tensor parallel 2 and owner-based partitioning over 2 ranks.
# `zinf plan` prints the same peaks for the same run (the Program's accounting; for the ranks
# mpirun starts on this machine, with --gpus-per-node).
# Usage: planned_measured.sh ZINF_BINARY [MPIEXEC]. Prints "N passed, M failed".
set -u
ZINF=$1
MPIEXEC=${2:-}
D=$(mktemp -d /var/tmp/zinf-pm-XXXXXX)
source "$(dirname "${BASH_SOURCE[0]}")/harness.sh"
cd "$(dirname "$0")/../.."
trap 'rm -rf "$D"' EXIT
printf 'name: gpt-mid\nlayers: 4\nhidden: 512\nheads: 8\nseq: 64\nvocab: 256\nmicro_batch: 2\n' > "$D/mid.yaml"

# check NAME LOG: the "memory per rank" line of LOG within the bounds, and no warning.
check() {
  local name=$1 log=$2
  if python3 - "$log" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
units = {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}
q = r"([0-9.]+) (B|kB|MB|GB|TB)"
m = re.search(r"memory per rank, planned vs measured: device " + q + r" vs arena peak " + q + r"; RAM " + q +
              r" \(device \+ host \+ " + q + r" overhead\) vs peak RSS " + q, text)
assert m, "no 'memory per rank' line"
v = [float(m.group(i)) * units[m.group(i + 1)] for i in range(1, 11, 2)]
device, arena, ram, overhead, rss = v
print(f"  device {device / 1e6:.1f} MB, arena {arena / 1e6:.1f} MB ({arena / device:.3f}x); "
      f"RAM planned {ram / 1e6:.0f} MB (overhead {overhead / 1e6:.0f} MB), peak RSS {rss / 1e6:.0f} MB ({rss / ram:.3f}x)")
own = re.search(r"the run's own RAM " + q + r" \((?:device \+ )?host\) vs " + q, text)
assert own, "no 'the run's own RAM' figure"
planned_own, measured_own = (float(own.group(i)) * units[own.group(i + 1)] for i in (1, 3))
print(f"  the run's own RAM: planned {planned_own / 1e6:.0f} MB, measured {measured_own / 1e6:.0f} MB "
      f"({measured_own / planned_own:.3f}x; peak RSS less the RSS before the homes were built)")
assert 0.9 * device <= arena <= 1.1 * device, "arena not within 10 % of the Program's device peak"
assert rss <= ram * 1.005, "peak RSS over the Program's host + device + overhead"  # 0.5 %: the figures' 3 digits
assert 0.9 * planned_own <= measured_own <= 1.1 * planned_own, "the run's own RAM not within 10 % of the Program's"
assert "measured memory is over the plan" not in text, "zinf train warned"
PY
  then pass "$name: planned equals measured"; else fail "$name" "$log"; fi
}

run() {
  local name=$1 config=$2
  printf '%s' "$config" > "$D/$name.yaml"
  mkdir -p "$D/nvme-$name"
  "$ZINF" train --model "$D/mid.yaml" --hw cpu-dev --config "$D/$name.yaml" --steps 2 --nvme-dir "$D/nvme-$name" \
    > "$D/$name.log" 2>&1 || { fail "$name: zinf train failed" "$D/$name.log"; return; }
  check "$name" "$D/$name.log"
  rm -rf "$D/nvme-$name"
}

run resident $'zero_stage: 3\nactivation_checkpoint: {interval: 0}\n'
run host $'zero_stage: 3\noffload: {params: cpu, optimizer: cpu}\nactivation_checkpoint: {interval: 1, tier: host}\n'
run nvme $'zero_stage: 3\noffload: {params: nvme, gradients: nvme, optimizer: nvme}\nactivation_checkpoint: {interval: 1, tier: nvme}\noptimizer: {sub_group_size: 1000000}\n'
run tiled $'zero_stage: 3\noffload: {optimizer: cpu}\ntiling_factor: 4\nactivation_checkpoint: {interval: 2, tier: device}\n'
run offload $'zero_stage: 3\noffload: {optimizer: cpu}\nactivation_checkpoint: {interval: 0}\nactivation_offload: {policy: offload_all, tier: host}\n'
# zinf plan's headline for the host run is the Program the run checked against.
"$ZINF" plan --model "$D/mid.yaml" --hw cpu-dev --config "$D/host.yaml" > "$D/plan.log" 2>&1
planned=$(sed -n 's/^peak  *\([0-9.]* [kMGT]\?B\) .*/\1/p' "$D/plan.log")
trained=$(sed -n 's/.*planned vs measured: device \([0-9.]* [kMGT]\?B\) vs.*/\1/p' "$D/host.log")
if [ -n "$planned" ] && [ "$planned" = "$trained" ]; then pass "zinf plan prints the device peak zinf train checks ($planned)"
else fail "zinf plan's device peak '$planned' is not zinf train's '$trained'" "$D/plan.log"; fi
if [ -n "$MPIEXEC" ]; then
  for name in tp2 owner; do
    case $name in
      tp2) config=$'zero_stage: 3\ntensor_parallel: 2\noffload: {optimizer: cpu}\n' ;;
      owner) config=$'zero_stage: 3\npartitioning: owner-based\noffload: {params: cpu, optimizer: cpu}\n' ;;
    esac
    printf '%s' "$config" > "$D/$name.yaml"
    "$MPIEXEC" -np 2 "$ZINF" train --model "$D/mid.yaml" --hw cpu-dev --config "$D/$name.yaml" --steps 2 --nvme-dir "$D" \
      > "$D/$name.log" 2>&1 || { fail "$name: mpirun -np 2 zinf train failed" "$D/$name.log"; continue; }
    check "$name over 2 ranks" "$D/$name.log"
  done
  # zinf plan, told the node's two ranks, prints the device peak the tensor-parallel run checked.
  "$ZINF" plan --model "$D/mid.yaml" --hw cpu-dev --config "$D/tp2.yaml" --gpus-per-node 2 > "$D/plan-tp2.log" 2>&1
  planned=$(sed -n 's/^peak  *\([0-9.]* [kMGT]\?B\) .*/\1/p' "$D/plan-tp2.log")
  trained=$(sed -n 's/.*planned vs measured: device \([0-9.]* [kMGT]\?B\) vs.*/\1/p' "$D/tp2.log")
  if [ -n "$planned" ] && [ "$planned" = "$trained" ]; then pass "zinf plan --gpus-per-node 2 prints the device peak of tp2 over 2 ranks ($planned)"
  else fail "zinf plan --gpus-per-node 2's device peak '$planned' is not zinf train's '$trained'" "$D/plan-tp2.log"; fi
  # --json records the node it planned for, so the result can be made again.
  if "$ZINF" plan --model "$D/mid.yaml" --hw cpu-dev --config "$D/tp2.yaml" --gpus-per-node 2 --json 2>/dev/null |
    python3 -c 'import json, sys; j = json.load(sys.stdin); sys.exit(not (j["gpus_per_node"] == 2 and j["ranks"] == 2))'
  then pass "zinf plan --json records --gpus-per-node"; else fail "zinf plan --json lacks gpus_per_node 2" "$D/plan-tp2.log"; fi
fi
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
