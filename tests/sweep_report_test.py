#!/usr/bin/python3
"""analysis/sweep_report.py over synthetic sweep CSVs: which axes count as varied (zipped ones as
one), quantities with units, the best over other axes, refused and failed points, files written."""
import csv
import importlib.util
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.environ.get("ZINF_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
REPORT = os.path.join(ROOT, "analysis", "sweep_report.py")
spec = importlib.util.spec_from_file_location("sweep_report", REPORT)
sr = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sr)

RESULTS = ["gpus", "status", "step_time_s", "samples_per_s", "tflops_per_gpu", "sim_wall_s", "message"]
COORDS = ["model", "hwprofile", "nodes", "config", "hwprofile.node.nvme.read_bandwidth",
          "hwprofile.node.nvme.write_bandwidth", "config.micro_batch"]


def write_csv(path):
    """2 read/write pairs (zipped) x 3 micro-batches; micro-batch 8 with the slow NVMe is refused,
    micro-batch 2 with the fast one failed."""
    rows = []
    for read, write in (("25 GB/s", "20 GB/s"), ("50 GB/s", "40 GB/s")):
        for mb in ("2", "4", "8"):
            fast = read == "50 GB/s"
            status = "does-not-fit" if (mb == "8" and not fast) else "error" if (mb == "2" and fast) else "ok"
            tflops = str(10 * int(mb) + (5 if fast else 0)) if status == "ok" else ""
            rows.append(["gpt-1t", "hwprofiles/dgx2-v100.yaml", "1", "configs/infinity-nvme.yaml", read, write, mb,
                         "16", status, "", "", tflops, "0.1", "why" if status != "ok" else ""])
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COORDS + RESULTS)
        w.writerows(rows)


class SweepReport(unittest.TestCase):
    def test_quantities(self):
        self.assertEqual(sr.quantity("25 GB/s"), 25e9)
        self.assertEqual(sr.quantity("100 Gb/s"), 12.5e9)
        self.assertEqual(sr.quantity("32 GiB"), 32 * 2**30)
        self.assertAlmostEqual(sr.quantity("5 us"), 5e-6)
        self.assertEqual(sr.quantity("0.5"), 0.5)
        self.assertIsNone(sr.quantity("nvme"))
        self.assertIsNone(sr.quantity("12 parsecs"))

    def test_axes_best_and_files(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "s.csv")
            write_csv(path)
            coords, rows = sr.read(path)
            self.assertEqual(coords, COORDS)
            axes = sr.varied_axes(coords, rows)
            # read and write bandwidth advance together: one axis.
            self.assertEqual([a.name for a in axes], ["hwprofile.node.nvme.read_bandwidth", "config.micro_batch"])
            self.assertEqual(axes[0].zipped, ["hwprofile.node.nvme.write_bandwidth"])
            self.assertTrue(axes[0].numeric)
            self.assertEqual(axes[0].values, ["25 GB/s", "50 GB/s"])
            mb8 = [r for r in rows if r["config.micro_batch"] == "8"]
            self.assertEqual(sr.best(mb8, "tflops_per_gpu"), (85.0, None))
            self.assertEqual(sr.best([r for r in mb8 if r["hwprofile.node.nvme.read_bandwidth"] == "25 GB/s"],
                                     "tflops_per_gpu"), (None, "refused"))
            mb2_fast = [r for r in rows if r["config.micro_batch"] == "2" and r["hwprofile.node.nvme.read_bandwidth"] ==
                        "50 GB/s"]
            self.assertEqual(sr.best(mb2_fast, "tflops_per_gpu"), (None, "error"))
            self.assertEqual(sr.best(mb8, "step_time_s"), (None, "refused"))

            out = os.path.join(tmp, "figs")
            r = subprocess.run([sys.executable, REPORT, path, "--out", out], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("6 points (4 ok, 1 refused, 1 failed)", r.stdout)
            names = sorted(os.listdir(out))
            for stem in ("s_vs_hwprofile.node.nvme.read_bandwidth", "s_vs_config.micro_batch",
                         "s_heatmap_hwprofile.node.nvme.read_bandwidth_config.micro_batch"):
                for ext in ("png", "pdf"):
                    self.assertIn(f"{stem}.{ext}", names)
                    self.assertGreater(os.path.getsize(os.path.join(out, f"{stem}.{ext}")), 1000)
            self.assertEqual(len(names), 6)

    def test_not_a_sweep_csv(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "x.csv")
            with open(path, "w") as f:
                f.write("a,b\n1,2\n")
            r = subprocess.run([sys.executable, REPORT, path], capture_output=True, text=True)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("not a zinf sweep CSV", r.stderr)


if __name__ == "__main__":
    unittest.main()
