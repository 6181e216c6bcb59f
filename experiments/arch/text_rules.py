#!/usr/bin/env python3
"""What committed text may say, and how the front door is shaped.

Usage: text_rules.py [ROOT] [--check paths,words,docs]

Prints each offender as `path:line: what` and exits 1 when there is one, 0 when there is none.
Run by CTest as `arch_committed_text` (paths, words) and `arch_docs_shape` (docs).

- paths: no machine's absolute paths in committed text: a home or work checkout (/work/..., /home/...,
  /root/..., /Users/...) or a run's scratch folder (/tmp/zinf-NAME/..., /var/tmp/zinf-NAME/...;
  an mktemp template ending in XXXXXX is fine). Results name files relative to the zinf tree.
- words: no work-tracker words: an issue number, a work session, a wave of work, an "item N" of a
  tracker, engineers, and no citation of notes kept outside the repository. The repository speaks of
  the project alone, and says what a citation means in place.
- docs: README.md stays a front door (at most 300 lines), and no cell of a Markdown table in any
  committed .md file is longer than 300 characters (a cell holds a sentence, not a report).

What it reads: the files git tracks below ROOT (default: the repository this script is in), or,
where ROOT is not a git checkout, every file below it except folders named build*, .git and
__pycache__. Binary files (a NUL byte in their first 8 KiB, or images, PDFs and archives by their
suffix) are skipped, and so are this checker and its test, which name what they look for.
"""
import argparse
import os
import re
import subprocess
import sys

SKIP_DIRS = ("build", ".git", "__pycache__")
BINARY_SUFFIXES = (".png", ".pdf", ".jpg", ".jpeg", ".gif", ".gz", ".xz", ".zst", ".bz2", ".zip", ".tar",
                   ".safetensors", ".bin", ".npy", ".so", ".o", ".a")
# This checker and its test name what they look for; they are the only files not read.
SELF = {"experiments/arch/text_rules.py", "tests/text_rules_test.py"}
MAX_README_LINES = 300
MAX_CELL_CHARS = 300

PATH_RULES = [
    (re.compile(r"(?<![\w.~-])/(?:work|home|root|Users)/[\w.-]"), "an absolute path of a machine"),
    (re.compile(r"/(?:var/)?tmp/zinf-(?![\w.-]*XXXXXX)[\w.-]+/"), "a run's scratch folder"),
]
# The words are split so that this file does not name them itself.
WORD_RULES = [
    (re.compile(r"\bissues?[\s#-]*\d+", re.I), "an issue number"),
    (re.compile(r"(?<!::)\bsess" + r"ions?\b", re.I), "a work session"),
    (re.compile(r"\bwa" + r"ves?[\s-]*\d+\b", re.I), "a wave of work"),
    (re.compile(r"\bit" + r"em[\s-]*\d+[a-z]?\b", re.I), "a tracker's item"),
    (re.compile(r"\bengin" + r"eers?\b", re.I), "engineers"),
    (re.compile(r"\b(?:MACH" + r"INE|SIM" + r"GRID|PUBL" + r"ISHED)\.md\b|\.\./sha" + r"red\b"), "a note outside the repository"),
]


def tracked_files(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True, check=True).stdout
        names = [n for n in out.decode("utf-8", "replace").split("\0") if n]
        if names:
            return sorted(names)
    except (OSError, subprocess.CalledProcessError):
        pass
    names = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not any(d.startswith(s) for s in SKIP_DIRS))
        for f in sorted(files):
            names.append(os.path.relpath(os.path.join(folder, f), root))
    return names


def read_text(path):
    """The file's text, or None for a binary (or unreadable) file."""
    if path.lower().endswith(BINARY_SUFFIXES):
        return None
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if b"\0" in data[:8192]:
        return None
    return data.decode("utf-8", "replace")


def line_findings(name, text, rules):
    for number, line in enumerate(text.splitlines(), 1):
        for pattern, what in rules:
            m = pattern.search(line)
            if m:
                yield f"{name}:{number}: {what}: '{m.group(0)}'"


def table_cells(line):
    """The cells of a Markdown table row (a line starting with |), split at unescaped bars."""
    body = line.strip()
    if not body.startswith("|"):
        return []
    cells = re.split(r"(?<!\\)\|", body.strip("|"))
    return [c.strip() for c in cells]


def docs_findings(name, text):
    lines = text.splitlines()
    if name == "README.md" and len(lines) > MAX_README_LINES:
        yield f"{name}:{len(lines)}: README.md has {len(lines)} lines (limit {MAX_README_LINES}): keep it a front door"
    if not name.endswith(".md"):
        return
    for number, line in enumerate(lines, 1):
        for cell in table_cells(line):
            if len(cell) > MAX_CELL_CHARS:
                yield (f"{name}:{number}: a table cell of {len(cell)} characters (limit {MAX_CELL_CHARS}): "
                       f"'{cell[:60]}...'")


def check(root, checks):
    findings = []
    rules = (PATH_RULES if "paths" in checks else []) + (WORD_RULES if "words" in checks else [])
    for name in tracked_files(root):
        if name in SELF:
            continue
        text = read_text(os.path.join(root, name))
        if text is None:
            continue
        if rules:
            findings.extend(line_findings(name, text, rules))
        if "docs" in checks:
            findings.extend(docs_findings(name, text))
    return findings


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("root", nargs="?", default=os.path.normpath(os.path.join(here, "..", "..")))
    parser.add_argument("--check", default="paths,words,docs", help="comma-separated: paths, words, docs")
    args = parser.parse_args(argv)
    checks = set(args.check.split(","))
    unknown = checks - {"paths", "words", "docs"}
    if unknown:
        parser.error(f"unknown check(s): {', '.join(sorted(unknown))}")
    findings = check(args.root, checks)
    for f in findings:
        print(f)
    print(f"text rules ({', '.join(sorted(checks))}): {len(findings)} finding(s)")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
