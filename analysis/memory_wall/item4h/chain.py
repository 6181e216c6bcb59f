#!/usr/bin/env python3
"""Why the compute lane waited for a parameter, from `zinf train`'s Timeline CSV (rank 0).

    chain.py TIMELINE.csv [--min-gap SECONDS] [--after SECONDS] [--max N]

For each compute gap over --min-gap that ends when a parameter's all-gather ends: that parameter's
NVMe read, host-to-device copy and all-gather, and what the NVMe read lane ran in the second before
the read started.
"""
import argparse
import csv


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("timeline")
    ap.add_argument("--min-gap", type=float, default=0.2)
    ap.add_argument("--after", type=float, default=0.0, help="only gaps that end after this time in the step")
    ap.add_argument("--max", type=int, default=9)
    a = ap.parse_args()
    with open(a.timeline) as f:
        rows = [r for r in csv.DictReader(f) if r["rank"] == "0"]
    t0 = min(float(r["start"]) for r in rows)
    for r in rows:
        r["s"], r["e"] = float(r["start"]) - t0, float(r["end"]) - t0
    compute = sorted((r for r in rows if r["lane"] == "compute"), key=lambda r: r["s"])
    shown = 0
    for before, after in zip(compute, compute[1:]):
        gap = after["s"] - before["e"]
        if gap < a.min_gap or after["s"] < a.after:
            continue
        gathers = [r for r in rows if r["kind"] == "allgather" and abs(r["e"] - after["s"]) < 0.01]
        if not gathers:
            continue
        unit = gathers[0]["label"].split(" ", 2)[1]
        chain = sorted((r for r in rows if unit in r["label"] and r["kind"] in ("nvme_read", "copy_h2d", "allgather")
                        and r["s"] > before["s"] - 10 and r["e"] <= after["s"] + 0.01), key=lambda r: r["s"])
        print(f"gap {before['e']:.2f}-{after['s']:.2f} s ({gap:.2f} s) before {after['label']}")
        for c in chain:
            print(f"    {c['lane']:10s} {c['s']:.2f}-{c['e']:.2f} {c['label']}")
        reads = [c for c in chain if c["lane"] == "nvme_read"]
        if reads:
            s = reads[-1]["s"]
            prev = [r for r in rows if r["lane"] == "nvme_read" and r["s"] < s and r["e"] > s - 1.0]
            kinds = sorted({r["label"].split(" ")[2] for r in prev if len(r["label"].split(" ")) > 2})
            print(f"    the read lane in the second before: {len(prev)} tasks, "
                  f"{sum(float(r['bytes']) for r in prev) / 1e9:.2f} GB ({', '.join(kinds)})")
        shown += 1
        if shown >= a.max:
            break


if __name__ == "__main__":
    main()
