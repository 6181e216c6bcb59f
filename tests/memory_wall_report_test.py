#!/usr/bin/python3
"""experiments/memory_wall/report.py over a synthetic Timeline whose figures are known: overlapping
NVMe tasks counted once in busy time, each reference's ratios, the step against its bound."""
import contextlib
import csv
import importlib.util
import io
import os
import re
import tempfile
import unittest

ROOT = os.environ.get("ZINF_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
spec = importlib.util.spec_from_file_location("mw_report", os.path.join(ROOT, "experiments", "memory_wall", "report.py"))
rep = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rep)
spec = importlib.util.spec_from_file_location("mw_refs", os.path.join(ROOT, "experiments", "memory_wall", "disk_refs.py"))
refs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(refs)
spec = importlib.util.spec_from_file_location("mw_alone", os.path.join(ROOT, "experiments", "memory_wall", "compute_alone.py"))
alone = importlib.util.module_from_spec(spec)
spec.loader.exec_module(alone)

GB = 1e9
# A 10 s step: forward 0-2 s and backward 2-6 s on the compute lane (6 s busy); two reads of 4 GB
# overlapping over 0-4 s (busy 4 s, 8 GB: 2 GB/s), one write of 6 GB over 5-8 s (3 s: 2 GB/s), so
# the disk is busy 0-8 s minus the 4-5 s gap = 7 s; the optimizer after backward 6-10 s.
ROWS = [
    ("compute", "forward", 0, 2, 0), ("compute", "backward", 2, 6, 0),
    ("nvme_read", "nvme_read", 0, 4, 4 * GB), ("nvme_read", "nvme_read", 1, 4, 4 * GB),
    ("nvme_write", "nvme_write", 5, 8, 6 * GB), ("cpu_optim", "optimizer_step", 6, 10, 0),
]


