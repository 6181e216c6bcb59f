#!/usr/bin/env python3
"""The size limits of the code base: no source file over 800 lines, no function over 120.

Usage: size_limits.py [ROOT] [--max-file-lines N] [--max-function-lines N]

Prints each offender as `path:line: what (N lines, limit M)` and exits 1 when there is one, 0 when
there is none. Run by CTest as `arch_size_limits`.

What it reads: every *.cpp, *.hpp, *.h, *.cc, *.cu, *.cuh and *.py below ROOT (default: the
repository this script is in), skipping folders named build*, .git, __pycache__ and third_party.

How it counts:
- A file: its lines, all of them (comments and blank lines too).
- A Python function (or method): from its `def` line (decorators excluded) to its last line, as
  Python's own parser reports them; a nested function counts inside its parent and on its own.
- A C++/CUDA function: from the line of its opening brace to the line of its closing brace; a
  signature spread over several lines is not counted. The functions are found by matching braces
  after comments, string and character literals (raw strings and digit separators included) and
  preprocessor lines are blanked out. A brace opens a function when it stands in a namespace, class,
  struct or union (or at file scope) and the text before it, with any nested (...) and {...} groups
  collapsed, ends in `)` and optionally qualifiers (const, noexcept, override, final, mutable, a
  trailing `-> type`) or a constructor's initializer list. That takes in free and member functions,
  constructors, lambdas at namespace scope (e.g. a command's registration) and Catch2's TEST_CASE
  bodies; a lambda inside a function counts as part of that function. It does not know macros that
  open scopes or functions in unusual ways; this code base has none.
"""
import argparse
import ast
import os
import re
import sys

CPP_SUFFIXES = (".cpp", ".hpp", ".h", ".cc", ".cu", ".cuh")
SKIP_DIRS = ("build", ".git", "__pycache__", "third_party")
MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 120


def sources(root):
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not any(d.startswith(s) for s in SKIP_DIRS))
        for f in sorted(files):
            if f.endswith(CPP_SUFFIXES) or f.endswith(".py"):
                yield os.path.join(folder, f)


def blank_cpp(text):
    """The text with comments, literals and preprocessor lines replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if line_start and c == "#":  # a preprocessor line, with its continuations
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append(" \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
            continue
        line_start = False
        if c == "\n":
            line_start = True
            out.append(c)
            i += 1
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                out.append(" ")
                i += 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
        elif c == "R" and i + 1 < n and text[i + 1] == '"' and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            open_paren = text.find("(", i + 2)
            delim = text[i + 2 : open_paren]
            end = text.find(")" + delim + '"', open_paren)
            end = n if end < 0 else end + len(delim) + 2
            out.append('R"' + re.sub(r"[^\n]", " ", text[i + 2 : end - 1]) + '"')
            i = end
        elif c == '"' or (c == "'" and not (i > 0 and text[i - 1].isalnum())):  # a ' after a digit separates digits
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + (c if j < n else ""))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


SCOPE_HEAD = re.compile(r"^(template\s*<.*>\s*)?(namespace|class|struct|union|extern)\b|^$|^(inline\s+)?namespace\b", re.S)
FUNCTION_TAIL = re.compile(
    r"\)\s*(const|noexcept|override|final|mutable|&|&&|\s)*(->\s*[\w:<>,\s*&]+)?\s*"
    r"(:\s*[\w:<>]+\s*\(\)\s*(,\s*[\w:<>]+\s*\(\)\s*)*)?$",
    re.S,
)


def collapse_groups(head):
    """`f(a, (b)) : x_{y}` -> `f() : x_()`: the text outside any (...) or {...} group. In a head
    with a group left open (`reg(10, [](App& app)`: a lambda passed to a call), only the text
    after the innermost open one counts."""
    opened = []
    for i, ch in enumerate(head):
        if ch in "({":
            opened.append(i)
        elif ch in ")}" and opened:
            opened.pop()
    if opened:
        head = head[opened[-1] + 1 :]
    out, depth = [], 0
    for ch in head:
        if ch in "({":
            if depth == 0:
                out.append("(")
            depth += 1
        elif ch in ")}":
            depth = max(depth - 1, 0)
            if depth == 0:
                out.append(")")
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def function_name(collapsed_head):
    """The identifier before the parameters (a constructor's, not its initializers'); "lambda"."""
    init_list = re.search(r"\)\s*:(?!:)", collapsed_head)
    if init_list:
        collapsed_head = collapsed_head[: init_list.start() + 1]
    names = re.findall(r"([~\w:]+)\s*\(\)", collapsed_head)
    return names[-1] if names else "lambda"


def cpp_functions(text):
    """(first line, last line, name) of each function body, by the heuristic in this file's header."""
    code = blank_cpp(text)
    stack = []  # kinds of the open braces: 'scope', 'function' or 'other'
    starts = []  # line of each open brace, and the name of the function it opens
    head_from = 0  # where the text that may head the next brace starts
    line = 1
    found = []
    for pos, ch in enumerate(code):
        if ch == "\n":
            line += 1
        elif ch == ";" and (not stack or stack[-1] == "scope"):
            head_from = pos + 1
        elif ch == "{":
            kind = "other"
            if not stack or stack[-1] == "scope":
                head = " ".join(code[head_from:pos].split())
                if SCOPE_HEAD.search(head) and not head.endswith(")"):
                    kind = "scope"
                elif FUNCTION_TAIL.search(collapse_groups(head)):
                    kind = "function"
                    name = function_name(collapse_groups(head))
            stack.append(kind)
            starts.append((line, name if kind == "function" else ""))
            if kind != "other":
                head_from = pos + 1
        elif ch == "}" and stack:
            kind = stack.pop()
            first, name = starts.pop()
            if kind == "function":
                found.append((first, line, name))
            if kind != "other" and (not stack or stack[-1] == "scope"):
                head_from = pos + 1
    return found


def python_functions(text, path):
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as e:
        raise SystemExit(f"{path}: cannot parse: {e}")
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node.lineno, node.end_lineno


def check(root, max_file, max_function):
    offenders = []
    for path in sources(root):
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        rel = os.path.relpath(path, root)
        lines = text.splitlines()
        if len(lines) > max_file:
            offenders.append(f"{rel}:1: file ({len(lines)} lines, limit {max_file})")
        if path.endswith(".py"):
            spans = [(name, a, b) for name, a, b in python_functions(text, rel)]
        else:
            spans = [(name, a, b) for a, b, name in cpp_functions(text)]
        for name, a, b in spans:
            if b - a + 1 > max_function:
                offenders.append(f"{rel}:{a}: function {name} ({b - a + 1} lines, limit {max_function})")
    return offenders


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("root", nargs="?", default=os.path.dirname(os.path.dirname(here)))
    p.add_argument("--max-file-lines", type=int, default=MAX_FILE_LINES)
    p.add_argument("--max-function-lines", type=int, default=MAX_FUNCTION_LINES)
    a = p.parse_args()
    offenders = check(a.root, a.max_file_lines, a.max_function_lines)
    for o in offenders:
        print(o)
    print(f"{len(offenders)} over the limits (files {a.max_file_lines} lines, functions {a.max_function_lines})")
    return 1 if offenders else 0


if __name__ == "__main__":
    sys.exit(main())
