#!/usr/bin/env python3
"""The memory-wall run's last step, from its Timeline: NVMe bytes over the lanes' busy time against
one or more disk references, and the step against its bound.

  report.py TIMELINE.csv [--ref NAME READ_B/S WRITE_B/S ...] [--thread-cpu THREADS.csv]

A reference is a pair of rates on this disk: `zinf io-bench`'s best on its own file, or fio reading
and then rewriting the run's own store files right after the run (the bytes, file sizes and
recency the step moved). For each it prints each lane's rate while busy over the reference's, the
disk's efficiency (the time the reference's rates need for the step's traffic over the time either
lane was busy) and the step over max(compute lane busy, that time). With --compute-alone SECONDS (the
same step with every state resident, compute_alone.py) it also gives the step over max(compute
alone, that time): the bound with the step's own CPU work (Adam, gathers, copies) in it.
"""
import argparse
import csv
import os


def union_busy(spans):
    """Seconds covered by the union of (start, end) intervals."""
    busy, lo, hi = 0.0, None, None
    for a, b in sorted(spans):
        if hi is None or a > hi:
            busy += (hi - lo) if hi is not None else 0.0
            lo, hi = a, b
        else:
            hi = max(hi, b)
    return busy + ((hi - lo) if hi is not None else 0.0)


class Step:
    def __init__(self, rows):
        # The disk as a whole: both NVMe lanes share it.
        self.rows = rows + [dict(r, lane="nvme") for r in rows if r["lane"] in ("nvme_read", "nvme_write")]
        self.t0 = min(float(r["start"]) for r in rows)
        self.seconds = max(float(r["end"]) for r in rows) - self.t0
        self.last_bwd = max((float(r["end"]) for r in rows if r["kind"] == "backward"), default=self.t0)

    def lane(self, name):
        """Bytes and busy seconds (the union of the lane's task intervals: NVMe tasks overlap)."""
        rows = [r for r in self.rows if r["lane"] == name]
        return sum(float(r["bytes"]) for r in rows), union_busy([(float(r["start"]), float(r["end"])) for r in rows])

    def between(self, name, lo, hi):
        """Bytes (pro rata) and busy seconds of a lane between times lo and hi."""
        spans = []
        for r in self.rows:
            a, b = float(r["start"]), float(r["end"])
            if r["lane"] == name and b > lo and a < hi:
                x, y = max(a, lo), min(b, hi)
                spans.append((x, y, float(r["bytes"]) * (y - x) / max(1e-9, b - a)))
        return sum(x for _, _, x in spans), union_busy([(a, b) for a, b, _ in spans])

    def after(self, name, t):
        """Bytes (pro rata) and busy seconds of a lane after time t."""
        return self.between(name, t, float("inf"))


def report_lanes(step, refs):
    for name in ("nvme_read", "nvme_write"):
        b, busy = step.lane(name)
        rate = b / busy if busy else 0.0
        ratios = "".join(f", {rate / ref[name]:.2f} x {ref['name']}" for ref in refs if ref[name])
        print(f"{name}: {b / 1e9:.1f} GB in {busy:.1f} s busy = {rate / 1e9:.2f} GB/s while busy{ratios},"
              f" {b / step.seconds / 1e9:.2f} GB/s over the step")


def report_against(step, ref, compute, compute_alone=None):
    """The disk's efficiency and the step's bound against one reference."""
    total, disk_busy = step.lane("nvme")
    need = step.lane("nvme_read")[0] / ref["nvme_read"] + step.lane("nvme_write")[0] / ref["nvme_write"]
    bound = max(compute, need)
    alone = ""
    if compute_alone:
        b = max(compute_alone, need)
        alone = (f"; max(compute alone {compute_alone:.1f} s, NVMe traffic {need:.1f} s) = {b:.1f} s:"
                 f" step = {step.seconds / b:.2f} x that")
    print(f"against {ref['name']} (read {ref['nvme_read'] / 1e9:.2f} GB/s, write {ref['nvme_write'] / 1e9:.2f} GB/s):"
          f" disk {total / 1e9:.1f} GB in {disk_busy:.1f} s with either lane busy, {need:.1f} s at the reference's rates"
          f" = {need / disk_busy:.2f} x; step bound max(compute {compute:.1f} s, NVMe traffic {need:.1f} s) = {bound:.1f} s:"
          f" step = {step.seconds / bound:.2f} x bound{alone}")


