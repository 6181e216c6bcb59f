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
        asked = []

        def bound(strategy, model, tier, admit):
            asked.append((strategy["name"], model, tier, admit))
            return {("s2", "c", "device", False): 0.25, ("s3", "c", "device", True): 0.1}.get((strategy["name"], model, tier, admit))
        rows = {r["strategy"]: r for r in capacity.verdicts(SPEC, results, bound)}
        # Only the disagreements ask: an admitted next model on every tier, a refused run on its short tier.
        self.assertEqual(sorted(asked), [("s2", "c", "device", False), ("s2", "c", "host", False), ("s3", "c", "device", True)])
        self.assertTrue(rows["s1"]["agrees"])
        self.assertEqual(rows["s1"]["next"], "b")
        # The next size after b is c, not b's printed shape: s2 admits c, beyond its limit.
        self.assertEqual(rows["s2"]["next"], "c")
        self.assertFalse(rows["s2"]["agrees"])
        self.assertEqual(rows["s2"]["to_agree"], "device reserve at least 25.0 %")
        # s3 refuses what it ran; the last size has no next one.
        self.assertFalse(rows["s3"]["agrees"])
        self.assertEqual(rows["s3"]["next"], "")
        self.assertEqual(rows["s3"]["to_agree"], "device reserve at most 10.0 %")


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
        # A refused run's bound comes from planning it again: at that reserve it fits, a point above it not.
        for line in text.splitlines():
            if "refuses what the paper ran" in line:
                self.assertRegex(line, r"reserve at most \d+\.\d %|no \w+ reserve would do")


if __name__ == "__main__":
    unittest.main()
