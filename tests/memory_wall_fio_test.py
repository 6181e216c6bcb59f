#!/usr/bin/python3
"""experiments/memory_wall/disk_refs.py's fio reference on real files: reads, then rewrites in place.
Needs fio (scripts/setup.sh installs it): without it the test exits 77, which CTest reports as skipped."""
import importlib.util
import os
import shutil
import sys
import tempfile
import unittest

ROOT = os.environ.get("ZINF_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
spec = importlib.util.spec_from_file_location("mw_refs", os.path.join(ROOT, "experiments", "memory_wall", "disk_refs.py"))
refs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(refs)


class FioReference(unittest.TestCase):
    def test_fio_reads_and_rewrites_the_files(self):
        with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/var/tmp")) as d:
            files = []
            for i in range(2):
                files.append(os.path.join(d, f"s{i}.zt"))
                with open(files[-1], "wb") as f:
                    f.write(os.urandom(8 << 20))
            before = [os.path.getsize(f) for f in files]
            read, write = refs.fio_rate(files, "read", 1 << 20, 4), refs.fio_rate(files, "write", 1 << 20, 4)
            self.assertGreater(read, 1e6)
            self.assertGreater(write, 1e6)
            self.assertEqual([os.path.getsize(f) for f in files], before)  # rewritten in place, not grown


if __name__ == "__main__":
    if not shutil.which("fio"):
        print("SKIPPED: fio is not installed (scripts/setup.sh installs it)")
        sys.exit(77)
    unittest.main()
