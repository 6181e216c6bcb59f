#!/usr/bin/env bash
# The CUDA plugin as the zinf command meets it: zinf does not link the CUDA libraries (they come
# with libzinf_cuda.so, loaded only when CUDA is asked for); `zinf train --backend cuda` loads the
# plugin from beside the executable with every symbol resolved, and then trains (a GPU is here) or
# says why not (the CUDA runtime's reason); a plugin pointed at that does not exist is named.
# Usage: cuda_plugin_cli.sh ZINF_BINARY CUDA_BUILT(ON/OFF). Prints "N passed, M failed".
set -u
ZINF=$1
BUILT=$2
D=$(mktemp -d /var/tmp/zinf-plugin-XXXXXX)
source "$(dirname "${BASH_SOURCE[0]}")/harness.sh"
trap 'rm -rf "$D"' EXIT

readelf -d "$ZINF" > "$D/needed.txt" 2>&1; rc=$?
if [ "$rc" = 0 ] && ! grep -Eq 'NEEDED.*(libcublas|libcudart|libnccl)' "$D/needed.txt"; then
  pass "zinf does not link the CUDA libraries"
else
  fail "zinf links a CUDA library (readelf exit $rc)" "$D/needed.txt"
fi
"$ZINF" train --model gpt-tiny --backend cuda --steps 1 > "$D/train.log" 2>&1; rc=$?
if [ "$BUILT" != ON ]; then
  expect "without CUDA in the build, --backend cuda says so" 1 "built without CUDA" "$D/train.log" $rc
elif [ "$rc" = 0 ]; then
  expect "--backend cuda trains through the plugin" 0 "step 1" "$D/train.log" $rc
else
  expect "--backend cuda loads the plugin and gives the runtime's reason" 1 "no CUDA device found \(cudaGetDeviceCount" "$D/train.log" $rc
fi
if [ "$BUILT" = ON ]; then
  ZINF_CUDA_PLUGIN="$D/nowhere.so" "$ZINF" train --model gpt-tiny --backend cuda --steps 1 > "$D/env.log" 2>&1; rc=$?
  expect "ZINF_CUDA_PLUGIN naming a missing file is named" 1 "ZINF_CUDA_PLUGIN=$D/nowhere.so: no such file" "$D/env.log" $rc
fi
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
