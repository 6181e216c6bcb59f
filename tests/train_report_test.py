#!/usr/bin/python3
"""analysis/train_report.py over a synthetic `zinf train --metrics` record: a resumed run's repeated
steps keep their last line, held-out points are read, a bad line is named, and the PNG is written."""
import importlib.util
import json
import os
import tempfile
import unittest

ROOT = os.environ.get("ZINF_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
spec = importlib.util.spec_from_file_location("train_report", os.path.join(ROOT, "analysis", "train_report.py"))
tr = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tr)


def step(n, loss):
    return {"kind": "step", "step": n, "loss": loss, "lr": 1e-3 * n, "grad_norm": 1.0, "tokens_per_s": 100.0 + n,
            "step_seconds": 0.5, "lane_busy_seconds": {"compute": 0.4}, "peak_bytes": {"device": 1, "host": 2, "nvme": 0}}


class TrainReportTest(unittest.TestCase):
    def write(self, lines):
        f = tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False)
        f.write("\n".join(lines) + "\n")
        f.close()
        self.addCleanup(os.unlink, f.name)
        return f.name

    def test_last_line_of_a_step_wins_and_the_png_is_written(self):
        lines = [json.dumps(step(n, 5.0 - n)) for n in (1, 2, 3)]
        lines += [json.dumps(step(3, 9.0)), json.dumps(step(4, 1.0)),
                  json.dumps({"kind": "eval", "step": 4, "loss": 1.5, "perplexity": 4.48})]
        path = self.write(lines)
        records = tr.read_records(path)
        self.assertEqual([r["step"] for r in records["step"]], [1, 2, 3, 4])
        self.assertEqual(records["step"][2]["loss"], 9.0)  # the resumed run's line
        self.assertEqual(records["eval"][0]["loss"], 1.5)
        out = path + ".png"
        self.addCleanup(lambda: os.path.exists(out) and os.unlink(out))
        tr.main([path, "--out", out])
        with open(out, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")

    def test_a_bad_line_is_named(self):
        path = self.write([json.dumps(step(1, 2.0)), "{not json"])
        with self.assertRaises(SystemExit) as e:
            tr.read_records(path)
        self.assertIn("line 2", str(e.exception))


if __name__ == "__main__":
    unittest.main()
