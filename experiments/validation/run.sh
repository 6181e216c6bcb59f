#!/usr/bin/env bash
# The validation suite: each configuration is trained for real on this machine and simulated on its
# measured profile (`zinf validate`); analysis/validation_report.py then writes the table, the
# scatter plot and the Gantt charts to analysis/validation/ and prints the median and largest error.
#
#   bash experiments/validation/run.sh            # 3 passes, each: profile the machine, run the suite
#   PASSES=1 STEPS=60 WARMUP=5 ZINF_BUILD=build-val bash experiments/validation/run.sh
#   REUSE_PROFILE=1 ...                            # every pass predicts on hwprofiles/local.yaml as it is
#
# A pass profiles the machine (13 s) and then runs every configuration once; passes run one after
# another, so each configuration is measured at PASSES moments minutes apart. On a shared 2-core
# host the rates move by 30-50 % from minute to minute (measured on these machines): a profile is only
# a fair reference for runs made under the same load, and one pass's error mixes the simulator's
# error with that drift. Each configuration's error is the median over the passes, each pass a
# profile and a measurement of its own; the report prints every pass's figures as well.
# hwprofiles/local.yaml is left holding the last pass's profile.
#
# OPENBLAS_NUM_THREADS=1 for every run (profile and training alike) unless it is set: this machine
# has 2 cores and is shared; OpenBLAS's spinning worker threads turned a 30 MFLOP attention call into
# 0.7 s when other processes held the cores, which no profile can predict. One BLAS thread per rank
# is what N ranks on 2 cores use anyway, and what `zinf train` pins when the variable is unset.
# OPENBLAS_NUM_THREADS=2 runs the suite as a user who sets it does (profile and runs alike).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${ZINF_BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
ZINF="$BUILD/zinf"
STEPS=${STEPS:-60}
WARMUP=${WARMUP:-5}
PASSES=${PASSES:-3}
PROFILE=${PROFILE:-local}
OUT="$ROOT/analysis/validation"
RUNS="$OUT/runs"
if [ -z "${SCRATCH:-}" ]; then
  SCRATCH=$(mktemp -d /tmp/zinf-validation.XXXXXX)
  trap 'rm -rf "$SCRATCH"' EXIT
fi
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
echo "OpenBLAS: $OPENBLAS_NUM_THREADS thread(s) per process, for the profile and every run"
cd "$ROOT"

[ -x "$ZINF" ] || { echo "no $ZINF: build first (cmake --build $BUILD --target zinf)" >&2; exit 1; }
case "$PASSES" in ''|*[!0-9]*|0) echo "PASSES must be a positive integer, not '$PASSES'" >&2; exit 1 ;; esac

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
rm -rf "$RUNS"
mkdir -p "$RUNS"
start=$(date +%s)
for pass in $(seq 1 "$PASSES"); do
  dir="$RUNS/pass-$pass"
  mkdir -p "$dir"
  echo "== pass $pass of $PASSES"
  if [ -n "${REUSE_PROFILE:-}" ] && [ -f "hwprofiles/$PROFILE.yaml" ]; then
    # A profile measured on another machine predicts that machine: say so before every pass.
    "$ZINF" profile-hw --check "hwprofiles/$PROFILE.yaml" --nvme-dir "$SCRATCH" ||
      echo "(continuing with hwprofiles/$PROFILE.yaml as asked; its errors measure the difference between the machines too)"
    cp "hwprofiles/$PROFILE.yaml" "$dir/profile.yaml"
  else
    "$ZINF" profile-hw --out "$dir/profile.yaml" --nvme-dir "$SCRATCH" | tail -n 1
  fi
  echo "$SUITE" | while read -r name model config ranks; do
    [ -n "$name" ] || continue
    mkdir -p "$SCRATCH/$name"
    printf '%-16s ' "$name"
    "$ZINF" validate --model "$model" --config "$config" --ranks "$ranks" --steps "$STEPS" --warmup "$WARMUP" \
      --hw "$dir/profile.yaml" --label "$name" --out-dir "$dir/$name" --nvme-dir "$SCRATCH/$name" --json >/dev/null </dev/null
    /usr/bin/python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print('measured %.3f s  predicted %.3f s  error %+.1f%%' % (j['measured']['median'], j['predicted'], 100*j['error']))" "$dir/$name/validate.json"
  done
  rm -rf "$dir"/*/nvme
done
[ -n "${REUSE_PROFILE:-}" ] || cp "$RUNS/pass-$PASSES/profile.yaml" "hwprofiles/$PROFILE.yaml"
echo "suite time: $(( $(date +%s) - start )) s"
/usr/bin/python3 analysis/validation_report.py "$RUNS" "$OUT" --gantt mini-nvme --img "$ROOT/docs/results/img/validation"
