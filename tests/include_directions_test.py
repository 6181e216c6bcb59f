#!/usr/bin/python3
"""experiments/arch/include_directions.py on small trees: core including itself and formats
including core pass; core including formats (or any other folder) fails naming the file and line;
a library linking a folder above it fails naming its CMakeLists.txt; a third-party header in a
folder is not a zinf include; a tree with no include in core/ fails (the check would be blind)."""
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.environ.get("ZINF_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
CHECKER = os.path.join(ROOT, "experiments", "arch", "include_directions.py")

CORE = '#pragma once\n#include <string>\n#include "core/graph.hpp"\nnamespace zinf::core {}\n'
FORMATS = '#include "formats/run_config_reader.hpp"\n#include "core/run_config.hpp"\n#include <fmt/format.h>\n'


def check(files):
    """The checker's exit status and report on a tree of `files` (path -> text), removed after."""
    with tempfile.TemporaryDirectory() as d:
        for rel, text in files.items():
            path = os.path.join(d, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        r = subprocess.run([sys.executable, CHECKER, d], capture_output=True, text=True)
    return r.returncode, r.stdout


class IncludeDirections(unittest.TestCase):
    def test_layers_in_direction_pass(self):
        rc, out = check({"core/run_config.hpp": CORE, "formats/run_config_reader.cpp": FORMATS,
                         "cli/main.cpp": '#include "tune/tuner.hpp"\n#include "formats/hjson.hpp"\n'})
        self.assertEqual(rc, 0, out)
        self.assertIn("5 includes of zinf headers", out)
        self.assertIn("all in direction", out)

    def test_core_including_formats_fails(self):
        bad = CORE + '\n#include "formats/config_reader.hpp"\n'
        rc, out = check({"core/model_spec.cpp": bad, "formats/run_config_reader.cpp": FORMATS})
        self.assertEqual(rc, 1, out)
        self.assertIn("core/model_spec.cpp:6: core/ includes formats/ (core/ may include core)", out)

    def test_formats_including_models_fails(self):
        rc, out = check({"core/a.hpp": CORE, "formats/hf_config.cpp": '#include "models/gpt.hpp"\n'})
        self.assertEqual(rc, 1, out)
        self.assertIn("formats/hf_config.cpp:1: formats/ includes models/ (formats/ may include core, formats)", out)

    def test_a_link_against_the_direction_fails(self):
        cmake = "add_library(zinf_core STATIC x.cpp)\ntarget_link_libraries(zinf_core PUBLIC\n  zinf_formats yaml-cpp)\n"
        rc, out = check({"core/a.hpp": CORE, "core/CMakeLists.txt": cmake})
        self.assertEqual(rc, 1, out)
        self.assertIn("core/CMakeLists.txt:3: core/ links zinf_formats", out)
        fine = "target_link_libraries(zinf_formats PUBLIC zinf_core yaml-cpp)\n"
        self.assertEqual(check({"core/a.hpp": CORE, "formats/CMakeLists.txt": fine})[0], 0)

    def test_no_include_in_core_fails(self):
        rc, out = check({"core/a.hpp": "#pragma once\n#include <string>\n", "formats/b.cpp": FORMATS})
        self.assertEqual(rc, 1, out)
        self.assertIn("the check no longer sees core/", out)

    def test_the_repository_passes(self):
        r = subprocess.run([sys.executable, CHECKER, ROOT], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout)


if __name__ == "__main__":
    unittest.main()
