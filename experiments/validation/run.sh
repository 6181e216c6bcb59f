#!/usr/bin/env bash
# The validation suite: each configuration is trained for real on this machine and simulated on its
# measured profile (`zinf validate`); analysis/validation_report.py then writes the table, the
# scatter plot and the Gantt charts to analysis/validation/ and prints the median and largest error.
#
#   bash experiments/validation/run.sh            # profiles the machine, then runs the suite
#   ZINF_BUILD=build-val STEPS=60 WARMUP=5 bash experiments/validation/run.sh
#   REUSE_PROFILE=1 ...                            # keep hwprofiles/local.yaml as it is
#
# The machine is profiled again right before the suite (8 s): on a shared 2-core host the rates move
# by 30-50 % from minute to minute, and a profile is only a fair reference for runs made under the
# same load (shared/notes/MACHINE.md).
#
# OPENBLAS_NUM_THREADS=1 for every run (profile and training alike): this machine has 2 cores and is
# shared; OpenBLAS's spinning worker threads turned a 30 MFLOP attention call into 0.7 s when other
# processes held the cores, which no profile can predict. One BLAS thread per rank is what N ranks
# on 2 cores use anyway.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${ZINF_BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
ZINF="$BUILD/zinf"
STEPS=${STEPS:-60}
WARMUP=${WARMUP:-5}
PROFILE=${PROFILE:-local}
OUT="$ROOT/analysis/validation"
RUNS="$OUT/runs"
SCRATCH=${SCRATCH:-$(mktemp -d /tmp/zinf-validation.XXXXXX)}
export OPENBLAS_NUM_THREADS=1
cd "$ROOT"

[ -x "$ZINF" ] || { echo "no $ZINF: build first (cmake --build $BUILD --target zinf)" >&2; exit 1; }
if [ -z "${REUSE_PROFILE:-}" ] || [ ! -f "hwprofiles/$PROFILE.yaml" ]; then
  "$ZINF" profile-hw --out "hwprofiles/$PROFILE.yaml" --nvme-dir "$SCRATCH"
fi

CFG=experiments/validation/configs
# name            model     config                   ranks
SUITE="
mini-nvme         gpt-mini  $CFG/nvme.yaml           1
mini-cpu          gpt-mini  $CFG/cpu.yaml            1
mini-device       gpt-mini  $CFG/device.yaml         1
mini-nvme-tiled   gpt-mini  $CFG/nvme-tiled.yaml     1
mini-ckpt-nvme    gpt-mini  $CFG/nvme-ckpt-nvme.yaml 1
mini-prefetch1    gpt-mini  $CFG/nvme-prefetch1.yaml 1
mini-cpu-2r       gpt-mini  $CFG/cpu.yaml            2
mini-cpu-4r       gpt-mini  $CFG/cpu.yaml            4

tiny-nvme         gpt-tiny  $CFG/nvme.yaml           1
tiny-cpu-2r       gpt-tiny  $CFG/cpu.yaml            2
"
mkdir -p "$RUNS"
start=$(date +%s)
echo "$SUITE" | while read -r name model config ranks; do
  [ -n "$name" ] || continue
  mkdir -p "$SCRATCH/$name"
  printf '%-16s ' "$name"
  "$ZINF" validate --model "$model" --config "$config" --ranks "$ranks" --steps "$STEPS" --warmup "$WARMUP" --hw "$PROFILE" \
    --label "$name" --out-dir "$RUNS/$name" --nvme-dir "$SCRATCH/$name" --json >/dev/null </dev/null
  /usr/bin/python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print('measured %.3f s  predicted %.3f s  error %+.1f%%' % (j['measured']['median'], j['predicted'], 100*j['error']))" "$RUNS/$name/validate.json"
done
rm -rf "$RUNS"/*/nvme
echo "suite time: $(( $(date +%s) - start )) s"
/usr/bin/python3 analysis/validation_report.py "$RUNS" "$OUT" --gantt mini-nvme
