#!/usr/bin/python3
"""experiments/arch/text_rules.py on small trees (no git: every file is read): machine paths and
scratch folders found, mktemp templates and system paths let through; work-tracker words found,
technical words (waves of sub-groups, Catch::Session) let through; README over 300 lines and a long
table cell found; binaries skipped; exit status and report."""
import importlib.util
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.environ.get("ZINF_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
CHECKER = os.path.join(ROOT, "experiments", "arch", "text_rules.py")
spec = importlib.util.spec_from_file_location("text_rules", CHECKER)
tr = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tr)

# Offending text is assembled here so that this file does not offend itself.
WORK = "/wo" + "rk/main/configs/x.yaml"
SCRATCH = "/tmp/zi" + "nf-published-abc123/point/model.yaml"
ISSUE = "iss" + "ue 17"
SESSION = "this sess" + "ion"
WAVE = "wa" + "ve 2"
ITEM = "it" + "em 4"


class TextRules(unittest.TestCase):
    def tree(self, files):
        d = tempfile.TemporaryDirectory()
        for name, content in files.items():
            path = os.path.join(d.name, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb" if isinstance(content, bytes) else "w") as f:
                f.write(content)
        return d

    def test_machine_paths(self):
        with self.tree({"a.csv": f"model,config\ngpt,{WORK}\n", "b.md": f"ran `zinf sim --model {SCRATCH}`\n",
                        "ok.sh": 'D=$(mktemp -d /var/tmp/zinf-e2e-XXXXXX)\nls /usr/local/cuda /proc/self /tmp\n',
                        "ok.cpp": 'fmt::format("/tmp/zinf-profile-comm-{}.txt", pid);  // a file, not a folder\n'}) as d:
            found = tr.check(d, {"paths"})
        self.assertEqual(sorted(f.split(":")[0] for f in found), ["a.csv", "b.md"])
        self.assertIn("an absolute path of a machine", found[0])

    def test_tracker_words(self):
        text = (f"// {ISSUE}: the fix\n# {SESSION} measured it\n{WAVE} did this\n{ITEM} is open\n"
                "see MACH" + "INE.md\n")
        ok = ("optimizer sub-groups move in waves; the next wave of reads waits\n"
              "int failed = Catch::Session().run(argc, argv);\nan issue with the disk\n")
        with self.tree({"notes.md": text, "fine.cpp": ok}) as d:
            found = tr.check(d, {"words"})
        whats = sorted(f.split(": ")[1] for f in found)
        self.assertEqual(whats, sorted(["an issue number", "a work session", "a wave of work", "a tracker's item",
                                        "a note outside the repository"]))
        self.assertTrue(all(f.startswith("notes.md:") for f in found))

    def test_docs_shape(self):
        long_cell = "x" * 301
        with self.tree({"README.md": "line\n" * 301, "docs/a.md": f"| a | b |\n|---|---|\n| {long_cell} | ok |\n",
                        "docs/b.md": "| a | b \\| c |\n|---|---|\n| " + "y" * 300 + " | z |\n",
                        "notes.txt": f"| {long_cell} |\n"}) as d:
            found = tr.check(d, {"docs"})
        self.assertEqual(len(found), 2, found)
        self.assertTrue(found[0].startswith("README.md:301:") or found[1].startswith("README.md:301:"))
        self.assertTrue(any(f.startswith("docs/a.md:3:") and "301 characters" in f for f in found))

    def test_binaries_and_build_folders_are_skipped(self):
        with self.tree({"img.png": f"{WORK}".encode(), "data.bin": b"\0" + WORK.encode(),
                        "build/out.txt": WORK, "build-asan/log": WORK}) as d:
            self.assertEqual(tr.check(d, {"paths"}), [])

    def test_command_line(self):
        with self.tree({"clean.md": "nothing to see\n"}) as d:
            r = subprocess.run([sys.executable, CHECKER, d], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("0 finding(s)", r.stdout)
        with self.tree({"bad.md": f"{ISSUE}\n"}) as d:
            r = subprocess.run([sys.executable, CHECKER, d, "--check", "words"], capture_output=True, text=True)
            self.assertEqual(r.returncode, 1)
            self.assertIn("bad.md:1: an issue number", r.stdout)
            r = subprocess.run([sys.executable, CHECKER, d, "--check", "nonsense"], capture_output=True, text=True)
            self.assertEqual(r.returncode, 2)


if __name__ == "__main__":
    unittest.main()
