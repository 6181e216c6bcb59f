#!/usr/bin/python3
"""The largest model per strategy on one DGX-2 (ZeRO-Infinity Fig 6(a), Table 4's models) against zinf's memory model.

    /usr/bin/python3 experiments/published/capacity.py [--zinf build/zinf] [--out analysis/published]

For each strategy of capacity.yaml, plans every Table 4 model with `zinf plan --json` on the DGX-2
profile and says whether it fits, or which tier is short and by how much per GPU. The paper's largest
model for a strategy must fit, and the next larger model of the table must not: each disagreement is
named. Writes OUT/capacity.md (the table docs/results/published.md shows) and OUT/capacity.csv.
Nothing is fitted: the profile's reserves are what its comments source.
"""
import argparse
import csv
import json
import math
import os
import subprocess
import sys
import tempfile

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as published  # noqa: E402  (the points' input files, written the same way)

ROOT = published.ROOT


def plan(zinf, spec, model, strategy, folder, hw_path=None):
    """zinf plan's verdict on one model under one strategy: whether it fits, the short tier and by how much
    per GPU, and each tier's peak and budget (per GPU for the device, per node for the host)."""
    tp = model.get("tensor_parallel", 1)
    point = {"id": f"{strategy['name']} {model['name']}", "model": model, "seq": spec["seq"], "vocab": spec["vocab"],
             "batch": model.get("batch", 1) / tp, "tensor_parallel": tp, "config": strategy["config"], "hw": spec["hw"]}
    paths = published.write_inputs(point, folder)
    if hw_path:
        paths["hw"] = hw_path
    cmd = [zinf, "plan", "--model", paths["model"], "--hw", paths["hw"], "--config", paths["config"],
           "--nodes", str(spec["nodes"]), "--json"]
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    text = run.stdout.strip()
    if run.returncode != 0 or not text.startswith("{"):
        raise RuntimeError(f"{point['id']}: zinf plan failed (exit {run.returncode}): {(run.stderr or text).strip()[:400]}")
    report = json.loads(text)
    fit = report["fit"]
    memory = report["memory"]
    out = {"fits": bool(report["fits"]), "tier": "", "short_gb": 0.0,
           "peak_gb": {t: memory[t]["peak"] / 1e9 for t in ("device", "host")},
           "budget_gb": {t: memory[t]["budget"] / 1e9 for t in ("device", "host")}}
    if not out["fits"]:
        out["tier"] = fit.get("tier", "")
        out["short_gb"] = fit["shortfall_per_rank"] / 1e9
    return out


def reserve_to_agree(zinf, spec, model, strategy, tier, admit, folder):
    """The reserve of `tier` at which a model would change sides: the largest that admits it (`admit`: the
    paper ran it) or the smallest that refuses it, found by planning it again on copies of the profile (a
    refusal on the states alone schedules no step, so its shortfall is only a lower bound). An explanation
    to look for, never a fit: the profile keeps its own. None when no reserve in [0, 0.95] does."""
    key = {"device": "gpu", "host": "host"}[tier]
    with open(os.path.join(ROOT, "hwprofiles", f"{spec['hw']}.yaml")) as f:
        profile = yaml.safe_load(f)

    def fits_at(reserve):
        profile.setdefault("reserve", {})[key] = round(reserve, 6)
        sub = tempfile.mkdtemp(dir=folder)
        hw = os.path.join(sub, "hw.yaml")
        with open(hw, "w") as f:
            yaml.safe_dump(profile, f)
        return plan(zinf, spec, model, strategy, sub, hw_path=hw)["fits"]

    lo, hi = 0.0, 0.95  # admit: it fits at lo and not at hi; refuse: the other way round
    if fits_at(lo) != admit or fits_at(hi) == admit:
        return None
    for _ in range(12):
        mid = 0.5 * (lo + hi)
        if fits_at(mid) == admit:
            lo = mid
        else:
            hi = mid
    return lo if admit else hi


def cell(v):
    return "fits" if v["fits"] else f"{v['tier']} short {v['short_gb']:.1f} GB per GPU"


