#!/usr/bin/env python3
"""A training step's lanes, from the Timeline CSV `zinf train --timeline X.csv` writes (rank 0).

  lanes.py phases TIMELINE.csv...    forward, backward and tail: length, compute busy, NVMe bytes, disk busy and idle
  lanes.py gaps TIMELINE.csv...      the compute lane's idle time, and its long gaps by what ended them
  lanes.py chain TIMELINE.csv [--min-gap S] [--after S] [--max N]
                                     for compute gaps that end with a parameter's all-gather: that
                                     parameter's read, copy and gather, and what the read lane ran before
  lanes.py bins TIMELINE.csv [--bin S]
                                     per time bin: NVMe tasks in flight, GB/s per lane, compute busy fraction
  lanes.py cores TIMELINE.csv...     each NVMe lane's rate while it alone is busy, by what the cores were doing

Phases: forward runs to the first backward compute task, backward to the last one, the tail is the rest.
A task's bytes are spread evenly over its span. The disk is both NVMe lanes together: they share it.
`cores` cuts the step into 1 ms slots and counts only slots where one NVMe lane alone is busy (reads and
writes do not share the disk in them); a slot's cores are 'compute' when the compute lane runs, 'other
CPU' when CPU Adam, host copies or one-rank gathers run (the CPU backend does those on the same cores).
"""
import argparse
import csv
import statistics
import sys

NVME = ("nvme_read", "nvme_write")
OTHER_CPU = ("cpu_optim", "h2d", "d2h", "comm")


def load(path):
    """Rank 0's tasks with start and end as seconds from the step's first task (keys s, e, b)."""
    with open(path) as f:
        rows = [r for r in csv.DictReader(f) if r["rank"] == "0"]
    if not rows:
        raise SystemExit(f"{path}: no tasks of rank 0 in the timeline")
    t0 = min(float(r["start"]) for r in rows)
    for r in rows:
        r["s"], r["e"], r["b"] = float(r["start"]) - t0, float(r["end"]) - t0, float(r["bytes"])
    return rows


def union(spans):
    """Seconds covered by the union of (start, end) intervals."""
    total, lo, hi = 0.0, None, None
    for a, b in sorted(spans):
        if hi is None or a > hi:
            total += (hi - lo) if hi is not None else 0.0
            lo, hi = a, b
        else:
            hi = max(hi, b)
    return total + ((hi - lo) if hi is not None else 0.0)


def between(rows, lanes, lo, hi):
    """Bytes (pro rata) and busy seconds of the lanes `lanes` between lo and hi."""
    spans, moved = [], 0.0
    for r in rows:
        if r["lane"] in lanes and r["e"] > lo and r["s"] < hi:
            x, y = max(r["s"], lo), min(r["e"], hi)
            spans.append((x, y))
            moved += r["b"] * (y - x) / max(1e-9, r["e"] - r["s"])
    return moved, union(spans)


def phases(rows):
    """[(name, start, end)] of forward, backward and tail."""
    step = max(r["e"] for r in rows)
    back = [r for r in rows if r["lane"] == "compute" and r["kind"] == "backward"]
    b0 = min((r["s"] for r in back), default=step)
    b1 = max((r["e"] for r in back), default=step)
    return [("forward", 0.0, b0), ("backward", b0, b1), ("tail", b1, step)]


def phase_table(rows):
    """Per phase: length, compute busy, bytes read, bytes written, disk busy, disk idle (seconds, bytes)."""
    out = []
    for name, lo, hi in phases(rows):
        read, _ = between(rows, ("nvme_read",), lo, hi)
        written, _ = between(rows, ("nvme_write",), lo, hi)
        disk = between(rows, NVME, lo, hi)[1]
        out.append({"phase": name, "length": hi - lo, "compute": between(rows, ("compute",), lo, hi)[1],
                    "read": read, "written": written, "disk_busy": disk, "disk_idle": (hi - lo) - disk})
    return out


def gap_cause(ended):
    """What a compute gap waited for, from the labels of the tasks that ended as it ended."""
    labels = " ".join(ended)
    if "allgather" in labels and "param" in labels:
        return "param"
    if "nvme_write" in labels and "grad" in labels:
        return "grad write"
    return "other"


