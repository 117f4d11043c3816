#!/usr/bin/env python3
"""Checks the public/internal boundary of ZeroRT's headers.

Usage: check_public_headers.py [ROOT] | check_public_headers.py --self-test

The public headers are the ZRT_PUBLIC_HEADERS list of cmake/ZrtPublicHeaders.cmake: the only
headers `cmake --install` copies, and what an outside program compiles against. This script
checks that
1. the list is exactly the set of project headers zrt/zrt.h reaches through `#include "..."`
   (a header an installed one includes is installed too, and nothing else is);
2. no public header is marked internal ("Internal to <module>/" in its text);
3. a public header includes, besides project headers, only the C++ standard library, LibTorch
   (torch/, ATen/, c10/) and nlohmann/json, the config value type (DESIGN.md, "Public
   headers"): no cxxopts, MPI, NCCL or CUDA type reaches a program through them.
Each violation is printed as `path:line: message`; the exit status is 1 when there is any.
"""
import os
import re
import sys

from check_selftest import run_in_tree, verdict

LIST_FILE = "cmake/ZrtPublicHeaders.cmake"
UMBRELLA = "zrt/zrt.h"
QUOTED = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
ANGLED = re.compile(r'^\s*#\s*include\s*<([^>]+)>', re.M)
ALLOWED_ANGLED = ("torch/", "ATen/", "c10/", "nlohmann/")
INTERNAL_MARK = re.compile(r"Internal to [a-z_]+/")


def listed_headers(root):
    text = open(os.path.join(root, LIST_FILE), encoding="utf-8").read()
    m = re.search(r"set\(ZRT_PUBLIC_HEADERS\s+([^)]*)\)", text)
    if not m:
        return None
    return m.group(1).split()


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


def check(root):
    out = []
    listed = listed_headers(root)
    if listed is None:
        return [f"{LIST_FILE}:1: no set(ZRT_PUBLIC_HEADERS ...)"]
    reached, pending = {}, [(UMBRELLA, None)]
    while pending:
        header, via = pending.pop()
        if header in reached:
            continue
        path = os.path.join(root, header)
        if not os.path.isfile(path):
            out.append(f"{via or LIST_FILE}: includes {header}, which does not exist")
            continue
        reached[header] = via
        text = open(path, encoding="utf-8").read()
        for m in QUOTED.finditer(text):
            pending.append((m.group(1), f"{header}:{line_of(text, m.start())}"))
        for m in ANGLED.finditer(text):
            name = m.group(1)
            standard = "/" not in name and not name.endswith((".h", ".hpp"))
            if not standard and not name.startswith(ALLOWED_ANGLED):
                out.append(f"{header}:{line_of(text, m.start())}: public header includes "
                           f"<{name}>, a third-party header a program would need to have")
        mark = INTERNAL_MARK.search(text)
        if mark:
            out.append(f"{header}:{line_of(text, mark.start())}: public header (reached from "
                       f"{via or 'the list'}) says '{mark.group(0)}'")
    for header in sorted(set(reached) - set(listed)):
        out.append(f"{reached[header]}: includes {header}, which is not in ZRT_PUBLIC_HEADERS "
                   f"({LIST_FILE}): add it there if the API needs it, else include it from the "
                   ".cpp file and forward-declare in the header")
    for header in sorted(set(listed) - set(reached)):
        out.append(f"{LIST_FILE}:1: {header} is listed but {UMBRELLA} does not reach it")
    return out


def self_test():
    files = {
        LIST_FILE: "set(ZRT_PUBLIC_HEADERS\n  zrt/zrt.h\n  a/a.h\n  a/unused.h)\n",
        "zrt/zrt.h": '#include "a/a.h"\n#include <vector>\n',
        "a/a.h": '#include "a/inner.h"\n#include <torch/torch.h>\n#include <cxxopts.hpp>\n',
        "a/inner.h": "// Internal to a/.\n#pragma once\n",
        "a/unused.h": "#pragma once\n",
    }
    expected = [
        "a/a.h:3: public header includes <cxxopts.hpp>, a third-party header a program would "
        "need to have",
        "a/inner.h:1: public header (reached from a/a.h:1) says 'Internal to a/'",
        "a/a.h:1: includes a/inner.h, which is not in ZRT_PUBLIC_HEADERS",
        f"{LIST_FILE}:1: a/unused.h is listed but {UMBRELLA} does not reach it",
    ]
    out = run_in_tree(files, check)
    missing = [e for e in expected if not any(line.startswith(e) for line in out)]
    return verdict(out, expected, not missing and len(out) == len(expected))


def main(argv):
    if "--self-test" in argv:
        return self_test()
    args = [a for a in argv if not a.startswith("--")]
    root = os.path.abspath(args[0] if args else os.path.join(os.path.dirname(__file__), ".."))
    out = check(root)
    for line in out:
        print(line)
    print(f"check_public_headers: {len(listed_headers(root) or [])} public headers, "
          f"{len(out)} violation(s)")
    return 1 if out else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
