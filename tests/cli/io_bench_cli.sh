#!/usr/bin/env bash
# `zinf io-bench` as a user runs it: a small sweep on a temporary directory measures every point,
# then both directions at once, recommends aio settings as a config line and leaves nothing behind;
# a directory that does not exist and a block size O_DIRECT cannot use are refused by name; with
# --compute-load it measures under the CPU backend's GEMMs and reports their rate alone and during.
# Usage: io_bench_cli.sh ZINF_BINARY. Prints "N passed, M failed".
set -u
ZINF=$1
D=$(mktemp -d /var/tmp/zinf-io-bench-XXXXXX)
source "$(dirname "${BASH_SOURCE[0]}")/harness.sh"
trap 'rm -rf "$D"' EXIT
mkdir "$D/disk"
"$ZINF" io-bench --dir "$D/disk" --size "64 MiB" --block-sizes "1 MiB,4 MiB" --queue-depths 2,8 > "$D/bench.log" 2>&1; rc=$?
expect "io-bench sweeps 2 x 2 points and recommends aio settings" 0 "^aio: \{block_size: [0-9]+, queue_depth: [28]\}" "$D/bench.log" $rc
# Written to a file, not a terminal: no progress bar redrawn with carriage returns, a line per point.
if grep -q $'\r' "$D/bench.log"; then fail "io-bench wrote carriage returns (a progress bar) into a log" "$D/bench.log"
else pass "a log gets no progress bar"; fi
if [ "$(grep -cE "^  \[ ?[1-4]/4\] .* write +[0-9.]+ [GMk]?B/s +read +[0-9.]+ [GMk]?B/s" "$D/bench.log")" = 4 ]; then pass "every point is measured both ways"
else fail "io-bench did not report write and read for each of the 4 points" "$D/bench.log"; fi
# The recommendation is the deepest queue among the points within 5 % of the best harmonic mean of
# write and read (a deeper queue costs the engine no memory; a step's two lanes share the rings).
rule=$(awk '
  function rate(v, u) { return v * (u ~ /^G/ ? 1e9 : u ~ /^M/ ? 1e6 : u ~ /^k/ ? 1e3 : 1) }
  /^  \[ ?[1-4]\/4\] .* write +[0-9.]+ [GMk]?B\/s +read/ {
    n++; for (i = 1; i <= NF; i++) { if ($i == "qd") qd[n] = $(i + 1); if ($i == "write") w = rate($(i + 1), $(i + 2)); if ($i == "read") r = rate($(i + 1), $(i + 2)) }
    s[n] = 2 / (1 / w + 1 / r); if (s[n] > best) best = s[n] }
  /^aio: / { got = $0; sub(/.*queue_depth: /, "", got); sub(/\}.*/, "", got) }
  END { want = 0; for (k = 1; k <= n; k++) if (s[k] >= 0.95 * best && qd[k] + 0 > want) want = qd[k] + 0
        print (n == 4 && got + 0 == want) ? "ok" : "recommended qd " got ", expected " want }' "$D/bench.log")
if [ "$rule" = ok ]; then pass "the recommended queue depth is the deepest within 5 % of the best"
else fail "$rule" "$D/bench.log"; fi
expect "both directions at once are measured at the recommended point" 0 \
  "read and write at once \([0-9]+ MiB qd [28]\): read [0-9.]+ [GMk]?B/s, write [0-9.]+ [GMk]?B/s; both directions [0-9.]+ [GMk]?B/s" \
  "$D/bench.log" $rc
if [ -z "$(ls -A "$D/disk")" ]; then pass "io-bench removes its file"; else fail "io-bench left $(ls "$D/disk")" ""; fi
# Under the CPU backend's compute: its GEMM rate alone first, then during the measurements.
"$ZINF" io-bench --dir "$D/disk" --size "64 MiB" --block-sizes "1 MiB" --queue-depths 8 --compute-load > "$D/load.log" 2>&1; rc=$?
expect "--compute-load measures the GEMM rate alone" 0 "^compute load: the engine's GEMM \(128 x 3200 -> 12800\) on every BLAS thread, [0-9.]+ GFLOP/s alone" "$D/load.log" $rc
expect "--compute-load reports the GEMM rate during the measurements" 0 \
  "^compute load: [0-9.]+ GFLOP/s during the measurements \([0-9.]+x its rate alone\)" "$D/load.log" $rc
expect "--compute-load still measures and recommends" 0 "^aio: \{block_size: 1048576, queue_depth: 8\}" "$D/load.log" $rc
if [ -z "$(ls -A "$D/disk")" ]; then pass "io-bench under load removes its file"; else fail "io-bench left $(ls "$D/disk")" ""; fi
"$ZINF" io-bench --dir "$D/none" --size "64 MiB" > "$D/none.log" 2>&1; rc=$?
expect "a directory that does not exist is refused by name" 1 "$D/none" "$D/none.log" $rc
"$ZINF" io-bench --dir "$D/disk" --size "64 MiB" --block-sizes "1000 B" > "$D/block.log" 2>&1; rc=$?
expect "a block size that is not a multiple of 4096 is refused, naming the flag" 2 "block-sizes.*1000 B" "$D/block.log" $rc
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