def verdicts(spec, results, bound=None):
    """Per strategy: does the paper's largest fit, and is the next larger model refused? `bound(strategy, model,
    tier, admit)` is the reserve at which a disagreement would turn (reserve_to_agree), or None."""
    # The sizes in order; a model planned only as printed beside its stated count is not a size of its own.
    names = [m["name"] for m in spec["models"] if "printed_shape_of" not in m]
    rows = []
    for s in spec["strategies"]:
        i = names.index(s["largest"])
        ran = results[(s["name"], s["largest"])]
        nxt = names[i + 1] if i + 1 < len(names) else None
        refused_next = None if nxt is None else not results[(s["name"], nxt)]["fits"]
        row = {"strategy": s["name"], "largest": s["largest"], "ran_fits": ran["fits"], "next": nxt or "",
               "next_refused": refused_next, "agrees": ran["fits"] and refused_next is not False, "to_agree": ""}
        if bound and not ran["fits"] and ran["tier"] in ("device", "host"):
            r = bound(s, s["largest"], ran["tier"], True)
            row["to_agree"] = (f"{ran['tier']} reserve at most {math.floor(1000 * r) / 10:.1f} %" if r is not None
                               else f"no {ran['tier']} reserve would do")
        elif bound and refused_next is False:
            parts = [f"{tier} reserve at least {math.ceil(1000 * r) / 10:.1f} %"
                     for tier in ("device", "host") if (r := bound(s, nxt, tier, False)) is not None]
            row["to_agree"] = " or ".join(parts) or "no reserve would do"
        rows.append(row)
    return rows


def table(spec, results, rows):
    names = [m["name"] for m in spec["models"]]
    lines = ["| strategy | paper's largest | " + " | ".join(names) + " | agrees | would agree with |",
             "|---|---|" + "---|" * len(names) + "---|---|"]
    for s, r in zip(spec["strategies"], rows):
        cells = []
        for n in names:
            c = cell(results[(s["name"], n)])
            cells.append(f"**{c}**" if n == s["largest"] or n == r["next"] else c)
        why = "yes" if r["agrees"] else ("no: refuses what the paper ran" if not r["ran_fits"] else "no: admits the next model")
        lines.append(f"| {s['name']} | {s['largest']} | " + " | ".join(cells) + f" | {why} | {r['to_agree']} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--zinf", default=os.path.join(ROOT, "build", "zinf"))
    ap.add_argument("--spec", default=os.path.join(ROOT, "experiments", "published", "capacity.yaml"))
    ap.add_argument("--out", default=os.path.join(ROOT, "analysis", "published"))
    a = ap.parse_args(argv)
    with open(a.spec) as f:
        spec = yaml.safe_load(f)
    results = {}
    with tempfile.TemporaryDirectory(prefix="zinf-capacity-") as tmp:
        for s in spec["strategies"]:
            for m in spec["models"]:
                folder = os.path.join(tmp, f"{len(results)}")
                os.makedirs(folder)
                results[(s["name"], m["name"])] = plan(a.zinf, spec, m, s, folder)
            print(f"  {s['name']}: planned {len(spec['models'])} models", file=sys.stderr)
    models = {m["name"]: m for m in spec["models"]}
    with tempfile.TemporaryDirectory(prefix="zinf-capacity-reserve-") as tmp:
        def bound(strategy, model, tier, admit):
            return reserve_to_agree(a.zinf, spec, models[model], strategy, tier, admit, tmp)
        rows = verdicts(spec, results, bound)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "capacity.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["strategy", "model", "fits", "short_tier", "short_gb_per_gpu", "device_peak_gb", "device_budget_gb"])
        for (s, m), v in results.items():
            w.writerow([s, m, v["fits"], v["tier"], round(v["short_gb"], 2), round(v["peak_gb"]["device"], 2),
                        round(v["budget_gb"]["device"], 2)])
    agree = sum(r["agrees"] for r in rows)
    text = (f"Largest model per strategy on one DGX-2 (ZeRO-Infinity Fig 6(a), Table 4's models) against zinf's memory "
            f"model on {spec['hw']}: in bold, the paper's largest model (it ran) and the next larger one (beyond the "
            f"strategy's limit). Assumed: {spec['assumed']}. Not checked: {'; '.join(spec.get('not_checked', []))}.\n\n"
            + table(spec, results, rows) + f"\n\n{agree} of {len(rows)} strategies agree with the paper.\n")
    with open(os.path.join(a.out, "capacity.md"), "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
