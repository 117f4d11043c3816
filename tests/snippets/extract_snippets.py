#!/usr/bin/env python3
"""Writes every ```cpp block of the given Markdown files into OUT as a C++ file of its own, for
tests/CMakeLists.txt to build: every C++ snippet of the README and the docs is a complete program
that compiles against ZeroRT (a newcomer copies them).

Usage: extract_snippets.py ROOT OUT FILE.md...   (FILE relative to ROOT)

Each block becomes OUT/<file path with / and . as _>_<line>.cpp, starting with a #line directive
so that compiler errors point into the Markdown file; a file is rewritten only when its text
changed. Prints the written paths separated by ';' (a CMake list). A block without a main() is an
error naming the file and line: fragments are not allowed.
"""
import os
import re
import sys


def blocks(text):
    """(line of the first code line, code) of every ```cpp block."""
    out, lines, i = [], text.split("\n"), 0
    while i < len(lines):
        if lines[i].strip() in ("```cpp", "```c++"):
            start, i = i + 1, i + 1
            while i < len(lines) and lines[i].strip() != "```":
                i += 1
            out.append((start + 1, "\n".join(lines[start:i]) + "\n"))
        i += 1
    return out


def main():
    root, out_dir, files = sys.argv[1], sys.argv[2], sys.argv[3:]
    os.makedirs(out_dir, exist_ok=True)
    written, problems = [], []
    for rel in files:
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            text = f.read()
        for line, code in blocks(text):
            if not re.search(r"\bint\s+main\s*\(", code):
                problems.append(f"{rel}:{line}: a ```cpp block must be a whole program (no main())")
                continue
            name = re.sub(r"[/.]", "_", rel) + f"_{line}.cpp"
            path = os.path.join(out_dir, name)
            content = f'#line {line} "{os.path.join(root, rel)}"\n' + code
            old = None
            if os.path.exists(path):
                with open(path, encoding="utf-8") as f:
                    old = f.read()
            if old != content:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(content)
            written.append(path)
    if problems:
        sys.stderr.write("\n".join(problems) + "\n")
        sys.exit(1)
    sys.stdout.write(";".join(written))


if __name__ == "__main__":
    main()