def report_after_backward(step):
    rb, rbusy = step.after("nvme_read", step.last_bwd)
    wb, wbusy = step.after("nvme_write", step.last_bwd)
    _, dbusy = step.after("nvme", step.last_bwd)
    _, abusy = step.after("cpu_optim", step.last_bwd)
    if rbusy and wbusy:
        print(f"after backward: read {rb / 1e9:.1f} GB at {rb / rbusy / 1e9:.2f} GB/s while busy, write {wb / 1e9:.1f} GB at"
              f" {wb / wbusy / 1e9:.2f} GB/s; disk busy {dbusy:.1f} s, cpu_optim lane busy {abusy:.1f} s")


def report_threads(step, path):
    """Cores per thread class over the last step and in its window after backward, from
    thread_cpu.py's samples. The sampler's last row is the process's end, which the last step's end
    precedes by about a second. A thread's CPU time at t is its last sample at or before t (0 before
    its first); the NVMe threads are those above the process's real-time priority. Over the whole
    step it also gives the CPU-seconds and the least step they allow on this machine's cores: on the
    CPU backend compute, copies, Adam and I/O completions share them; and, where the samples carry
    thread names (the engine names its threads by lane), those CPU-seconds by name."""
    samples = list(csv.DictReader(open(path)))
    if not samples:
        return
    t_end = max(float(r["t"]) for r in samples)
    base_rt = min(int(r["rt_priority"]) for r in samples)
    per, names = {}, {}
    for r in samples:
        per.setdefault(r["tid"], []).append((float(r["t"]), float(r["cpu_s"]), int(r["rt_priority"]) > base_rt))
        names[r["tid"]] = r.get("name") or ""  # a thread's last name: lane workers are named as they start
    m = sorted({(float(r["t"]), float(r["machine_busy_s"]), float(r["machine_steal_s"])) for r in samples})

    def last_at(points, t, default):
        v = default
        for p in points:
            if p[0] <= t:
                v = p
        return v

    def window(lo):
        by, by_name = {"io": 0.0, "other": 0.0}, {}
        for tid, pts in per.items():
            used = last_at(pts, t_end, (0, 0.0))[1] - last_at(pts, lo, (0, 0.0))[1]
            by["io" if any(x[2] for x in pts) else "other"] += used
            by_name[names[tid]] = by_name.get(names[tid], 0.0) + used
        (ta, ba, sa), (tb, bb, sb) = last_at(m, lo, m[0]), last_at(m, t_end, m[0])
        span = max(1e-9, tb - ta)
        return by, by_name, span, (bb - ba) / span, (sb - sa) / span

    cores = os.cpu_count()
    by, by_name, span, busy, steal = window(t_end - step.seconds)
    cpu = by["io"] + by["other"]
    print(f"threads over the last step ({span:.1f} s): NVMe threads {by['io'] / span:.2f} cores, the others"
          f" {by['other'] / span:.2f} cores, {cpu:.1f} CPU-seconds: on {cores} cores no schedule takes under"
          f" {cpu / cores:.1f} s (step = {step.seconds / max(1e-9, cpu / cores):.2f} x that); the machine busy"
          f" {busy:.2f} cores, steal {steal:.2f}")
    if any(by_name):
        parts = [f"{name or '?'} {used:.1f}" for name, used in sorted(by_name.items(), key=lambda kv: -kv[1]) if used >= 0.05]
        print("CPU-seconds by thread name over the last step: " + ", ".join(parts))
    by, _, span, busy, steal = window(t_end - (step.seconds - (step.last_bwd - step.t0)))
    print(f"threads after backward ({span:.1f} s): NVMe threads {by['io'] / span:.2f} cores, the others {by['other'] / span:.2f} cores;"
          f" the machine busy {busy:.2f} cores, steal {steal:.2f} (of {cores})")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("timeline")
    ap.add_argument("--ref", nargs=3, action="append", default=[], metavar=("NAME", "READ", "WRITE"),
                    help="a disk reference: its name and its read and write rates in bytes/s")
    ap.add_argument("--thread-cpu", default="")
    ap.add_argument("--compute-alone", type=float, default=0.0,
                    help="seconds of the same step with every state resident (compute_alone.py)")
    a = ap.parse_args(argv)
    refs = [{"name": n, "nvme_read": float(r), "nvme_write": float(w)} for n, r, w in a.ref if float(r) > 0 and float(w) > 0]
    step = Step(list(csv.DictReader(open(a.timeline))))
    report_lanes(step, refs)
    _, compute = step.lane("compute")
    print(f"last step {step.seconds:.1f} s: compute lane busy {compute:.1f} s;"
          f" {step.seconds - (step.last_bwd - step.t0):.1f} s of it after backward")
    for ref in refs:
        report_against(step, ref, compute, a.compute_alone)
    report_after_backward(step)
    if a.thread_cpu:
        report_threads(step, a.thread_cpu)


if __name__ == "__main__":
    main()
