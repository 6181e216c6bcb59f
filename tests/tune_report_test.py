#!/usr/bin/python3
"""analysis/tune_report.py over a synthetic `zinf tune --json` report: the Pareto front of each tier
keeps exactly the candidates no other beats on both memory and throughput, and the figure is written."""
import importlib.util
import json
import os
import tempfile
import unittest

ROOT = os.environ.get("ZINF_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
REPORT = os.path.join(ROOT, "analysis", "tune_report.py")
spec = importlib.util.spec_from_file_location("tune_report", REPORT)
tr = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tr)


def entry(name, step, device, host, nvme, simulated=None):
    e = {"describe": name, "planned": {"step_time": step, "peak": {
        "device_per_rank": device, "host_per_rank": host, "nvme_per_rank": nvme}}}
    if simulated:
        e["simulated"] = {"ok": True, "step_time": simulated}
    return e


class TuneReportTest(unittest.TestCase):
    def test_front_keeps_the_undominated(self):
        pts = [(1.0, 5.0, "a"), (2.0, 4.0, "dominated by a"), (2.0, 7.0, "b"), (3.0, 7.0, "tie, more memory"),
               (4.0, 9.0, "c")]
        self.assertEqual([p[2] for p in tr.pareto_front(pts)], ["a", "b", "c"])

    def test_writes_the_figure(self):
        rep = {"model": "gpt-tiny", "hwprofile": "cpu-dev", "nodes": 1, "global_batch": 4,
               "planned": [entry("x", 0.5, 1e9, 2e9, 0, 0.45), entry("y", 0.4, 2e9, 1e9, 3e9, 0.41),
                           entry("z", 0.6, 3e9, 3e9, 3e9)],
               "finalists": []}
        rep["finalists"] = [rep["planned"][1], rep["planned"][0]]
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "t.json")
            with open(path, "w") as f:
                json.dump(rep, f)
            tr.main([path, "--out", d])
            for ext in ("png", "pdf"):
                self.assertGreater(os.path.getsize(os.path.join(d, f"t_pareto.{ext}")), 1000)


if __name__ == "__main__":
    unittest.main()
