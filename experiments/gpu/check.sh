#!/usr/bin/env bash
# The GPU check, one command on a machine with an NVIDIA GPU (written for one H200, sm_90):
#   bash experiments/gpu/check.sh
# 1. builds the CUDA backend and what the check runs (Release, CMAKE_CUDA_ARCHITECTURES=90);
# 2. runs the GPU tests (every CUDA kernel against the CPU reference, NCCL collectives, the arena);
# 3. runs the equivalence check: CPU backend vs CUDA backend losses over 10 steps of gpt-tiny, in
#    four configurations, within bf16 tolerance, both columns printed; and offloaded activations
#    (host, NVMe, GDS through pinned memory; per block, per tensor, per-tensor recompute) against
#    the CUDA run that keeps them, within 1e-3 relative;
# 4. measures the cuBLAS bf16 GEMM rate, and trains gpt2-medium with parameters, gradients and
#    optimizer states on NVMe (--nvme-dir, default <build>/nvme) with the CUDA backend, printing its
#    TFLOP/s per GPU beside the GEMM rate.
# Everything is logged to $OUT (default <build>/check) and stdout. Each phase has a time limit so
# the whole check ends within 10 minutes. Exits 2 at once when there is no GPU, 1 if a check failed.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${ZINF_GPU_BUILD:-$ROOT/build-gpu}
OUT=${OUT:-$BUILD/check}
JOBS=${JOBS:-$(nproc)}
NVME_DIR=${ZINF_NVME_DIR:-$BUILD/nvme}
mkdir -p "$OUT"
exec > >(tee "$OUT/check.log") 2>&1
START=$(date +%s)
FAILED=()
DEADLINE=$(( START + ${ZINF_CHECK_SECONDS:-590} ))
phase() { echo; echo "== $* [$(( $(date +%s) - START )) s]"; }
# A phase's time limit: its own cap, or what is left of the whole check's, whichever is less.
limit() { local left=$(( DEADLINE - $(date +%s) )); [ "$left" -lt 5 ] && left=5; echo $(( $1 < left ? $1 : left )); }
fail() { echo "check.sh: FAILED: $*"; FAILED+=("$*"); }

phase "GPU"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q GPU; then
  echo "check.sh: no NVIDIA GPU on this machine (nvidia-smi lists none); run it where a GPU is present" >&2
  exit 2
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if [ ! -x "$NVCC" ]; then
  echo "check.sh: nvcc not found (PATH or /usr/local/cuda/bin): the CUDA backend cannot be built" >&2
  exit 2
fi
"$NVCC" --version | tail -1

phase "configure"
GEN=()
command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
timeout "$(limit 120)" cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$NVCC" \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DZINF_CUDA=ON -DZINF_BUILD_TESTS=ON -DZINF_BUILD_BENCHMARKS=ON > "$OUT/configure.log" \
  || { tail -30 "$OUT/configure.log"; echo "check.sh: cmake failed" >&2; exit 1; }
grep -E "zinf:" "$OUT/configure.log" || true

phase "build (-j$JOBS)"
T0=$(date +%s)
timeout "$(limit 240)" cmake --build "$BUILD" -j "$JOBS" --target zinf cuda_kernels_test cuda_equivalence_test \
  arena_allocator_test bench_cuda_gemm > "$OUT/build.log" 2>&1 \
  || { tail -40 "$OUT/build.log"; echo "check.sh: build failed" >&2; exit 1; }
timeout "$(limit 60)" cmake --build "$BUILD" -j "$JOBS" --target nccl_collectives_check >> "$OUT/build.log" 2>&1 \
  || echo "(no nccl_collectives_check: this build has no MPI; the NCCL test is not run)"
echo "built in $(( $(date +%s) - T0 )) s"

phase "GPU tests"
"$BUILD/tests/cuda_kernels_test" --list-test-names-only > /dev/null
if timeout "$(limit 120)" "$BUILD/tests/cuda_kernels_test" "[cuda]" --reporter compact > "$OUT/kernels.log" 2>&1; then
  tail -1 "$OUT/kernels.log"
else
  rc=$?
  cat "$OUT/kernels.log"
  [ "$rc" = 77 ] && { echo "check.sh: the GPU is not usable by CUDA (see above)" >&2; exit 2; }
  fail "CUDA kernel tests"
