#!/usr/bin/python3
"""experiments/arch/backend_reads_program.py on small trees: the plan read in a backend's
constructor, uses_nvme and the plugin's factory passes; the plan read in a task handler, kept as a
member, or a placement read from the run config fails, naming the file, line and function; a
tree where no set-up reads the plan fails too (the check would be blind)."""
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.environ.get("ZINF_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
CHECKER = os.path.join(ROOT, "experiments", "arch", "backend_reads_program.py")

HEADER = r'''#pragma once
#include "core/plan.hpp"
namespace zinf::engine {
class B {
public:
  B(const core::Program& p, const core::Plan& plan, int rank);
  bool uses_nvme(const core::Plan& plan) const;
  void run(const core::Task& t);
};
std::unique_ptr<B> (*make)(const core::Program& program, const core::Plan& plan);
}  // namespace zinf::engine
'''

SETUP = r'''#include "engine/backend/b.hpp"
namespace zinf::engine {
B::B(const core::Program& p, const core::Plan& pl, int rank) : P(&p), rank_(rank) {
  // plan.params in a comment, and "plan.params" in a string, are not reads
  home_.init(pl.params, "plan.params");
  if (uses_nvme(pl)) store_ = make_store();
}
bool B::uses_nvme(const core::Plan& plan) const { return plan.params == Tier::Nvme; }
std::unique_ptr<B> make_backend(const core::Program& program, const core::Plan& plan) {
  return std::make_unique<B>(program, plan, 0);
}
void B::run(const core::Task& t) {
  if (t.from == Tier::Nvme) read(t.buffer);
}
}  // namespace zinf::engine
'''


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


class BackendReadsProgram(unittest.TestCase):
    def test_setup_reads_pass(self):
        rc, out = check({"engine/backend/b.hpp": HEADER, "engine/backend/b.cpp": SETUP})
        self.assertEqual(rc, 0, out)
        self.assertIn("4 reads of the plan, all in set-up", out)

    def test_a_class_templates_constructor_is_set_up(self):
        templ = ("#include \"engine/backend/b.hpp\"\nnamespace zinf::engine {\ntemplate <class S>\n"
                 "T<S>::T(const core::Program& p, const core::Plan& pl) : P(&p) {\n  home_.init(pl.params);\n}\n"
                 "template <class S>\nvoid T<S>::run(const core::Task& t, const core::Plan& plan) {\n"
                 "  if (plan.params == Tier::Nvme) read(t.buffer);\n}\n}  // namespace zinf::engine\n")
        rc, out = check({"engine/backend/t.cpp": templ})
        self.assertEqual(rc, 1, out)
        self.assertNotIn("t.cpp:5", out)
        self.assertIn("t.cpp:9:", out)

    def test_a_handler_reading_the_plan_fails(self):
        handler = SETUP.replace("if (t.from == Tier::Nvme)", "if (plan_.optimizer == Tier::Nvme)")
        header = HEADER.replace("  void run(const core::Task& t);", "  void run(const core::Task& t);\n  const core::Plan& plan_;")
        rc, out = check({"engine/backend/b.hpp": header, "engine/backend/cpu/b.cpp": handler})
        self.assertEqual(rc, 1, out)
        self.assertIn("engine/backend/b.hpp:9: keeps the plan as a member (plan_)", out)
        self.assertIn("engine/backend/cpu/b.cpp:13: B::run reads the plan (plan_) outside the homes' set-up", out)

    def test_a_plan_passed_to_a_helper_fails(self):
        helper = SETUP.replace("void B::run(const core::Task& t) {",
                               "void B::grads(const core::Plan& plan, int n) {\n  stage(n, plan);\n}\n"
                               "void B::run(const core::Task& t) {")
        rc, out = check({"engine/backend/b.cpp": helper})
        self.assertEqual(rc, 1, out)
        self.assertIn("b.cpp:13: B::grads reads the plan (plan) outside", out)

    def test_a_placement_from_the_run_config_fails(self):
        cfg = SETUP.replace("if (t.from == Tier::Nvme)", "if (opt.config.gradients.tier == Tier::Nvme)")
        rc, out = check({"engine/backend/b.cpp": cfg})
        self.assertEqual(rc, 1, out)
        self.assertIn("b.cpp:13: reads the run config's placement of gradients", out)
        fine = SETUP.replace("if (t.from == Tier::Nvme)", "if (opt.config.optimizer_timing == Timing::Overlap)")
        self.assertEqual(check({"engine/backend/b.cpp": fine})[0], 0)

    def test_no_read_at_all_fails(self):
        rc, out = check({"engine/backend/b.cpp": "void f() {}\n"})
        self.assertEqual(rc, 1, out)
        self.assertIn("no read of the plan found", out)

    def test_the_repository_passes(self):
        r = subprocess.run([sys.executable, CHECKER, ROOT], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout)


if __name__ == "__main__":
    unittest.main()
