#!/usr/bin/env python3
"""The backends read only the Program: no file under engine/backend/ reads the plan's tiers outside
the set-up of its homes.

Usage: backend_reads_program.py [ROOT]

Prints each offender as `path:line: what` and exits 1 when there is one, 0 when there is none. Run
by CTest as `arch_backend_reads_program` (and its own test, tests/backend_reads_program_test.py).

What it checks, in every *.cpp, *.hpp, *.h, *.cu and *.cuh below ROOT/engine/backend (comments and
literals blanked out, functions found as experiments/arch/size_limits.py finds them):
- a name declared as a core::Plan (a parameter, a variable, a member) is used only inside a set-up
  function: a constructor (of a class or a class template), `uses_nvme` (whether the homes need an
  NVMe store), `make_backend` (the plugin's factory) or `make_gpt_cpu_backend` (which picks the CPU
  backend's storage type), both of which only hand the plan to a constructor;
- no class keeps the plan as a member (a `Plan& name;` or `Plan name;` outside a function);
- no file reads a state's placement from the run config (`config.params`, `.gradients`,
  `.optimizer`, `.checkpoints`, `.activation_tier`): the plan decided those, the Program states them.
It also fails when it finds no read of the plan at all: the homes' set-up reads it, so finding none
means the check no longer sees the code it is meant to check.
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from size_limits import blank_cpp, cpp_functions  # noqa: E402

SUFFIXES = (".cpp", ".hpp", ".h", ".cu", ".cuh")
SETUP = {"uses_nvme", "make_backend", "make_gpt_cpu_backend"}
PLAN_DECL = re.compile(r"\bPlan\s*(?:const\s*)?[&*]{0,2}\s*(?:const\s*)?([A-Za-z_]\w*)")
CONFIG_PLACEMENT = re.compile(r"\bconfig\s*(?:\.|->)\s*(params|gradients|optimizer|checkpoints|activation_tier)\b")


def is_setup(name):
    # A class template's constructor (Backend<S>::Backend) is a constructor too.
    # The function finder drops the template arguments, so Backend<S>::Backend arrives as ::Backend.
    parts = [re.sub(r"<.*>$", "", p) for p in name.split("::")]
    if len(parts) == 2 and parts[0] == "" and parts[1][:1].isupper():
        return True
    return parts[-1] in SETUP or (len(parts) >= 2 and parts[-1] == parts[-2])


def line_of(code, pos):
    return code.count("\n", 0, pos) + 1


def plan_names(code):
    return {m.group(1) for m in PLAN_DECL.finditer(code)} - {"const", "override", "final"}


def check_file(text, rel, names):
    """Offenders in one file and its reads of the plan in set-up; `names` are those declared as a
    plan anywhere under engine/backend (a member declared in a header is read in its .cpp)."""
    code = blank_cpp(text)
    functions = cpp_functions(text)
    offenders, setup_reads = [], 0

    def enclosing(line):
        inside = [f for f in functions if f[0] <= line <= f[1]]
        return min(inside, key=lambda f: f[1] - f[0]) if inside else None

    decls = {m.start(1) for m in PLAN_DECL.finditer(code)}
    for name in sorted(names):
        for m in re.finditer(r"(?<![\w.>:])" + re.escape(name) + r"\b", code):
            line = line_of(code, m.start())
            fn = enclosing(line)
            if m.start() in decls:
                if fn is None and re.match(r"\s*[;{=]", code[m.end():]):
                    offenders.append(f"{rel}:{line}: keeps the plan as a member ({name}): a backend reads the Program")
                continue
            if fn is None:
                continue  # a declaration's parameter list
            if is_setup(fn[2]):
                setup_reads += 1
            else:
                offenders.append(f"{rel}:{line}: {fn[2]} reads the plan ({name}) outside the homes' set-up")
    for m in CONFIG_PLACEMENT.finditer(code):
        offenders.append(f"{rel}:{line_of(code, m.start())}: reads the run config's placement of {m.group(1)}: "
                         "the plan decides it and the Program states what moves")
    return offenders, setup_reads


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    base = os.path.join(root, "engine", "backend")
    texts = {}
    for folder, dirs, files in os.walk(base):
        dirs.sort()
        for n in sorted(files):
            if n.endswith(SUFFIXES):
                with open(os.path.join(folder, n), encoding="utf-8", errors="replace") as f:
                    texts[os.path.relpath(os.path.join(folder, n), root)] = f.read()
    names = set()
    for text in texts.values():
        names |= plan_names(blank_cpp(text))
    offenders, reads, files = [], 0, len(texts)
    for rel, text in sorted(texts.items()):
        o, r = check_file(text, rel, names)
        offenders += o
        reads += r
    for o in offenders:
        print(o)
    if reads == 0:
        print(f"{os.path.relpath(base, root)}: no read of the plan found in {files} files, not even the homes' set-up: "
              "the check no longer sees the backends")
        return 1
    print(f"backend reads program: {files} files, {reads} reads of the plan, "
          f"{'all in set-up' if not offenders else f'{len(offenders)} outside it'}")
    return 1 if offenders else 0


if __name__ == "__main__":
    sys.exit(main())
