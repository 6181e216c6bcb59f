#!/usr/bin/python3
"""analysis/validation_report.py over synthetic suite outputs: medians over passes, the per-pass
table, the goals, a runs folder without passes, and an empty one."""
import csv
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.environ.get("ZINF_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
REPORT = os.path.join(ROOT, "analysis", "validation_report.py")
LANES = ["compute", "h2d", "d2h", "nvme_read", "nvme_write", "comm", "cpu_optim"]


def write_run(folder, name, measured, predicted, compute):
    os.makedirs(os.path.join(folder, name))
    j = {"model": "gpt-mini", "config": f"configs/{name}.yaml", "ranks": 1, "predicted": predicted,
         "error": predicted / measured - 1.0,
         "measured": {"median": measured, "min": measured * 0.9, "max": measured * 1.2, "steps": 55},
         "lanes": {lane: {"measured": compute if lane == "compute" else 0.0,
                          "predicted": compute * 1.1 if lane == "compute" else 0.0} for lane in LANES}}
    with open(os.path.join(folder, name, "validate.json"), "w") as f:
        json.dump(j, f)


def report(runs, out):
    return subprocess.run([sys.executable, REPORT, runs, out, "--gantt", "none"], capture_output=True, text=True)


def rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


class ValidationReport(unittest.TestCase):
    def test_medians_over_passes(self):
        with tempfile.TemporaryDirectory() as tmp:
            runs, out = os.path.join(tmp, "runs"), os.path.join(tmp, "out")
            # a: errors +2 %, +20 %, -1 % (median +2 %); b: -4 %, -6 %, -5 % (median -5 %).
            for k, (ea, eb) in enumerate([(0.02, -0.04), (0.20, -0.06), (-0.01, -0.05)], start=1):
                write_run(os.path.join(runs, f"pass-{k}"), "a", 1.0, 1.0 + ea, 0.5 + 0.1 * k)
                write_run(os.path.join(runs, f"pass-{k}"), "b", 2.0 * k, 2.0 * k * (1.0 + eb), 1.0)
            r = report(runs, out)
            self.assertEqual(r.returncode, 0, r.stderr)
            table = {row["config"]: row for row in rows(os.path.join(out, "validation.csv"))}
            self.assertEqual(table["a"]["passes"], "3")
            self.assertAlmostEqual(float(table["a"]["error"]), 0.02, places=4)
            self.assertAlmostEqual(float(table["a"]["error_lowest"]), -0.01, places=4)
            self.assertAlmostEqual(float(table["a"]["error_highest"]), 0.20, places=4)
            self.assertAlmostEqual(float(table["b"]["error"]), -0.05, places=4)
            self.assertAlmostEqual(float(table["b"]["measured_median_s"]), 4.0, places=4)
            self.assertAlmostEqual(float(table["b"]["measured_lowest_pass_s"]), 2.0, places=4)
            lanes = {(row["config"], row["lane"]): row for row in rows(os.path.join(out, "lanes.csv"))}
            self.assertAlmostEqual(float(lanes[("a", "compute")]["measured_s"]), 0.7, places=4)
            self.assertEqual(len(rows(os.path.join(out, "passes.csv"))), 6)
            # Over the configurations: median of |+2 %| and |-5 %|; the worst median is 5 %.
            self.assertIn("median |error| 3.5%   max |error| 5.0%   over 2 configurations, each the median of 3 passes",
                          r.stdout)
            self.assertIn("goal median <= 10% and max <= 25%: met; median <= 5%: met", r.stdout)
            # Pass 2 alone: |+20 %| and |-6 %|, median 13 %.
            self.assertIn("pass 2: median |error| 13.0%   max |error| 20.0%   goals: NOT met, median <= 5% NOT met",
                          r.stdout)
            self.assertTrue(os.path.exists(os.path.join(out, "scatter.png")))
            self.assertTrue(os.path.exists(os.path.join(out, "errors.png")))

    def test_a_runs_folder_without_passes_is_one_pass(self):
        with tempfile.TemporaryDirectory() as tmp:
            runs, out = os.path.join(tmp, "runs"), os.path.join(tmp, "out")
            write_run(runs, "a", 1.0, 1.3, 0.5)
            r = report(runs, out)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("median |error| 30.0%   max |error| 30.0%   over 1 configurations\n", r.stdout)
            self.assertIn("goal median <= 10% and max <= 25%: NOT met", r.stdout)
            self.assertNotIn("pass 1:", r.stdout)

    def test_no_runs_is_an_error_naming_the_folder(self):
        with tempfile.TemporaryDirectory() as tmp:
            r = report(tmp, os.path.join(tmp, "out"))
            self.assertNotEqual(r.returncode, 0)
            self.assertIn(f"no validate.json under {tmp}", r.stderr)


if __name__ == "__main__":
    unittest.main()
