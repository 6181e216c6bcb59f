#!/usr/bin/python3
"""experiments/published/capacity.py: the verdict per strategy (the paper's largest model must fit, the next
larger must not; a model planned as printed beside its stated count is no size of its own), the reserve at which
a disagreement would turn, and the whole table end to end on the DGX-2 profile."""
import csv
import importlib.util
import os
import sys
import tempfile
import unittest
import unittest.mock

ROOT = os.environ.get("ZINF_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "experiments", "published"))
spec = importlib.util.spec_from_file_location("capacity", os.path.join(ROOT, "experiments", "published", "capacity.py"))
capacity = importlib.util.module_from_spec(spec)
spec.loader.exec_module(capacity)


def verdict(fits, tier="", short=0.0, peak=None, budget=None):
    return {"fits": fits, "tier": tier, "short_gb": short, "peak_gb": peak or {"device": 10.0, "host": 100.0},
            "budget_gb": budget or {"device": 24.0, "host": 900.0}}


SPEC = {"hw": "dgx2-v100",
        "models": [{"name": "a"}, {"name": "b"}, {"name": "b printed", "printed_shape_of": "b"}, {"name": "c"}],
        "strategies": [{"name": "s1", "largest": "a"}, {"name": "s2", "largest": "b"}, {"name": "s3", "largest": "c"}]}


class Verdicts(unittest.TestCase):
    def test_ran_fits_and_next_refused(self):
        results = {("s1", "a"): verdict(True), ("s1", "b"): verdict(False, "device", 5.0),
                   ("s1", "b printed"): verdict(False, "device", 9.0), ("s1", "c"): verdict(False, "device", 20.0),
                   ("s2", "a"): verdict(True), ("s2", "b"): verdict(True), ("s2", "b printed"): verdict(False, "host", 3.0),
                   ("s2", "c"): verdict(True),
                   ("s3", "a"): verdict(True), ("s3", "b"): verdict(True), ("s3", "b printed"): verdict(True),
                   ("s3", "c"): verdict(False, "device", 3.0)}
        with unittest.mock.patch.object(capacity, "reserves", return_value={"device": 0.2, "host": 0.1}):
            rows = {r["strategy"]: r for r in capacity.verdicts(SPEC, results)}
        self.assertTrue(rows["s1"]["agrees"])
        self.assertEqual(rows["s1"]["next"], "b")
        # The next size after b is c, not b's printed shape: s2 admits c, beyond its limit.
        self.assertEqual(rows["s2"]["next"], "c")
        self.assertFalse(rows["s2"]["agrees"])
        self.assertIn("at least", rows["s2"]["to_agree"])
        # s3 refuses what it ran; the last size has no next one.
        self.assertFalse(rows["s3"]["agrees"])
        self.assertEqual(rows["s3"]["next"], "")
        self.assertEqual(rows["s3"]["to_agree"], "device reserve at most 10.0 %")

    def test_reserve_to_agree(self):
        # Device: 24 GB of budget at a 20 % reserve is 30 GB; 3 GB short needs 27 GB, a reserve of at most 10 %.
        tier, bound = capacity.reserve_to_agree(verdict(False, "device", 3.0), {"device": 0.2, "host": 0.1}, admit=True)
        self.assertEqual(tier, "device")
        self.assertAlmostEqual(bound, 0.1)
        # Admitted beyond the limit at a peak of 10 GB of those 30 GB: refused from a reserve of 2/3 up.
        tier, bound = capacity.reserve_to_agree(verdict(True), {"device": 0.2, "host": 0.1}, admit=False)
        self.assertAlmostEqual(bound, 2.0 / 3.0)
        # Host, per node: 900 GB at 10 % is 1000 GB; a peak of 950 GB fits from a reserve of at most 5 %.
        tier, bound = capacity.reserve_to_agree(verdict(False, "host", 2.0, peak={"device": 1.0, "host": 950.0}),
                                                {"device": 0.2, "host": 0.1}, admit=True)
        self.assertEqual(tier, "host")
        self.assertAlmostEqual(bound, 0.05)


@unittest.skipUnless(os.environ.get("ZINF_BINARY"), "ZINF_BINARY not set (CTest sets it)")
class EndToEnd(unittest.TestCase):
    def test_table(self):
        with tempfile.TemporaryDirectory() as out:
            self.assertEqual(capacity.main(["--zinf", os.environ["ZINF_BINARY"], "--out", out]), 0)
            text = open(os.path.join(out, "capacity.md")).read()
            with open(os.path.join(out, "capacity.csv"), newline="") as f:
                rows = list(csv.DictReader(f))
        for name in ("data parallel", "ZeRO-2", "ZeRO-Offload", "ZeRO-3", "ZeRO-Infinity, CPU", "ZeRO-Infinity, NVMe"):
            self.assertIn(f"| {name} |", text)
        self.assertEqual(len(rows), 6 * 7)  # every strategy x every model
        fits = {(r["strategy"], r["model"]): r["fits"] == "True" for r in rows}
        # What no reserve changes: 16 bytes per parameter on every GPU cannot hold 10B in 32 GB, and NVMe
        # offload holds the 1000B model on one node.
        self.assertFalse(fits[("data parallel", "10B")])
        self.assertTrue(fits[("ZeRO-Infinity, NVMe", "1000B")])
        self.assertRegex(text, r"\d of 6 strategies agree with the paper")


if __name__ == "__main__":
    unittest.main()
