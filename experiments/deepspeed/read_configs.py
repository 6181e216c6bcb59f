#!/usr/bin/python3
"""How zinf reads a collection of real DeepSpeed configs: one line per file, and the counts by outcome.

    /usr/bin/python3 experiments/deepspeed/read_configs.py [--zinf build/zinf] [--model gpt2-small]
        [--hw dgx-a100] [--nodes 1] [--markdown] PATH...

Each PATH is a JSON file or a folder searched for *.json files that look like DeepSpeed configs (a
`zero_optimization`, `train_batch_size` or `train_micro_batch_size_per_gpu` key in their text).
Every file goes through `zinf plan --json` for the model and cluster given (the world size decides
the batch triple, as it does for DeepSpeed) and is reported as one of:

  read      the stage, batch triple, precision, optimizer and tiers zinf planned, and the fit
  refused   the key zinf names and the first words of its reason (DeepSpeed refuses the file too,
            or the config is a template, or it is DeepSpeed-autotuner input for `zinf tune`)
  crashed   anything else: a signal, an exit status zinf does not use for bad input, or no JSON

A crash is a bug; a refusal says which check of DeepSpeed's the file fails. --markdown prints the
summary as a table.
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOOKS_LIKE = re.compile(r'"(zero_optimization|train_batch_size|train_micro_batch_size_per_gpu)"')


def config_files(paths):
    for p in paths:
        if os.path.isdir(p):
            for folder, _, names in sorted(os.walk(p)):
                for n in sorted(names):
                    f = os.path.join(folder, n)
                    if n.endswith(".json") and LOOKS_LIKE.search(open(f, errors="replace").read(200000)):
                        yield f
        else:
            yield p


def read_one(zinf, path, model, hw, nodes):
    """(outcome, detail) for one file."""
    cmd = [zinf, "plan", "--model", model, "--hw", hw, "--nodes", str(nodes), "--config", path, "--json"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return "crashed", "no answer in 120 s"
    if r.returncode == 0:
        try:
            j = json.loads(r.stdout)
        except json.JSONDecodeError:
            return "crashed", "exit 0 without a JSON report"
        c = j["config"]
        return "read", (f"stage {c['zero_stage']}, micro {c['micro_batch']} x accumulation {c['gradient_accumulation']} x "
                        f"dp {c['data_parallel_ranks']}, {c['precision']}, {c['optimizer_type']}, params {c['params']}, "
                        f"optimizer {c['optimizer']}, checkpoints {'every block' if c['checkpoint_interval'] else 'none'}; "
                        f"fits: {'yes' if j['fits'] else 'no'}")
    m = re.search(r"config error: .*?: key '([^']*)': (.*)", r.stderr)
    if r.returncode in (1, 2) and m:
        return "refused", f"{m.group(1)}: {m.group(2)}"
    if r.returncode in (1, 2, 3) and "error" in r.stderr:
        return "refused", r.stderr.strip().splitlines()[-1]
    return "crashed", f"exit {r.returncode}: {r.stderr.strip()[-300:]}"


def reason_kind(detail):
    """The refusal's kind: the key and the first words of the reason, without file-specific values."""
    key, _, why = detail.partition(": ")
    why = re.sub(r"DeepSpeed [0-9.]+ refuses this file: ", "", why)
    why = re.sub(r"'[^']*'", "'…'", why)
    why = re.sub(r"[0-9]+", "N", why)
    return f"{key}: {' '.join(why.split()[:9])}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--zinf", default=os.path.join(ROOT, "build", "zinf"))
    ap.add_argument("--model", default="gpt2-small")
    ap.add_argument("--hw", default="dgx-a100")
    ap.add_argument("--nodes", type=int, default=1)
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args(argv)
    counts = collections.Counter()
    kinds = collections.Counter()
    for f in config_files(a.paths):
        outcome, detail = read_one(os.path.abspath(a.zinf), os.path.abspath(f), a.model, a.hw, a.nodes)
        counts[outcome] += 1
        if outcome != "read":
            kinds[(outcome, reason_kind(detail) if outcome == "refused" else detail)] += 1
        print(f"{outcome:8s} {os.path.relpath(f)}: {detail}")
    total = sum(counts.values())
    print(f"\n{total} configs on {a.model}, {a.hw} x {a.nodes}: {counts['read']} read, {counts['refused']} refused, "
          f"{counts['crashed']} crashed")
    if a.markdown:
        print("\n| outcome | what | files |\n|---|---|---|")
        print(f"| read | planned | {counts['read']} |")
        for (outcome, what), n in kinds.most_common():
            print(f"| {outcome} | {what.replace('|', '/')} | {n} |")
    else:
        for (outcome, what), n in kinds.most_common():
            print(f"  {n:4d}  {outcome}: {what}")
    return 1 if counts["crashed"] else 0


if __name__ == "__main__":
    sys.exit(main())
