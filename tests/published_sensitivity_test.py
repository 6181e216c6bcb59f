#!/usr/bin/python3
"""experiments/published/sensitivity.py: scaling a profile's numbers with their units, the step share
and the factor that would match a measurement on hand-computed cases, and one end-to-end run (a
single-V100 Megatron point: compute holds a large share of its step, NVMe none)."""
import csv
import importlib.util
import os
import sys
import tempfile
import unittest

ROOT = os.environ.get("ZINF_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "experiments", "published"))
spec = importlib.util.spec_from_file_location("sensitivity", os.path.join(ROOT, "experiments", "published", "sensitivity.py"))
sensitivity = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sensitivity)


class Scaling(unittest.TestCase):
    def test_numbers_with_units(self):
        self.assertEqual(sensitivity.scaled("125 TFLOP/s", 1.1), "137.5 TFLOP/s")
        self.assertEqual(sensitivity.scaled("100 Gb/s", 2), "200 Gb/s")
        self.assertAlmostEqual(sensitivity.scaled(4.0e9, 1.5), 6.0e9)
        self.assertEqual(sensitivity.scaled("3e9", 2), "6e+09")
        with self.assertRaisesRegex(ValueError, "not a number"):
            sensitivity.scaled("fast", 2)

    def test_resource_fields(self):
        profile = {"node": {"pcie": {"bandwidth_per_gpu": "12 GB/s", "switch_uplink": "12 GB/s"},
                            "gpu": {"peak_flops": "100 TFLOP/s"}}}
        p, found = sensitivity.with_resource(profile, dict(sensitivity.RESOURCES)["PCIe"], 2.0)
        self.assertEqual(found, 2)
        self.assertEqual(p["node"]["pcie"], {"bandwidth_per_gpu": "24 GB/s", "switch_uplink": "24 GB/s"})
        self.assertEqual(profile["node"]["pcie"]["bandwidth_per_gpu"], "12 GB/s")  # the original is left alone
        _, found = sensitivity.with_resource(profile, dict(sensitivity.RESOURCES)["NVMe read"], 2.0)
        self.assertEqual(found, 0)

    def test_share_and_match(self):
        self.assertAlmostEqual(sensitivity.step_share(100.0, 100.0 / 1.1, 1.1), 1.0)  # bound by it alone
        self.assertAlmostEqual(sensitivity.step_share(100.0, 100.0, 1.1), 0.0)
        self.assertAlmostEqual(sensitivity.step_share(100.0, 50 + 50 / 1.1, 1.1), 0.5)
        # A step bound by one resource 25 % longer than simulated: that resource at 0.8x.
        self.assertAlmostEqual(sensitivity.factor_to_match(1.0, 1.25), 0.8)
        # Half the step, measured 20 % shorter: that half 40 % shorter, the resource 1/0.6 faster.
        self.assertAlmostEqual(sensitivity.factor_to_match(0.5, 0.8), 1 / 0.6)
        self.assertIsNone(sensitivity.factor_to_match(0.5, 0.4))   # more than its half would have to vanish
        self.assertIsNone(sensitivity.factor_to_match(0.005, 1.2))  # it holds no share

    def test_to_match_lists_major_resources(self):
        row = {"kind": "prediction", "error": 0.25, "shares": {"GPU compute": 1.0, "NICs": 0.0}}
        self.assertEqual(sensitivity.to_match(row), "GPU compute x0.80")
        row = {"kind": "prediction", "error": -0.6, "shares": {"GPU compute": 0.5, "NVMe read": 0.3}}
        self.assertIn("GPU compute: cannot alone (50% of the step)", sensitivity.to_match(row))
        self.assertEqual(sensitivity.to_match({"kind": "prediction", "error": 0.05, "shares": {"HBM": 1}}), "")
        self.assertEqual(sensitivity.to_match({"kind": "calibration", "error": 0.5, "shares": {"HBM": 1}}), "")


@unittest.skipUnless(os.environ.get("ZINF_BINARY"), "ZINF_BINARY not set (CTest sets it)")
class EndToEnd(unittest.TestCase):
    def test_single_v100_point(self):
        with tempfile.TemporaryDirectory() as out:
            rc = sensitivity.main(["--zinf", os.environ["ZINF_BINARY"], "--out", out, "--only", "megatron-1.2b-1gpu",
                                   "--resources", "GPU compute", "HBM", "NVMe read", "--jobs", "2"])
            self.assertEqual(rc, 0)
            with open(os.path.join(out, "sensitivity.csv")) as f:
                rows = list(csv.DictReader(f))
            self.assertEqual(len(rows), 1)
            r = rows[0]
            self.assertGreater(float(r["GPU compute"]), 0.2)
            self.assertLess(float(r["GPU compute"]), 1.01)
            self.assertGreater(float(r["HBM"]), 0.2)
            # The two kernel-bound resources hold the whole step between them.
            self.assertAlmostEqual(float(r["GPU compute"]) + float(r["HBM"]), 1.0, delta=0.05)
            self.assertAlmostEqual(float(r["NVMe read"]), 0.0, delta=0.005)
            for ext in ("md", "png", "pdf"):
                self.assertTrue(os.path.getsize(os.path.join(out, f"sensitivity.{ext}")) > 0)
        with self.assertRaises(SystemExit):
            sensitivity.main(["--zinf", os.environ["ZINF_BINARY"], "--only", "no-such-point"])


if __name__ == "__main__":
    unittest.main()
