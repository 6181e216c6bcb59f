#!/usr/bin/python3
"""experiments/arch/size_limits.py's heuristics on small sources: which braces open a C++ function
(free and member functions, constructors with initializer lists, namespace-scope lambdas, Catch2
test cases; not classes, namespaces, enums, initializers or a function's inner blocks), what it
blanks (comments, strings, raw strings, characters, digit separators, preprocessor lines), Python
functions by the parser, and the command's exit status and report over a tree."""
import importlib.util
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.environ.get("ZINF_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
CHECKER = os.path.join(ROOT, "experiments", "arch", "size_limits.py")
spec = importlib.util.spec_from_file_location("size_limits", CHECKER)
sl = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sl)

CPP = r'''#include <map>
#define BRACE {
namespace zinf::core {
namespace {
enum class Tier { Device, Host };
const std::map<int, int> kTable = {{1, 2}, {3, 4}};
struct Shape {
  int x{3};
  int area() const { return x * x; }
  Shape(int a, int b) : x{a + b}, y_(b) {
    if (a) {
      x = 1;
    }
  }
  auto twice() -> int {
    return 2 * x;
  }
};
}  // namespace
int64_t big() {
  const char* s = "}{";
  const char c = '{';
  const int64_t n = 100'000;  // digit separators
  /* } */
  const char* raw = R"x({ "a": })x";
  auto f = [&](int k) {
    return k + n;
  };
  return f(1);
}
Registration reg(10, [](CLI::App& app) {
  app.name();
});
TEST_CASE("a } in a name", "[x]") {
  CHECK(1);
}
}  // namespace zinf::core
'''


class CppFunctions(unittest.TestCase):
    def test_finds_each_function_and_nothing_else(self):
        spans = sl.cpp_functions(CPP)
        lines = CPP.splitlines()
        starts = [lines[a - 1].strip() for a, _, _ in spans]
        self.assertEqual(starts, [
            "int area() const { return x * x; }",
            "Shape(int a, int b) : x{a + b}, y_(b) {",
            "auto twice() -> int {",
            "int64_t big() {",
            "Registration reg(10, [](CLI::App& app) {",
            'TEST_CASE("a } in a name", "[x]") {',
        ])
        self.assertEqual([b - a + 1 for a, b, _ in spans], [1, 5, 3, 11, 3, 3])
        self.assertEqual([name for _, _, name in spans], ["area", "Shape", "twice", "big", "lambda", "TEST_CASE"])

    def test_blanking_keeps_lines_and_drops_braces_in_literals(self):
        blank = sl.blank_cpp(CPP)
        self.assertEqual(blank.count("\n"), CPP.count("\n"))
        self.assertNotIn("BRACE", blank)
        big = blank.splitlines()[19:30]  # big(), lines 20 to 30
        self.assertEqual(sum(l.count("{") for l in big), sum(l.count("}") for l in big))


class Command(unittest.TestCase):
    def run_on(self, files, *args):
        with tempfile.TemporaryDirectory() as root:
            for name, text in files.items():
                path = os.path.join(root, name)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w") as f:
                    f.write(text)
            return subprocess.run([sys.executable, CHECKER, root, *args], capture_output=True, text=True)

    def test_offenders_are_named_and_fail(self):
        long_cpp = "void f() {\n" + "  g();\n" * 10 + "}\n"
        long_py = "def h():\n" + "    x = 1\n" * 10
        r = self.run_on({"a/long.cpp": long_cpp, "b/long.py": long_py, "build-x/skipped.cpp": long_cpp,
                         "short.hpp": "int k() { return 1; }\n"}, "--max-function-lines", "8", "--max-file-lines", "11")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("a/long.cpp:1: function f (12 lines, limit 8)", r.stdout)
        self.assertIn("a/long.cpp:1: file (12 lines, limit 11)", r.stdout)
        self.assertIn("b/long.py:1: function h (11 lines, limit 8)", r.stdout)
        self.assertNotIn("skipped", r.stdout)
        self.assertNotIn("short.hpp", r.stdout)

    def test_a_tree_within_the_limits_passes(self):
        r = self.run_on({"a.cpp": "void f() {\n  g();\n}\n", "b.py": "def h():\n    return 1\n"})
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("0 over the limits", r.stdout)


if __name__ == "__main__":
    unittest.main()
