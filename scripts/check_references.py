#!/usr/bin/env python3
"""Checks that the tree's citations of DeepSpeed's behaviour resolve inside the repository.

Usage: check_references.py [ROOT] | check_references.py --self-test

Every file of the tree (source, scripts, Markdown; hidden and build folders skipped):
1. cites no spec/deepspeed.md (an early reading kept outside the repository; docs/DEEPSPEED.md
   is the project's own);
2. names, in every "DEEPSPEED.md §N" and the "§M" listed after it ("§N, §M", "§N-§M", "§N and
   §M"), a numbered heading of docs/DEEPSPEED.md ("## 1. ...", "#### 1.4.1 ...");
3. names only files that exist when it names a path that starts with a folder of the repository
   ("hf/trainer.h", "docs/PEERS.md"). Not checked there: CMake files (their paths are relative
   to their own folder), the generated zrt/build_config.h, .py files under the C++ library
   folders (DeepSpeed's own sources, as docs/DEEPSPEED.md cites them), and this script and
   check_layout.py, whose self-tests make up trees.
Each violation is printed as `path:line: message`; the exit status is 1 when there is any.
"""
import os
import re
import sys

from check_selftest import run_in_tree, verdict

EXTENSIONS = (".h", ".hpp", ".cuh", ".c", ".cc", ".cpp", ".cu", ".py", ".sh", ".md", ".txt",
              ".cmake", ".json")
SKIP_DIRS = {"venv", "__pycache__", "third_party", "_deps", "node_modules"}
CITATION = re.compile(r"DEEPSPEED\.md\s+(§[0-9.]*[0-9](?:\s*(?:,|-|–|and)\s*§[0-9.]*[0-9])*)")
HEADING_NUMBER = re.compile(r"^#+\s+(\d+(?:\.\d+)*)\.?\s", re.M)
OLD_SPEC = "spec/" + "deepspeed.md"  # split so that this file does not cite it
LIBRARY = ("core|comm|kernels|sched|aio|text|zero|checkpoint|optim|config|report|runtime|models|hf|"
           "launch|zrt")
PATH = re.compile(r"(?<![\w/.-])((?:%s|tools|examples|bench|fuzz|tests|scripts|docs|cmake)/[\w./-]*\w"
                  r"\.(?:h|cpp|cu|cuh|md|py|sh|txt|json|cmake))\b" % LIBRARY)
NOT_PATHS = {"zrt/build_config.h"}
SELF = {"scripts/check_references.py", "scripts/check_layout.py"}


def tree_files(root):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not (
            d.startswith(".") or d.startswith("build") or d in SKIP_DIRS))
        for name in sorted(filenames):
            if name.endswith(EXTENSIONS):
                yield os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")


def check(root):
    def read(rel):
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            return f.read()
    doc = os.path.join(root, "docs", "DEEPSPEED.md")
    headings = set(HEADING_NUMBER.findall(read("docs/DEEPSPEED.md"))) if os.path.exists(doc) else set()
    out = []
    for rel in tree_files(root):
        if rel in SELF:
            continue
        text = read(rel)
        if not rel.endswith(("CMakeLists.txt", ".cmake")):
            for m in PATH.finditer(text):
                path = m.group(1)
                if path in NOT_PATHS or os.path.exists(os.path.join(root, path)) or (
                        path.endswith(".py") and re.match(r"(%s)/" % LIBRARY, path)):
                    continue
                out.append(f"{rel}:{text.count(chr(10), 0, m.start()) + 1}: {path} does not exist")
        for m in re.finditer(re.escape(OLD_SPEC), text):
            out.append(f"{rel}:{text.count(chr(10), 0, m.start()) + 1}: cites {OLD_SPEC}, which is "
                       "not in the repository: cite docs/DEEPSPEED.md")
        for m in CITATION.finditer(text):
            for number in re.findall(r"§([0-9.]*[0-9])", m.group(1)):
                if number not in headings:
                    out.append(f"{rel}:{text.count(chr(10), 0, m.start()) + 1}: "
                               f"docs/DEEPSPEED.md §{number} is no heading of docs/DEEPSPEED.md")
    return out


def self_test():
    files = {"docs/DEEPSPEED.md": "# x\n## 1. A\n### 1.2 B\n#### 1.2.1 C\n",
             "core/a.h": f"// {OLD_SPEC} §1\n// docs/DEEPSPEED.md §1.2, §1.3 and §1\n",
             "core/b.cpp": "// docs/DEEPSPEED.md §1.2.1-§1.2 (fine), core/a.h and core/c.h\n"}
    expected = [f"core/a.h:1: cites {OLD_SPEC}, which is not in the repository: cite "
                "docs/DEEPSPEED.md",
                "core/a.h:2: docs/DEEPSPEED.md §1.3 is no heading of docs/DEEPSPEED.md",
                "core/b.cpp:1: core/c.h does not exist"]
    out = run_in_tree(files, check)
    return verdict(out, expected, sorted(out) == sorted(expected))


def main(argv):
    if "--self-test" in argv:
        return self_test()
    root = os.path.abspath(argv[0] if argv else os.path.join(os.path.dirname(__file__), ".."))
    out = check(root)
    for line in out:
        print(line)
    print(f"check_references: {len(out)} violation(s) in {root}")
    return 1 if out else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
