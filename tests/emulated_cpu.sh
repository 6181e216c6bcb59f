#!/usr/bin/env bash
# Runs the CPU-dependent tests on an emulated CPU (qemu-user), so that the paths this machine's
# CPU does not take run too: AVX2 without AVX-512 ("Haswell"), SSE4.2 without AVX ("Nehalem").
# Checks that `zinf --version` reports the paths expected on that CPU, then runs the tests.
#   emulated_cpu.sh QEMU_CPU "EXPECTED PATHS" ZINF TEST_BINARY...
# Exit 77 (skipped) without qemu-x86_64 or on a host that is not x86-64.
set -euo pipefail
cpu=$1 expected=$2 zinf=$3
shift 3
qemu=$(command -v qemu-x86_64 || true)
if [ -z "$qemu" ] || [ "$(uname -m)" != x86_64 ]; then
  echo "emulated_cpu: no qemu-x86_64 here (Debian package qemu-user): skipped"
  exit 77
fi
# OPENBLAS_CORETYPE (some machines here set it, to Haswell) forces OpenBLAS's kernels whatever the
# CPU: the check is of what OpenBLAS picks on the emulated CPU by itself.
unset OPENBLAS_CORETYPE
run() { "$qemu" -cpu "$cpu" "$@" 2> >(grep -v "TCG doesn't support requested feature" >&2); }
paths=$(run "$zinf" --version | grep '^cpu paths:')
echo "$cpu: $paths"
if [ "$paths" != "cpu paths: $expected" ]; then
  echo "emulated_cpu: on $cpu expected 'cpu paths: $expected', got '$paths'"
  exit 1
fi
for t in "$@"; do
  echo "== $cpu: $(basename "$t")"
  run "$t" "~[native-only]"  # tests of the host's limits, not of the CPU, run natively only
done
echo "1 passed, 0 failed"
