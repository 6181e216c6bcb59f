#!/usr/bin/env python3
"""The libraries depend on each other in one direction: core in the middle, the file formats on it,
the architectures on both, the two executors beside each other, the tuner over the simulator, the
measuring layer over both executors, the command over everything.

Usage: include_directions.py [ROOT]

Prints each offender as `path:line: what` and exits 1 when there is one, 0 when there is none. Run
by CTest as `arch_include_directions` (and its own test, tests/include_directions_test.py).

What it checks:
- every `#include "FOLDER/..."` in a *.cpp, *.hpp, *.h, *.cu or *.cuh below one of the library
  folders names a folder that LAYERS allows it (its own included);
- every zinf_* library a folder's CMakeLists.txt links (target_link_libraries) belongs to an
  allowed folder, so that the build enforces what the includes say.
It fails too when it finds no include at all in core/: the check would be blind to the folder it
exists for.
"""
import os
import re
import sys

SUFFIXES = (".cpp", ".hpp", ".h", ".cu", ".cuh")

# Each library folder and the folders it may include. core includes nothing but itself: a file
# format is read by formats/ into core's plain structs, never by core.
LAYERS = {
    "core": set(),
    "formats": {"core"},
    "models": {"core", "formats"},
    "engine": {"core", "formats", "models"},
    "sim": {"core", "formats", "models"},
    "tune": {"core", "formats", "models", "sim"},
    "measure": {"core", "formats", "models", "engine", "sim", "tune"},
    "cli": {"core", "formats", "models", "engine", "sim", "tune", "measure"},
}
INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([A-Za-z_]+)/', re.M)
LINK = re.compile(r"target_link_libraries\s*\(([^)]*)\)", re.S)
TARGET = re.compile(r"\bzinf_([a-z]+)")


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


def check_sources(root, folder, allowed):
    offenders, includes = [], 0
    base = os.path.join(root, folder)
    for d, dirs, files in os.walk(base):
        dirs.sort()
        for n in sorted(files):
            if not n.endswith(SUFFIXES):
                continue
            path = os.path.join(d, n)
            rel = os.path.relpath(path, root)
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
            for m in INCLUDE.finditer(text):
                target = m.group(1)
                if target not in LAYERS:
                    continue  # a third-party header with a folder (fmt/, nlohmann/)
                includes += 1
                if target != folder and target not in allowed:
                    offenders.append(f"{rel}:{line_of(text, m.start())}: {folder}/ includes {target}/"
                                     f" ({folder}/ may include {describe(folder, allowed)})")
    return offenders, includes


def check_links(root, folder, allowed):
    path = os.path.join(root, folder, "CMakeLists.txt")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        text = f.read()
    offenders = []
    for m in LINK.finditer(text):
        for t in TARGET.finditer(m.group(1)):
            name = t.group(1)
            if name in LAYERS and name != folder and name not in allowed:
                offenders.append(f"{os.path.relpath(path, root)}:{line_of(text, m.start(1) + t.start())}: "
                                 f"{folder}/ links zinf_{name} ({folder}/ may link {describe(folder, allowed)})")
    return offenders


def describe(folder, allowed):
    return ", ".join(sorted(allowed | {folder}))


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    offenders, counts = [], {}
    for folder, allowed in LAYERS.items():
        o, n = check_sources(root, folder, allowed)
        offenders += o + check_links(root, folder, allowed)
        counts[folder] = n
    for o in offenders:
        print(o)
    if counts.get("core", 0) == 0:
        print("core: no include of a zinf header found: the check no longer sees core/")
        return 1
    total = sum(counts.values())
    print(f"include directions: {total} includes of zinf headers in {len(LAYERS)} folders, "
          f"{'all in direction' if not offenders else f'{len(offenders)} against it'}")
    return 1 if offenders else 0


if __name__ == "__main__":
    sys.exit(main())
