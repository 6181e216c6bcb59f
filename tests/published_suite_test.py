#!/usr/bin/python3
"""experiments/published/run.py's counting and bookkeeping: the three FLOP formulas on hand-computed
cases, defaults and missing fields, each point's DeepSpeed release, error summaries that keep refused
points apart."""
import importlib.util
import os
import tempfile
import unittest

import yaml

ROOT = os.environ.get("ZINF_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
spec = importlib.util.spec_from_file_location("published", os.path.join(ROOT, "experiments", "published", "run.py"))
published = importlib.util.module_from_spec(spec)
spec.loader.exec_module(published)


class Counting(unittest.TestCase):
    def point(self, **kw):
        p = {"id": "p", "kind": "prediction", "figure": "f", "source": "s", "batch": 8, "config": {},
             "measured_tflops": 40, "model": {"layers": 2, "hidden": 64, "heads": 4}}
        p.update(kw)
        return published.expand({"defaults": {"seq": 1024, "vocab": 50257, "hw": "dgx2-v100", "nodes": 1,
                                              "tensor_parallel": 1, "flops": "zero-infinity"}, "points": [p]})[0]

    def test_zero_infinity_count(self):
        p = self.point()
        self.assertEqual(published.params_of(p["model"]), 12 * 2 * 64 * 64)
        self.assertEqual(published.flops_per_sample(p), 8 * 1024 * 12 * 2 * 64 * 64)
        # 10 samples/s over 2 GPUs: 5 samples/s each.
        self.assertAlmostEqual(published.predicted_tflops(p, 10.0, 2), 5 * 8 * 1024 * 98304 / 1e12)

    def test_megatron_count(self):
        p = self.point(flops="megatron", model={"layers": 40, "hidden": 1536, "heads": 16, "vocab": 51200})
        s, l, h, v = 1024, 40, 1536, 51200
        self.assertAlmostEqual(published.flops_per_sample(p), 96 * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h)))

    def test_mosaicml_count(self):
        # llm-foundry's MFU numerator: 3 x 2 x params x seq + 3 x layers x 2 x 2 x hidden x seq^2, params as the row counts them.
        p = self.point(flops="mosaicml", seq=2048, num_params=6658859008,
                       model={"layers": 32, "hidden": 4096, "heads": 32, "vocab": 50368})
        self.assertAlmostEqual(published.flops_per_sample(p), 6 * 6658859008 * 2048 + 12 * 32 * 4096 * 2048 ** 2)
        # The README's 7B row on 8 H100: 41 samples/s at MFU 46.44 % of 989 TFLOP/s (41.0 rounded in the table).
        self.assertAlmostEqual(published.predicted_tflops(p, 41.0, 8) / 989, 0.4644, delta=0.01)
        with self.assertRaisesRegex(ValueError, "needs 'num_params'"):
            published.flops_per_sample(self.point(flops="mosaicml"))

    def test_micro_batch_and_accumulation(self):
        # batch is samples per GPU per step; micro_batch the model's, and the config accumulates the rest.
        p = self.point(batch=12, micro_batch=6, config={"zero_stage": 3, "gradient_accumulation": 2},
                       model={"layers": 2, "hidden": 64, "heads": 4, "attention": "flash"})
        with tempfile.TemporaryDirectory() as folder:
            paths = published.write_inputs(p, folder)
            with open(paths["model"]) as f:
                model = yaml.safe_load(f)
            with open(paths["config"]) as f:
                config = yaml.safe_load(f)
        self.assertEqual(model["micro_batch"], 6)
        self.assertEqual(model["attention"], "flash")
        self.assertEqual(config["gradient_accumulation"], 2)
        bad = self.point(batch=12, micro_batch=6, config={"gradient_accumulation": 3})
        with tempfile.TemporaryDirectory() as folder:
            with self.assertRaisesRegex(ValueError, "is not batch 12"):
                published.write_inputs(bad, folder)

    def test_ranged_inputs_need_sourced_bounds(self):
        with self.assertRaisesRegex(ValueError, "needs 'source'"):
            published.ranged_inputs(self.point(ranged={"node.nic.bandwidth": {"low": "200 Gb/s", "high": "400 Gb/s"}}))
        with self.assertRaisesRegex(ValueError, "must be a mapping"):
            published.ranged_inputs(self.point(ranged={"node.nic.bandwidth": "200 Gb/s"}))
        p = self.point(ranged={"node.nic.bandwidth": {"low": "200 Gb/s", "high": "400 Gb/s", "source": "datasheets"}})
        self.assertEqual(published.ranged_inputs(p), [("node.nic.bandwidth", "200 Gb/s", "400 Gb/s", "datasheets")])
        # The table says whether the measurement falls inside, and the summary counts it.
        rows = [{"id": "a", "kind": "prediction", "status": "ok", "measured_tflops": 40, "predicted_tflops": 38,
                 "error": -0.05, "tensor_parallel": 1, "range_lo": 36.0, "range_hi": 44.0},
                {"id": "b", "kind": "prediction", "status": "ok", "measured_tflops": 40, "predicted_tflops": 30,
                 "error": -0.25, "tensor_parallel": 1, "range_lo": 28.0, "range_hi": 32.0}]
        text = published.table(rows)
        self.assertIn("input range 36.0-44.0: covers the measurement", text)
        self.assertIn("input range 28.0-32.0: misses the measurement", text)
        self.assertIn("1 of 2 measurements inside their input range (median half-width 8.3 %)", text)

    def test_bad_points(self):
        with self.assertRaisesRegex(ValueError, "missing 'measured_tflops'"):
            published.expand({"points": [{"id": "x", "kind": "prediction", "figure": "f", "source": "s", "model": {},
                                          "batch": 1, "config": {}}]})
        with self.assertRaisesRegex(ValueError, "kind must be"):
            self.point(kind="fitted")
        with self.assertRaisesRegex(ValueError, "flops must be"):
            published.flops_per_sample(self.point(flops="other"))

    def test_deepspeed_release_of_a_point(self):
        # A point names the DeepSpeed release and config it ran with; the release becomes the run config's.
        with self.assertRaisesRegex(ValueError, "deepspeed needs 'config'"):
            self.point(deepspeed={"release": "0.3.15"})
        p = self.point(deepspeed={"release": "0.3.15", "config": "examples abc123, ds.json"},
                       config={"zero_stage": 3, "deepspeed_behaviour": {"trace_misaligned": False}})
        with tempfile.TemporaryDirectory() as folder:
            paths = published.write_inputs(p, folder)
            with open(paths["config"]) as f:
                config = yaml.safe_load(f)
        self.assertEqual(config["deepspeed_release"], "0.3.15")
        self.assertEqual(config["deepspeed_behaviour"], {"trace_misaligned": False})
        with tempfile.TemporaryDirectory() as folder:
            with open(published.write_inputs(self.point(), folder)["config"]) as f:
                self.assertNotIn("deepspeed_release", yaml.safe_load(f))

    def test_summary_keeps_refused_apart(self):
        rows = [{"kind": "prediction", "status": "ok", "error": 0.1}, {"kind": "prediction", "status": "ok", "error": -0.3},
                {"kind": "prediction", "status": "refused", "error": ""},
                {"kind": "calibration", "status": "ok", "error": 0.05}]
        s = published.summary(rows, "prediction")
        self.assertEqual((s["points"], s["refused"]), (2, 1))
        self.assertAlmostEqual(s["median"], 0.2)
        self.assertAlmostEqual(s["largest"], 0.3)
        self.assertEqual(published.summary(rows, "calibration")["refused"], 0)

    def test_profile_overrides(self):
        profile = {"name": "hw", "node": {"gpus": 16, "gpu": {"memory": "32 GiB", "peak_flops": "125 TFLOP/s"}}}
        p = published.with_overrides(profile, {"gpus_per_node": 1, "gpu_memory": "2 TiB"})
        self.assertEqual((p["node"]["gpus"], p["node"]["gpu"]["memory"]), (1, "2 TiB"))
        self.assertEqual(p["node"]["gpu"]["peak_flops"], "125 TFLOP/s")
        self.assertEqual(p["name"], "hw-1gpu-2TiB")
        # The profile read from disk is left as it was.
        self.assertEqual((profile["node"]["gpus"], profile["node"]["gpu"]["memory"], profile["name"]), (16, "32 GiB", "hw"))
        self.assertEqual(published.with_overrides(profile, {}), profile)

    def test_table_marks_points_outside_their_range(self):
        rows = [{"id": "a", "kind": "calibration", "status": "ok", "measured_tflops": 70, "predicted_tflops": 83.0,
                 "error": 0.186, "tensor_parallel": 1, "measured_range": "62-78", "in_range": False},
                {"id": "b", "kind": "calibration", "status": "ok", "measured_tflops": 70, "predicted_tflops": 71.0,
                 "error": 0.014, "tensor_parallel": 1, "measured_range": "62-78", "in_range": True},
                {"id": "c", "kind": "calibration", "status": "ok", "measured_tflops": 39, "predicted_tflops": 39.0,
                 "error": 0.0, "tensor_parallel": 2, "measured_range": "", "in_range": False}]
        text = published.table(rows)
        self.assertIn("| a | calibration | 70 | 83.0 |  | +19 % | published range 62-78: OUTSIDE |", text)
        self.assertIn("| b | calibration | 70 | 71.0 |  | +1 % | published range 62-78: inside |", text)
        self.assertIn("| c | calibration | 39 | 39.0 |  | +0 % | TP 2 |", text)
        self.assertIn("1 of 2 inside their published range", text)

    def test_table_shows_the_band_and_what_moves_the_point(self):
        rows = [{"id": "p", "kind": "prediction", "status": "ok", "measured_tflops": 49, "predicted_tflops": 58.0,
                 "band_p10": 56.0, "band_p90": 59.5, "error": 0.18, "tensor_parallel": 4, "slowest_gpu": 1.046,
                 "tree_tflops": 47.0},
                {"id": "q", "kind": "prediction", "status": "ok", "measured_tflops": 49, "predicted_tflops": 58.0,
                 "band_p10": 56.0, "band_p90": 59.5, "error": 0.18, "tensor_parallel": 1, "slowest_gpu": 1.0}]
        text = published.table(rows)
        # The tree reaches below the measurement while the non-blocking band stays above it: the range covers it.
        self.assertIn("| p | prediction | 49 | 58.0 | 56.0-59.5 | +18 % | TP 4; band covers the measurement; "
                      "slowest GPU x1.046; tree 47.0 |", text)
        self.assertIn("| q | prediction | 49 | 58.0 | 56.0-59.5 | +18 % | band misses the measurement |", text)


if __name__ == "__main__":
    unittest.main()