def compute_gaps(rows, small=0.005, large=0.05):
    """The compute lane's idle seconds in gaps over `small`, and gaps over `large` by cause."""
    compute = sorted((r["s"], r["e"]) for r in rows if r["lane"] == "compute")
    ends = {}
    for r in rows:
        if r["lane"] != "compute":
            ends.setdefault(round(r["e"], 2), []).append(f"{r['kind']} {r['label']}")
    busy_until, idle = 0.0, 0.0
    causes = {"param": 0.0, "grad write": 0.0, "other": 0.0}
    for start, end in compute:
        gap = start - busy_until
        if gap > small:
            idle += gap
            if gap > large:
                near = sum((ends.get(round(start + d, 2), []) for d in (-0.01, 0.0, 0.01)), [])
                causes[gap_cause(near)] += gap
        busy_until = max(busy_until, end)
    return idle, causes


def parameter_chains(rows, min_gap=0.2, after=0.0):
    """For each compute gap over min_gap (ending after `after`) that ends as a parameter's all-gather
    ends: (gap start, gap end, next task's label, the parameter's read/copy/gather tasks, the read
    lane's tasks in the second before that parameter's read)."""
    compute = sorted((r for r in rows if r["lane"] == "compute"), key=lambda r: r["s"])
    found = []
    for before, nxt in zip(compute, compute[1:]):
        if nxt["s"] - before["e"] < min_gap or nxt["s"] < after:
            continue
        gathers = [r for r in rows if r["kind"] == "allgather" and abs(r["e"] - nxt["s"]) < 0.01]
        if not gathers:
            continue
        unit = gathers[0]["label"].split(" ")[1] if " " in gathers[0]["label"] else gathers[0]["label"]
        chain = sorted((r for r in rows if unit in r["label"] and r["kind"] in ("nvme_read", "copy_h2d", "allgather")
                        and r["s"] > before["s"] - 10 and r["e"] <= nxt["s"] + 0.01), key=lambda r: r["s"])
        reads = [c for c in chain if c["lane"] == "nvme_read"]
        prior = []
        if reads:
            s = reads[-1]["s"]
            prior = [r for r in rows if r["lane"] == "nvme_read" and r["s"] < s and r["e"] > s - 1.0]
        found.append((before["e"], nxt["s"], nxt["label"], chain, prior))
    return found


def bins(rows, width=0.5):
    """Per bin of `width` seconds: read and write tasks in flight, GB/s read and written, compute busy fraction."""
    step = max(r["e"] for r in rows)
    n = int(step / width) + 1
    acc = [[0.0] * 5 for _ in range(n)]  # read task-seconds, write task-seconds, read bytes, written bytes, compute
    column = {"nvme_read": (0, 2), "nvme_write": (1, 3), "compute": (4, None)}
    for r in rows:
        if r["lane"] not in column or r["e"] <= r["s"]:
            continue
        busy, moved = column[r["lane"]]
        for k in range(int(r["s"] / width), min(n, int(r["e"] / width) + 1)):
            lo, hi = max(r["s"], k * width), min(r["e"], (k + 1) * width)
            if hi > lo:
                acc[k][busy] += hi - lo
                if moved is not None:
                    acc[k][moved] += r["b"] * (hi - lo) / (r["e"] - r["s"])
    return [{"t": k * width, "read_tasks": a[0] / width, "write_tasks": a[1] / width, "read_gbps": a[2] / width / 1e9,
             "write_gbps": a[3] / width / 1e9, "compute": a[4] / width} for k, a in enumerate(acc)]


