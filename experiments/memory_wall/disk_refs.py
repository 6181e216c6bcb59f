#!/usr/bin/env python3
"""The memory-wall run's disk references.

  disk_refs.py io-bench OUTPUT.txt        -> "BLOCK DEPTH BEST_READ BEST_WRITE" from `zinf io-bench`'s
                                             output: the block size and queue depth it recommends
                                             (its "aio:" line), the best read and
                                             the best write over all points, in bytes and bytes/s
  disk_refs.py fio BLOCK DEPTH FILE...    -> "READ WRITE": fio reads each file once, then rewrites it
                                             in place (io_uring, O_DIRECT, registered buffers), bytes/s
                                             over all files
"""
import json
import re
import subprocess
import sys

UNITS = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def bytes_per_s(value, unit):
    prefix = unit[:-3]  # "GB/s" -> "G"
    return float(value) * UNITS[prefix] if prefix in UNITS else float(value)


def io_bench_points(text):
    """(block bytes, queue depth, write B/s, read B/s) per measured point."""
    pts = []
    for line in text.replace("\r", "\n").splitlines():
        m = re.search(r"\]\s+(\d+) (KiB|MiB)\s+qd\s+(\d+)\s+write\s+([\d.]+) (\S+)\s+read\s+([\d.]+) (\S+)", line)
        if m:
            block = int(m[1]) << (20 if m[2] == "MiB" else 10)
            pts.append((block, int(m[3]), bytes_per_s(m[4], m[5]), bytes_per_s(m[6], m[7])))
    return pts


def io_bench_best(text):
    pts = io_bench_points(text)
    if not pts:
        raise SystemExit("disk_refs: no measured point in zinf io-bench's output")
    m = re.search(r"^aio: \{block_size: (\d+), queue_depth: (\d+)\}", text, re.M)
    if not m:
        raise SystemExit("disk_refs: zinf io-bench's output has no recommended 'aio:' line")
    return int(m[1]), int(m[2]), max(p[3] for p in pts), max(p[2] for p in pts)


def fio_rate(files, rw, block, depth):
    moved = seconds = 0.0
    for f in files:
        out = subprocess.run(["fio", "--name=store", f"--filename={f}", f"--rw={rw}", f"--bs={block}", f"--iodepth={depth}",
                              "--ioengine=io_uring", "--direct=1", "--fixedbufs", "--registerfiles", "--output-format=json"],
                             capture_output=True, text=True, check=True).stdout
        job = json.loads(out[out.index("{"):])["jobs"][0]["read" if rw == "read" else "write"]
        moved += job["io_bytes"]
        seconds += job["runtime"] / 1e3
    return moved / seconds if seconds else 0.0


def main(argv):
    if len(argv) >= 2 and argv[0] == "io-bench":
        print(*io_bench_best(open(argv[1]).read()))
    elif len(argv) >= 4 and argv[0] == "fio":
        block, depth, files = argv[1], argv[2], argv[3:]
        print(fio_rate(files, "read", block, depth), fio_rate(files, "write", block, depth))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