fi
timeout "$(limit 240)" ctest --test-dir "$BUILD" -R "cuda|arena" -E equivalence --timeout "$(limit 120)" --output-on-failure 2>&1 \
  | tee "$OUT/ctest.log" | tail -25
[ "${PIPESTATUS[0]}" = 0 ] || fail "GPU tests (ctest)"

phase "equivalence: CPU vs CUDA losses, 10 steps"
ZINF_EQUIV_STEPS=10 timeout "$(limit 180)" "$BUILD/tests/cuda_equivalence_test" 2>&1 | tee "$OUT/equivalence.log"
[ "${PIPESTATUS[0]}" = 0 ] || fail "equivalence"

phase "cuBLAS bf16 GEMM rate"
timeout "$(limit 90)" "$BUILD/experiments/bench_cuda_gemm" --benchmark_min_time=0.2 --benchmark_out="$OUT/gemm.json" \
  --benchmark_out_format=json 2>&1 | tee "$OUT/gemm.log" | grep -E "BM_|ERROR"
GEMM=$(grep -o '"TFLOPs": [0-9.e+]*' "$OUT/gemm.json" 2>/dev/null | awk '{ if ($2 > m) m = $2 } END { printf "%.1f", m }')
[ -n "$GEMM" ] && [ "$GEMM" != "0.0" ] || { fail "GEMM benchmark"; GEMM="?"; }
echo "cuBLAS bf16 GEMM, best of the shapes: $GEMM TFLOP/s"

phase "throughput: gpt2-medium, params + gradients + optimizer states on NVMe ($NVME_DIR)"
rm -rf "$NVME_DIR" && mkdir -p "$NVME_DIR"
STEPS=${ZINF_THROUGHPUT_STEPS:-4}
timeout "$(limit 240)" "$BUILD/zinf" train --backend cuda -m gpt2-medium --hw h200-node -c "$ROOT/experiments/gpu/throughput.yaml" \
  --nvme-dir "$NVME_DIR" --steps "$STEPS" --adam-threads "$(( JOBS > 2 ? JOBS / 2 : 1 ))" \
  --timeline "$OUT/throughput.csv" --trace "$OUT/throughput.trace.json" 2>&1 | tee "$OUT/train.log"
[ "${PIPESTATUS[0]}" = 0 ] || fail "throughput run"
rm -rf "$NVME_DIR"
# The last step (later steps reuse pinned buffers and NVMe files): tokens/s -> model FLOP/s.
# Per token, forward + backward: 6 N for the weights + 12 L S H for attention scores (Megatron's
# count, N = 12 L H^2 + V H + S H); checkpoint interval 1 recomputes the forward: hardware adds 1/3.
LAST=$(grep -E "step $STEPS/$STEPS" "$OUT/train.log" | tail -1)
TOKS=$(echo "$LAST" | sed -nE 's/.*\| ([0-9.]+) tok\/s.*/\1/p')
if [ -n "$TOKS" ]; then
  awk -v t="$TOKS" -v g="$GEMM" 'BEGIN {
    L = 24; H = 1024; V = 50257; S = 1024; N = 12 * L * H * H + V * H + S * H
    model = (6 * N + 12 * L * S * H) * t / 1e12
    printf "\nthroughput: %.0f tokens/s on 1 GPU\n", t
    printf "  model TFLOP/s per GPU     %8.2f   (6N + 12LSH per token, N = %.0fM)\n", model, N / 1e6
    printf "  hardware TFLOP/s per GPU  %8.2f   (with the recomputed forward)\n", model * 4 / 3
    printf "  cuBLAS bf16 GEMM rate     %8s   TFLOP/s (measured above)\n", g
  }' | tee "$OUT/summary.txt"
else
  fail "no step line in the throughput run's output"
fi

phase "done"
if [ ${#FAILED[@]} -gt 0 ]; then
  printf 'check.sh: %d check(s) failed:\n' "${#FAILED[@]}"
  printf '  - %s\n' "${FAILED[@]}"
  exit 1
fi
echo "check.sh: all checks passed in $(( $(date +%s) - START )) s; logs in $OUT"
