#!/usr/bin/python3
"""experiments/published/scaling.py: the step's phases read from a hand-made timeline, the measured step and the
forward + backward it implies, the closed-form bounds (expected slowest of n normal ranks, list-collective host
work, outlier chance) on known values, and one Fig 5(b) point end to end (its phases add up to its step)."""
import importlib.util
import math
import os
import sys
import tempfile
import unittest

ROOT = os.environ.get("ZINF_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "experiments", "published"))
spec = importlib.util.spec_from_file_location("scaling", os.path.join(ROOT, "experiments", "published", "scaling.py"))
scaling = importlib.util.module_from_spec(spec)
spec.loader.exec_module(scaling)


def row(rank, lane, start, end):
    return {"rank": str(rank), "lane": lane, "start": str(start), "end": str(end)}


class Arithmetic(unittest.TestCase):
    def test_phases(self):
        rows = [row(0, "comm", 0, 1), row(0, "compute", 1, 4), row(0, "compute", 5, 7), row(0, "nvme_read", 7, 10),
                row(1, "compute", 0, 50)]  # another rank's rows are not rank 0's
        ph = scaling.phases(rows)
        self.assertEqual(ph["step"], 10)
        self.assertEqual(ph["forward_backward"], 7)
        self.assertEqual(ph["after_backward"], 3)
        self.assertEqual(ph["compute_busy"], 5)
        self.assertEqual(ph["compute_idle"], 2)
        with self.assertRaisesRegex(ValueError, "rank 3"):
            scaling.phases(rows, rank="3")

    def test_measured_step_and_implied(self):
        point = {"id": "p", "seq": 1024, "vocab": 50257, "flops": "zero-infinity", "batch": 5, "measured_tflops": 49,
                 "model": {"layers": 128, "hidden": 25600}}
        flops = 8 * 1024 * 12 * 128 * 25600 ** 2 * 5
        self.assertAlmostEqual(scaling.measured_step(point), flops / 49e12)
        self.assertAlmostEqual(scaling.implied_forward_backward(900.0, {"after_backward": 300.0}), 600.0)

    def test_expected_max_normal(self):
        self.assertAlmostEqual(scaling.expected_max_normal(1), 0.0, places=6)
        self.assertAlmostEqual(scaling.expected_max_normal(2), 1 / math.sqrt(math.pi), places=5)
        self.assertAlmostEqual(scaling.expected_max_normal(3), 1.5 / math.sqrt(math.pi), places=5)
        self.assertGreater(scaling.expected_max_normal(128), scaling.expected_max_normal(16))
        with self.assertRaises(ValueError):
            scaling.expected_max_normal(0)

    def test_bounds(self):
        self.assertAlmostEqual(scaling.list_collective_bound(1000, 128, 10e-6), 1.28)
        self.assertAlmostEqual(scaling.chance_of_outlier(0.5, 2), 0.75)
        self.assertEqual(scaling.chance_of_outlier(0.0, 512), 0.0)
        self.assertAlmostEqual(scaling.slope([40.0, 50.0]), 0.25)


@unittest.skipUnless(os.environ.get("ZINF_BINARY"), "ZINF_BINARY not set (CTest sets it)")
class EndToEnd(unittest.TestCase):
    def test_64_gpu_point(self):
        with tempfile.TemporaryDirectory() as out:
            rc = scaling.main(["--zinf", os.environ["ZINF_BINARY"], "--out", out, "--only", "fig5b-1t-64", "--no-variants",
                               "--tree", "--tree-seeds", "2"])
            self.assertEqual(rc, 0)
            with open(os.path.join(out, "scaling.md")) as f:
                text = f.read()
        line = next(l for l in text.splitlines() if l.startswith("| fig5b-1t-64 |"))
        cells = [c.strip() for c in line.strip("|").split("|")]
        self.assertEqual(cells[1], "64")
        step, fb, after = (float(cells[i].split()[0]) for i in (5, 6, 7))
        self.assertAlmostEqual(fb + after, step, delta=1.0)
        # 1T's model states on four nodes' NVMe: the optimizer phase is a large share of the step.
        self.assertGreater(after, 0.2 * step)
        # On the tree: two placements, each a TFLOP/s figure, and seed 1's phases adding up as well.
        line = next(l for l in text.splitlines() if l.startswith("| fig5b-1t-64 |") and "/" in l.split("|")[2])
        cells = [c.strip() for c in line.strip("|").split("|")]
        self.assertEqual(len(cells[1].split(" / ")), 2)
        self.assertGreater(float(cells[3].split()[0]), 0.5 * step)
        with self.assertRaises(SystemExit):
            scaling.main(["--zinf", os.environ["ZINF_BINARY"], "--only", "no-such-point"])


if __name__ == "__main__":
    unittest.main()
