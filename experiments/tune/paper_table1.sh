#!/usr/bin/env bash
# The tuner against the paper's configurations, at the scale of ZeRO-Infinity's Table 1: for each
# workload on 512 V100s (32 DGX-2 nodes), the configuration experiments/paper/ simulates for it (the
# paper's placement; micro-batch as there) and the one `zinf tune` picks for the same global batch,
# both simulated by `zinf sim` on hwprofiles/dgx2-v100.yaml.
#
#   bash experiments/tune/paper_table1.sh          # ZINF_BUILD=build, OUT=analysis/tune, TIME_LIMIT=120
#
# Prints a table and writes OUT/table1.md; each tuner run's JSON and picked YAML stay in OUT/table1/.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${ZINF_BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
ZINF="$BUILD/zinf"
OUT=${OUT:-$ROOT/analysis/tune}
TIME_LIMIT=${TIME_LIMIT:-120}
[ -x "$ZINF" ] || { echo "no $ZINF: build first" >&2; exit 1; }
mkdir -p "$OUT/table1"
cd "$ROOT"
P=experiments/paper/configs
# model     paper config (as experiments/paper runs it)   global batch (512 GPUs x its micro-batch)
ROWS="
gpt-500b  $P/infinity-512.yaml       4096
gpt-1t    $P/infinity-512.yaml       4096
gpt-10t   $P/infinity-512-nvme.yaml  512
gpt-20t   $P/infinity-512-nvme.yaml  512
"
echo "$ROWS" | while read -r model config batch; do
  [ -n "$model" ] || continue
  d="$OUT/table1/$model"
  mkdir -p "$d"
  echo "== $model" >&2
  if ! "$ZINF" sim --model "$model" --hw dgx2-v100 --nodes 32 --config "$config" --json > "$d/paper.json" 2> "$d/paper.err"; then
    echo "{\"error\": $(/usr/bin/python3 -c 'import json,sys; print(json.dumps(open(sys.argv[1]).read().strip()))' "$d/paper.err")}" > "$d/paper.json"
  fi
  # Tuned from the paper's config as the base (its optimizer and aio settings), same global batch.
  if ! "$ZINF" tune --model "$model" --hw dgx2-v100 --nodes 32 --config "$config" --global-batch "$batch" \
       --time-limit "$TIME_LIMIT" --yaml "$d/tuned.yaml" --deepspeed "$d/tuned.deepspeed.json" --json \
       > "$d/tune.json" 2> "$d/tune.err"; then
    echo "{\"error\": $(/usr/bin/python3 -c 'import json,sys; print(json.dumps(open(sys.argv[1]).read().strip()))' "$d/tune.err")}" > "$d/tune.json"
  fi
  for f in "$d/paper.err" "$d/tune.err"; do [ -s "$f" ] || rm -f "$f"; done
done
/usr/bin/python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
rows = []
head = ("| model | paper's config | its TFLOP/s per GPU | samples/s | tuner's pick | its TFLOP/s per GPU | samples/s "
        "| pick vs paper | busiest lane (pick) | tuning time |")
rows.append(head)
rows.append("|" + "---|" * (head.count("|") - 1))
for model in ("gpt-500b", "gpt-1t", "gpt-10t", "gpt-20t"):
    d = os.path.join(out, "table1", model)
    p = json.load(open(os.path.join(d, "paper.json")))
    t = json.load(open(os.path.join(d, "tune.json")))
    if "error" in p:
        paper = ("refused: " + p["error"].splitlines()[-1][:80], "-", "-")
        paper_sps = None
    else:
        paper = (f"{p['config'].split('/')[-1]}", f"{p['tflops_per_gpu']:.1f}", f"{p['samples_per_s']:.4g}")
        paper_sps = p["samples_per_s"]
    if "error" in t or not t.get("finalists"):
        rows.append(f"| {model} | {' | '.join(paper)} | refused: {t.get('error', '?').splitlines()[-1][:80]} | - | - | - | - | - |")
        continue
    f = t["finalists"][0]
    c = f["config"]
    ck = f"ckpt {c['checkpoints']}/{c['checkpoint_interval']}" if c["checkpoint_interval"] else "ckpt off"
    pick = (f"tp {c.get('tensor_parallel', 1)}, params {c['params']}, optimizer {c['optimizer']}, {ck}, tiling {c['tiling_factor']}, "
            f"mb {c['micro_batch']} x ga {c['gradient_accumulation']}, prefetch {'/'.join(map(str, c['prefetch']))}, "
            f"{c['optimizer_timing']}")
    busy = f["simulated"].get("busy", {})
    lane = max(busy, key=busy.get) if busy else "?"
    ratio = f"{f['samples_per_s'] / paper_sps:.2f}x" if paper_sps else "paper refused"
    rows.append(f"| {model} | {' | '.join(paper)} | {pick} | {f['simulated']['tflops_per_gpu']:.1f} | "
                f"{f['samples_per_s']:.4g} | {ratio} | {lane} {100 * busy.get(lane, 0):.0f}% | {t['seconds']['total']:.0f} s |")
text = "\n".join(rows) + "\n"
print(text)
open(os.path.join(out, "table1.md"), "w").write(text)
PY