def run(refs, threads=None, header=("t", "tid", "rt_priority", "cpu_s", "machine_busy_s", "machine_steal_s"), extra=()):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "last.csv")
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["rank", "lane", "task", "kind", "label", "start", "end", "bytes", "flops"])
            for i, (lane, kind, a, b, n) in enumerate(ROWS):
                w.writerow([0, lane, i, kind, kind, a, b, n, 0])
        out = io.StringIO()
        args = [path, *extra]
        for name, r, wr in refs:
            args += ["--ref", name, str(r), str(wr)]
        if threads is not None:
            tpath = os.path.join(d, "threads.csv")
            with open(tpath, "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(list(header))
                w.writerows(threads)
            args += ["--thread-cpu", tpath]
        with contextlib.redirect_stdout(out):
            rep.main(args)
        return out.getvalue()


class Report(unittest.TestCase):
    def test_threads_over_the_step_and_after_backward(self):
        # The process ends at t = 12, so the 10 s step is 2-12 and its 4 s after backward 8-12. An
        # ordinary thread uses one core throughout, an NVMe thread (real-time priority above the
        # others) half a core; the machine is busy 1.5 cores with 0.1 stolen.
        rows = []
        for t in range(13):
            rows.append([t, 1, 0, 1.0 * t, 1.5 * t, 0.1 * t])
            rows.append([t, 2, 1, 0.5 * t, 1.5 * t, 0.1 * t])
        text = run([], rows)
        cores = os.cpu_count()
        self.assertIn("threads over the last step (10.0 s): NVMe threads 0.50 cores, the others 1.00 cores, 15.0 CPU-seconds:"
                      f" on {cores} cores no schedule takes under {15 / cores:.1f} s (step = {10 / (15 / cores):.2f} x that);"
                      " the machine busy 1.50 cores, steal 0.10", text)
        self.assertIn("threads after backward (4.0 s): NVMe threads 0.50 cores, the others 1.00 cores;"
                      f" the machine busy 1.50 cores, steal 0.10 (of {cores})", text)

    def test_cpu_seconds_by_thread_name(self):
        # Two "zinf compute" threads (one per step: the second starts at t = 5, inside the 2-12 step,
        # and counts whole), one "zinf adam" at a quarter core, and a thread idle over the step.
        rows = []
        for t in range(13):
            rows.append([t, 1, 0, 0.5 * min(t, 5), t, 0, "zinf compute"])
            if t >= 5:
                rows.append([t, 2, 0, 1.0 * (t - 5), t, 0, "zinf compute"])
            rows.append([t, 3, 0, 0.25 * t, t, 0, "zinf adam"])
            rows.append([t, 4, 0, 0.0, t, 0, "zinf"])
        text = run([], rows, header=("t", "tid", "rt_priority", "cpu_s", "machine_busy_s", "machine_steal_s", "name"))
        # compute: 1.5 s of thread 1 (2-5 s) + 7 s of thread 2; adam 2.5 s; the idle thread is left out.
        self.assertIn("CPU-seconds by thread name over the last step: zinf compute 8.5, zinf adam 2.5\n", text)
        # Samples without names (the sampler before it recorded them) give no such line.
        self.assertNotIn("by thread name", run([], [[t, 1, 0, 1.0 * t, t, 0] for t in range(13)]))

    def test_a_lane_between_two_times_pro_rata(self):
        # The reads over 1-3 s: 2 s of the 0-4 s read (2 GB) and 2 s of the 1-4 s one (8/3 GB).
        step = rep.Step([{"lane": l, "kind": k, "start": a, "end": b, "bytes": n} for l, k, a, b, n in ROWS])
        moved, busy = step.between("nvme_read", 1, 3)
        self.assertAlmostEqual(moved / GB, 2 + 8 / 3)
        self.assertAlmostEqual(busy, 2.0)
        self.assertEqual(step.after("nvme_read", 1), step.between("nvme_read", 1, float("inf")))

    def test_union_busy_counts_overlap_once(self):
        self.assertAlmostEqual(rep.union_busy([(0, 4), (1, 4), (5, 8)]), 7.0)
        self.assertAlmostEqual(rep.union_busy([]), 0.0)

    def test_lanes_against_each_reference(self):
        text = run([("bench", 4 * GB, 4 * GB), ("store", 2 * GB, 1 * GB)])
        self.assertIn("nvme_read: 8.0 GB in 4.0 s busy = 2.00 GB/s while busy, 0.50 x bench, 1.00 x store", text)
        self.assertIn("nvme_write: 6.0 GB in 3.0 s busy = 2.00 GB/s while busy, 0.50 x bench, 2.00 x store", text)
        self.assertIn("last step 10.0 s: compute lane busy 6.0 s; 4.0 s of it after backward", text)

    def test_disk_efficiency_and_bound(self):
        text = run([("bench", 4 * GB, 4 * GB), ("store", 2 * GB, 1 * GB)])
        # bench: 8/4 + 6/4 = 3.5 s needed over 7 s busy; bound max(6, 3.5) = 6 s.
        bench = re.search(r"against bench .*", text).group(0)
        self.assertIn("3.5 s at the reference's rates = 0.50 x", bench)
        self.assertIn("= 6.0 s: step = 1.67 x bound", bench)
        # store: 8/2 + 6/1 = 10 s needed over 7 s busy; bound 10 s.
        store = re.search(r"against store .*", text).group(0)
        self.assertIn("10.0 s at the reference's rates = 1.43 x", store)
        self.assertIn("= 10.0 s: step = 1.00 x bound", store)

    def test_bound_with_the_step_alone(self):
        # compute alone 8 s: bench needs 3.5 s, so max(8, 3.5) = 8 and the 10 s step is 1.25 x that;
        # store needs 10 s, so the bound stays 10 s.
        text = run([("bench", 4 * GB, 4 * GB), ("store", 2 * GB, 1 * GB)], extra=["--compute-alone", "8"])
        self.assertIn("= 6.0 s: step = 1.67 x bound; max(compute alone 8.0 s, NVMe traffic 3.5 s) = 8.0 s:"
                      " step = 1.25 x that", re.search(r"against bench .*", text).group(0))
        self.assertIn("max(compute alone 8.0 s, NVMe traffic 10.0 s) = 10.0 s: step = 1.00 x that",
                      re.search(r"against store .*", text).group(0))
        self.assertNotIn("compute alone", run([("bench", 4 * GB, 4 * GB)]))

    def test_reference_without_rates_is_left_out(self):
        text = run([("bench", 0, 0)])
        self.assertNotIn("x bench", text)
        self.assertNotIn("against bench", text)


# `zinf io-bench`'s output as the terminal gets it: progress redrawn with carriage returns.
IO_BENCH = ("  [ 1/3]   1 MiB qd   8   writing\r  [ 1/3]   1 MiB qd   8        write  2.54 GB/s  read  1.44 GB/s   \n"
            "  [ 2/3]   1 MiB qd  32        write  2.63 GB/s  read  1.62 GB/s   \n"
            "  [ 3/3] 512 KiB qd   8        write  900 MB/s  read  1.90 GB/s   \n"
            "best: 1 MiB qd 32: write 2.63 GB/s, read 1.62 GB/s\n"
            "\nput this in the run config:\n\naio: {block_size: 1048576, queue_depth: 32}\n")


class DiskRefs(unittest.TestCase):
    def test_io_bench_points_in_bytes(self):
        self.assertEqual(refs.io_bench_points(IO_BENCH), [(1 << 20, 8, 2.54e9, 1.44e9), (1 << 20, 32, 2.63e9, 1.62e9),
                                                          (512 << 10, 8, 0.9e9, 1.9e9)])

    def test_recommended_point_and_best_rates(self):
        # The settings are io-bench's recommended 'aio:' line; the best read comes from another point.
        self.assertEqual(refs.io_bench_best(IO_BENCH), (1 << 20, 32, 1.9e9, 2.63e9))
        self.assertEqual(refs.io_bench_best(IO_BENCH.replace("queue_depth: 32", "queue_depth: 8"))[:2], (1 << 20, 8))

    def test_no_recommended_line_is_an_error(self):
        with self.assertRaises(SystemExit):
            refs.io_bench_best(IO_BENCH[:IO_BENCH.index("\nput this")])

    def test_no_point_is_an_error(self):
        with self.assertRaises(SystemExit):
            refs.io_bench_best("zinf io-bench: error: cannot create /x\n")




class ComputeAlone(unittest.TestCase):
    LOG = ("zinf train: gpt (284M params) on 1 rank(s)\n"
           "[######..................] step 1/3 | loss 11.6691 | 61 tok/s | 2.093 s | device 6.56 GB\n"
           "[################........] step 2/3 | loss 10.1 | 63 tok/s | 2.042 s | device 6.56 GB\n"
           "[########################] step 3/3 | loss 9.3 | 60 tok/s | 2.25 s | device 6.56 GB\n")

    def test_step_times_from_train_output(self):
        self.assertEqual(alone.step_seconds(self.LOG), {1: 2.093, 2: 2.042, 3: 2.25})

    def test_linear_in_layers(self):
        # 2 s at 1 layer, 7 s at 6: 1 s per layer, so 18 layers take 19 s.
        self.assertAlmostEqual(alone.extrapolate(1, 2.0, 6, 7.0, 18), 19.0)
        self.assertAlmostEqual(alone.extrapolate(1, 2.0, 6, 7.0, 6), 7.0)

    def test_fewer_layers_when_the_large_count_does_not_fit(self):
        # A stand-in zinf: 4 layers or more are refused for memory; below, step k of a run with L layers
        # takes 1 + L seconds (plus k / 1000, so the median is of steps 2..5, not 1).
        with tempfile.TemporaryDirectory() as d:
            fake = os.path.join(d, "zinf")
            with open(fake, "w") as f:
                f.write("#!/bin/bash\n"
                        "model=$(awk -v RS=' ' 'p {print; exit} /^--model$/ {p=1}' <<< \"$*\")\n"
                        "L=$(awk '/^layers:/ {print $2}' \"$model\")\n"
                        "if [ \"$L\" -ge 4 ]; then echo 'zinf: error: this run needs 40 GB of RAM and the machine has"
                        " 24 GB available (MemAvailable)' >&2; exit 1; fi\n"
                        "for k in 1 2 3 4 5; do echo \"[#] step $k/5 | loss 9.0 | 10 tok/s | $((1 + L)).00$k s | device 1 GB\"; done\n")
            os.chmod(fake, 0o755)
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                alone.main(["--zinf", fake, "--hw", "hw.yaml", "--work", d, "--tiling", "1", "--layers", "10", "--hidden", "64",
                            "--heads", "2", "--seq", "16", "--vocab", "100", "--sub-group-size", "1000", "--grad-clip", "0",
                            "--small", "1", "--large", "5", "--steps", "5"])
            text = out.getvalue()
            self.assertIn("5 layers resident do not fit in this machine's memory; trying 4", text)
            self.assertIn("4 layers resident do not fit in this machine's memory; trying 3", text)
            # 1 layer: median of 2.002..2.005 = 2.0035; 3 layers: 4.0035; 1 s per layer -> 11.0035 at 10.
            self.assertIn("compute alone: 1.000 s per layer -> 11.00 s at 10 layers", text)
            self.assertRegex(text, r"\ncompute_alone_s 11\.00[34]\n")


if __name__ == "__main__":
    unittest.main()
