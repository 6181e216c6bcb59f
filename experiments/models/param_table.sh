#!/usr/bin/env bash
# Prints docs/results/models.md's table: each Hugging Face config.json under tests/data/hf, the
# parameters `zinf plan` counts for it (total and active per token) and the figure its model card
# or paper publishes. Usage: experiments/models/param_table.sh [path/to/zinf] > docs/results/models-table.md
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
zinf="${1:-$root/build/zinf}"
# model folder | published total | published active | where the figure is published
published=(
  "llama-2-7b|6,738,415,616|=|transformers' count of meta-llama/Llama-2-7b-hf (the paper's 7B)"
  "llama-33b|32.5B|=|LLaMA paper, Table 2: 32.5B (huggyllama/llama-30b's config)"
  "llama-3.1-8b|8,030,261,248|=|transformers' count of Meta-Llama-3.1-8B (8B)"
  "llama-3.1-70b|70,553,706,496|=|transformers' count of Meta-Llama-3.1-70B (70B)"
  "mistral-7b-v0.1|7,241,732,096|=|transformers' count (7.24B)"
  "mixtral-8x7b-v0.1|46,702,792,704|12,879,925,248|Mixtral paper: 46.7B total, 12.9B active"
  "qwen2.5-7b|7.61B|=|model card: 7.61B, 6.53B non-embedding"
  "qwen1.5-moe-a2.7b|14.3B|2.7B|model card: 14.3B total, 2.7B activated"
  "gemma-7b|8.54B|=|Gemma report: 8.54B"
  "gemma-2-9b|9,241,705,984|=|transformers' count (9.24B)"
  "phi-3-mini-4k|3.8B|=|Phi-3 report: 3.8B"
  "pythia-1.4b|1,414,647,808|=|Pythia paper, Table 1"
  "gpt-neox-20b|20,554,567,680|=|GPT-NeoX-20B paper"
  "falcon-7b|6,921,720,704|=|transformers' count (7B)"
  "falcon-40b|40B|=|model card: 40B"
  "opt-1.3b|1,315,758,080|=|transformers' count (OPT paper: 1.3B)"
  "opt-350m|350M|=|OPT paper: 350M"
  "bloom-560m|559,214,592|=|model card: 559M"
  "gpt2|124,439,808|=|transformers' count of gpt2 (124M)"
  "deepseek-v2-lite|15.7B|2.4B|DeepSeek-V2 paper: 15.7B total, 2.4B activated (without the token embedding)"
)
echo "| model | model_type | zinf total | zinf active per token | published total | published active | source |"
echo "|---|---|---:|---:|---:|---:|---|"
for row in "${published[@]}"; do
  IFS='|' read -r model total active source <<<"$row"
  json="$("$zinf" plan --model "$root/tests/data/hf/$model" --hw dgx-h100 --config zero3 --seq 2048 --json 2>/dev/null)"
  read -r arch t a < <(python3 -c 'import json,sys; m=json.load(sys.stdin)["model"]; print(m["architecture"], format(m["total_params"], ","), format(m["active_params"], ","))' <<<"$json")
  [[ "$active" == "=" ]] && active="$total"
  printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$model" "$arch" "$t" "$a" "$total" "$active" "$source"
done