def core_cases(rows, slot=0.001):
    """{(cores case, lane): (seconds, bytes, median tasks in flight)} over slots where the lane alone is busy."""
    n = int(max(r["e"] for r in rows) / slot) + 1
    busy = {}
    moved = {lane: [0.0] * n for lane in NVME}
    tasks = {lane: [0] * n for lane in NVME}
    for r in rows:
        i = int(r["s"] / slot)
        j = min(n, max(int(r["e"] / slot), i + 1))
        mask = busy.setdefault(r["lane"], [False] * n)
        for k in range(i, j):
            mask[k] = True
            if r["lane"] in moved:
                moved[r["lane"]][k] += r["b"] / (j - i)
                tasks[r["lane"]][k] += 1
    none = [False] * n
    compute = busy.get("compute", none)
    other = [any(busy.get(lane, none)[k] for lane in OTHER_CPU) for k in range(n)]
    cases = {"cores free": lambda k: not compute[k] and not other[k],
             "compute only": lambda k: compute[k] and not other[k],
             "other CPU only": lambda k: other[k] and not compute[k],
             "compute + other": lambda k: compute[k] and other[k]}
    read, write = busy.get("nvme_read", none), busy.get("nvme_write", none)
    alone = {"nvme_read": lambda k: read[k] and not write[k], "nvme_write": lambda k: write[k] and not read[k]}
    out = {}
    for case, cpu in cases.items():
        for lane, only in alone.items():
            ks = [k for k in range(n) if only(k) and cpu(k)]
            if ks:
                out[(case, lane)] = (len(ks) * slot, sum(moved[lane][k] for k in ks),
                                     statistics.median(tasks[lane][k] for k in ks))
    return out


def print_phases(path, rows):
    print(f"{path}: step {max(r['e'] for r in rows):.2f} s")
    for p in phase_table(rows):
        print(f"  {p['phase']:9s} {p['length']:6.2f} s  compute {p['compute']:6.2f} s  read {p['read'] / 1e9:5.1f} GB"
              f"  written {p['written'] / 1e9:5.1f} GB  disk busy {p['disk_busy']:5.2f} s, idle {p['disk_idle']:5.2f} s")


def print_gaps(path, rows):
    idle, causes = compute_gaps(rows)
    print(f"{path}: step {max(r['e'] for r in rows):.1f} s, compute idle {idle:.2f} s in gaps over 5 ms; over 50 ms: "
          + ", ".join(f"{k} {v:.2f} s" for k, v in causes.items()))


def print_chains(rows, a):
    for lo, hi, label, chain, prior in parameter_chains(rows, a.min_gap, a.after)[:a.max]:
        print(f"gap {lo:.2f}-{hi:.2f} s ({hi - lo:.2f} s) before {label}")
        for c in chain:
            print(f"    {c['lane']:10s} {c['s']:.2f}-{c['e']:.2f} {c['label']}")
        if prior:
            print(f"    the read lane in the second before: {len(prior)} tasks, "
                  f"{sum(r['b'] for r in prior) / 1e9:.2f} GB")


def print_cores(path, rows):
    print(f"{path}: step {max(r['e'] for r in rows):.1f} s")
    for (case, lane), (t, moved, k) in core_cases(rows).items():
        if t >= 0.05:
            print(f"  {case:16s} {lane:10s} alone {t:5.2f} s {moved / 1e9:5.1f} GB {moved / 1e9 / t:5.2f} GB/s;"
                  f" tasks in flight median {k:.0f}")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    for name in ("phases", "gaps", "cores"):
        sub.add_parser(name).add_argument("timelines", nargs="+")
    c = sub.add_parser("chain")
    c.add_argument("timeline")
    c.add_argument("--min-gap", type=float, default=0.2)
    c.add_argument("--after", type=float, default=0.0, help="only gaps that end after this time in the step")
    c.add_argument("--max", type=int, default=9)
    b = sub.add_parser("bins")
    b.add_argument("timeline")
    b.add_argument("--bin", type=float, default=0.5)
    a = ap.parse_args(argv)
    if a.what == "chain":
        print_chains(load(a.timeline), a)
    elif a.what == "bins":
        print("   t s  read tasks  write tasks  read GB/s  write GB/s  compute")
        for x in bins(load(a.timeline), a.bin):
            print(f"{x['t']:6.1f}  {x['read_tasks']:10.1f}  {x['write_tasks']:11.1f}  {x['read_gbps']:9.2f}"
                  f"  {x['write_gbps']:10.2f}  {x['compute']:7.0%}")
    else:
        show = {"phases": print_phases, "gaps": print_gaps, "cores": print_cores}[a.what]
        for path in a.timelines:
            show(path, load(path))


if __name__ == "__main__":
    main(sys.argv[1:])
