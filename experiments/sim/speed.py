#!/usr/bin/python3
"""How fast `zinf sim` simulates one step, folded and with every rank simulated.

    /usr/bin/python3 experiments/sim/speed.py [--zinf build/zinf] [--reference OTHER_ZINF] [--repeat 3]
                                              [--cases fold-512,all-512,all-4096]

Runs each case --repeat times (alternating with the reference binary when one is given, so that both
see the same load) and prints, per binary and case, the medians of the wall time and of the CPU time
(user + system, which a loaded machine inflates less than the wall time), the tasks and SimGrid
activities simulated, and the peak resident memory. The workload is the published 512-GPU 1T point
(experiments/published/points.yaml, fig5a-1t: tensor parallel 4, its release and offload as configured there),
on dgx2-v100 with GPU variability at its expected slowest (no seed), at 32 and 256 nodes.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "experiments", "published"))
import run as published  # noqa: E402

CASES = {"fold-512": (32, False), "all-512": (32, True), "all-4096": (256, True)}


def one_run(zinf, paths, nodes, no_fold):
    cmd = [zinf, "sim", "--model", paths["model"], "--config", paths["config"], "--hw", paths["hw"],
           "--nodes", str(nodes), "--json"] + (["--no-fold"] if no_fold else [])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {out.stderr.strip()[:400]}")
    report = json.loads(out.stdout)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall": wall, "cpu": cpu, "tasks": report["tasks_run"], "activities": report["activities"],
            "step": report["step_time"], "rss_mib": after.ru_maxrss / 1024.0}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--zinf", default=os.path.join(ROOT, "build", "zinf"))
    ap.add_argument("--reference", help="another zinf binary, measured alternately in the same run")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cases", default="fold-512,all-512")
    a = ap.parse_args(argv)
    with open(os.path.join(ROOT, "experiments", "published", "points.yaml")) as f:
        point = next(p for p in published.expand(yaml.safe_load(f)) if p["id"] == "fig5a-1t")
    binaries = [("this", a.zinf)] + ([("reference", a.reference)] if a.reference else [])
    with tempfile.TemporaryDirectory(prefix="zinf-speed-") as tmp:
        paths = published.write_inputs(point, tmp)
        for case in a.cases.split(","):
            nodes, no_fold = CASES[case]
            runs = {name: [] for name, _ in binaries}
            for _ in range(a.repeat):
                for name, zinf in binaries:
                    runs[name].append(one_run(zinf, paths, nodes, no_fold))
            for name, _ in binaries:
                r = runs[name]
                med = {k: statistics.median(x[k] for x in r) for k in ("wall", "cpu", "rss_mib")}
                print(f"{case:9} {name:9} wall {med['wall']:7.1f} s  cpu {med['cpu']:7.1f} s  "
                      f"(runs: {', '.join('%.1f' % x['cpu'] for x in r)})  tasks {r[0]['tasks']}  "
                      f"activities {r[0]['activities']}  peak {med['rss_mib']:.0f} MiB  step {r[0]['step']:.3f} s",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
