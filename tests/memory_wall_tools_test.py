#!/usr/bin/python3
"""The memory wall's spec files (experiments/memory_wall/spec.py: defaults, extends, null, the run config,
errors naming the file and key, every committed spec readable) and its timeline analysis
(experiments/memory_wall/lanes.py) on a synthetic step whose figures are known."""
import contextlib
import csv
import glob
import importlib.util
import io
import os
import tempfile
import unittest

import yaml

ROOT = os.environ.get("ZINF_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
HERE = os.path.join(ROOT, "experiments", "memory_wall")


def load(name):
    spec = importlib.util.spec_from_file_location("mw_" + name, os.path.join(HERE, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


sp = load("spec")
lanes = load("lanes")
GB = 1e9


class Specs(unittest.TestCase):
    def write(self, d, name, text):
        path = os.path.join(d, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_defaults_extends_and_null(self):
        with tempfile.TemporaryDirectory() as d:
            self.write(d, "parent.yaml", "factor: 1.5\nsteps: 2\nconfig:\n  aio: {block_size: 8388608, queue_depth: 64}\n"
                                         "  prefetch: {nvme_distance: 12}\n")
            child = self.write(d, "child.yaml", "extends: parent.yaml\nsteps: 4\nenvironment: {OPENBLAS_NUM_THREADS: 1}\n"
                                                "config:\n  aio: {queue_depth: null}\n  optimizer: {grad_clip: 0}\n")
            s = sp.resolved(child)
            self.assertEqual((s["factor"], s["steps"], s["checkpoint"]), (1.5, 4, True))
            c = s["config"]
            self.assertEqual(c["prefetch"], {"nvme_distance": 12, "h2d_distance": 2, "allgather_distance": 1})
            self.assertEqual(c["optimizer"]["grad_clip"], 0)
            self.assertEqual(c["optimizer"]["sub_group_size"], 10000000)  # BASE_CONFIG's, kept beside the override
            config = yaml.safe_load(sp.run_config(s, 1 << 20, 32))
            self.assertEqual(config["aio"], {"tasks_in_flight": 4, "block_size": 8388608, "queue_depth": 32})
            self.assertIn("params, gradients, optimizer on nvme", config["description"])
            env = dict(line.split("=", 1) for line in sp.env_lines(s, "child"))
            self.assertEqual((env["MW_STEPS"], env["MW_CHECKPOINT"], env["MW_GRAD_CLIP"]), ("4", "1", "0"))
            self.assertEqual((env["MW_FIXED_BLOCK"], env["MW_FIXED_DEPTH"]), ("8388608", "''"))
            self.assertEqual(env["MW_ENVIRONMENT"], "OPENBLAS_NUM_THREADS=1")

    def test_errors_name_the_file_and_the_key(self):
        with tempfile.TemporaryDirectory() as d:
            cases = [("typo.yaml", "facter: 2\n", "unknown key 'facter'"),
                     ("type.yaml", "steps: two\n", "steps: expected int"),
                     ("bool.yaml", "steps: true\n", "steps: expected int"),
                     ("kernels.yaml", "openblas_kernels: fast\n", "expected native or keep"),
                     ("config.yaml", "config: [1]\n", "config: expected a mapping"),
                     ("missing.yaml", "extends: nowhere.yaml\n", "nowhere.yaml")]
            for name, text, message in cases:
                with self.subTest(name):
                    path = self.write(d, name, text)
                    with self.assertRaises(sp.SpecError) as e:
                        sp.resolved(path)
                    self.assertIn(name if name != "missing.yaml" else "nowhere.yaml", str(e.exception))
                    self.assertIn(message, str(e.exception))
            loop = self.write(d, "a.yaml", "extends: b.yaml\n")
            self.write(d, "b.yaml", "extends: a.yaml\n")
            with self.assertRaises(sp.SpecError) as e:
                sp.resolved(loop)
            self.assertIn("loop", str(e.exception))

    def test_every_committed_spec_reads(self):
        specs = sorted(glob.glob(os.path.join(HERE, "specs", "*.yaml")))
        self.assertGreater(len(specs), 5)
        for path in specs:
            with self.subTest(os.path.basename(path)):
                s = sp.resolved(path)
                self.assertGreater(s["factor"], 0)
                yaml.safe_load(sp.run_config(s, 1 << 20, 32))

    def test_env_is_shell(self):
        with tempfile.TemporaryDirectory() as d:
            path = self.write(d, "s.yaml", "environment: {X: 'a b'}\n")
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                self.assertEqual(sp.main(["env", path]), 0)
            self.assertIn("MW_ENVIRONMENT='X='\"'\"'a b'\"'\"''", out.getvalue())
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                self.assertEqual(sp.main(["env", self.write(d, "bad.yaml", "nope: 1\n")]), 2)
            self.assertIn("bad.yaml", err.getvalue())


# A 10 s step on rank 0 (rank 1's tasks are ignored): forward compute 0-2 s, backward compute 3-7 s (a
# 1 s gap that ends as a parameter's all-gather ends), an NVMe read of 4 GB over 0-2 s, a write of 3 GB
# over 5-8 s, CPU Adam 7-9 s: the tail is 7-9 s.
ROWS = [
    ("compute", "forward", "forward h.0.attn mb0", 0, 2, 0),
    ("nvme_read", "nvme_read", "nvme_read h.1.attn param (bwd) mb0", 0, 2, 4 * GB),
    ("comm", "allgather", "allgather h.1.attn param (bwd) mb0", 2.5, 3, 0),
    ("compute", "backward", "backward h.1.attn mb0", 3, 7, 0),
    ("nvme_write", "nvme_write", "nvme_write h.1 grad mb0", 5, 8, 3 * GB),
    ("cpu_optim", "optimizer_step", "adam sg0", 7, 9, 0),
    ("compute", "forward", "forward on rank 1", 0, 10, 0),
]


class Lanes(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "t.csv")
        with open(self.path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["rank", "lane", "task", "kind", "label", "start", "end", "bytes", "flops"])
            for i, (lane, kind, label, s, e, b) in enumerate(ROWS):
                w.writerow([1 if "rank 1" in label else 0, lane, i, kind, label, 100 + s, 100 + e, int(b), 0])
        self.rows = lanes.load(self.path)

    def tearDown(self):
        self.dir.cleanup()

    def test_phases(self):
        p = {x["phase"]: x for x in lanes.phase_table(self.rows)}
        self.assertAlmostEqual(p["forward"]["length"], 3)
        self.assertAlmostEqual(p["forward"]["compute"], 2)
        self.assertAlmostEqual(p["forward"]["read"], 4 * GB)
        self.assertAlmostEqual(p["forward"]["disk_idle"], 1)
        self.assertAlmostEqual(p["backward"]["length"], 4)
        self.assertAlmostEqual(p["backward"]["written"], 2 * GB)  # 5-7 s of the write's 5-8 s
        self.assertAlmostEqual(p["backward"]["disk_busy"], 2)
        self.assertAlmostEqual(p["backward"]["disk_idle"], 2)
        self.assertAlmostEqual(p["tail"]["length"], 2)  # 7-9 s (rank 0's step ends with Adam at 9 s)
        self.assertAlmostEqual(p["tail"]["written"], 1 * GB)

    def test_gaps_by_cause(self):
        idle, causes = lanes.compute_gaps(self.rows)
        self.assertAlmostEqual(idle, 1.0)
        self.assertAlmostEqual(causes["param"], 1.0)
        self.assertEqual(causes["grad write"], 0)

    def test_chain_of_the_waited_parameter(self):
        found = lanes.parameter_chains(self.rows, min_gap=0.5)
        self.assertEqual(len(found), 1)
        lo, hi, label, chain, _ = found[0]
        self.assertEqual((lo, hi, label), (2, 3, "backward h.1.attn mb0"))
        self.assertEqual([c["kind"] for c in chain], ["nvme_read", "allgather"])

    def test_bins(self):
        b = lanes.bins(self.rows, 1.0)
        self.assertAlmostEqual(b[0]["read_gbps"], 2.0)
        self.assertAlmostEqual(b[0]["compute"], 1.0)
        self.assertAlmostEqual(b[2]["compute"], 0.0)
        self.assertAlmostEqual(b[6]["write_gbps"], 1.0)

    def test_cores_while_one_lane_alone_is_busy(self):
        cases = lanes.core_cases(self.rows, slot=0.5)
        t, moved, tasks = cases[("compute only", "nvme_read")]
        self.assertAlmostEqual((t, moved, tasks), (2.0, 4 * GB, 1))
        t, moved, _ = cases[("compute only", "nvme_write")]  # 5-7 s
        self.assertAlmostEqual((t, moved), (2.0, 2 * GB))
        self.assertNotIn(("cores free", "nvme_read"), cases)
        t, moved, _ = cases[("other CPU only", "nvme_write")]  # Adam 7-8 s while the write runs
        self.assertAlmostEqual((t, moved), (1.0, 1 * GB))

    def test_command_line(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            for what in ("phases", "gaps", "cores"):
                lanes.main([what, self.path])
            lanes.main(["chain", self.path, "--min-gap", "0.5"])
            lanes.main(["bins", self.path, "--bin", "2"])
        text = out.getvalue()
        self.assertIn("backward    4.00 s", text)
        self.assertIn("param 1.00 s", text)
        self.assertIn("gap 2.00-3.00 s", text)


if __name__ == "__main__":
    unittest.main()
