#!/usr/bin/env python3
"""Every TrainingArguments flag that zrt-train and zrt-config accept does what it says or says it
does nothing: each flag declared in config/training_args_flags.cpp's add_training_arguments must
either be on the no-effect list (ignored_training_arguments() in config/training_args.cpp, which
warns when the flag is used) or be read somewhere: as `<args>.<field>` in the sources outside
config/training_args*.{h,cpp}, or in a function of those files other than the ones that declare
and parse the flags.

Usage: flag_readers.py [ROOT]. Exit 1 with the list of flags that nothing reads.
"""
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import check_layout  # noqa: E402  (its C++ function finder)

ARGS_CPP = "config/training_args.cpp"
ARGS_H = "config/training_args.h"
FLAGS_CPP = "config/training_args_flags.cpp"
FLAGS_H = "config/training_args_flags.h"
# Functions that only declare or parse the flags: a field used there is not read.
NOT_READERS = {"add_training_arguments", "add_more_training_arguments",
               "parse_training_arguments", "parse_more_training_arguments", "training_bool_flags",
               "ignored_training_arguments", "join_bool_flag_values"}
# The functions that declare the flags (add_removed_arguments declares flags transformers 5
# removed, each refused with a hint when used: nothing to read).
DECLARERS = ("add_training_arguments", "add_more_training_arguments")
# transformers 4.x spellings that parse_training_arguments stores in the 5.x field.
ALIASES = {"evaluation_strategy": "eval_strategy"}


def function_body(text, name, where):
    for fname, _, open_line, close_line in check_layout.functions(text):
        if fname == name:
            return "\n".join(text.split("\n")[open_line - 1:close_line])
    raise SystemExit(f"flag_readers: no function {name} in {where}")


def main():
    flags_cpp = check_layout.read(ROOT, FLAGS_CPP)
    args_cpp = check_layout.read(ROOT, ARGS_CPP) + "\n" + flags_cpp
    declared = [flag for name in DECLARERS
                for flag in re.findall(r'"([a-z0-9_]+)",\s*"',
                                       function_body(flags_cpp, name, FLAGS_CPP))]
    ignored = set(re.findall(r'\{"([a-z0-9_]+)",\s*(?:true|false)\}',
                             function_body(args_cpp, "ignored_training_arguments", ARGS_CPP)))
    # Reads in training_args.cpp outside the declaring and parsing functions.
    blank = check_layout.blank_cxx(args_cpp).split("\n")
    own_reads = []
    for fname, _, open_line, close_line in check_layout.functions(args_cpp):
        if fname.split("::")[-1] not in NOT_READERS:
            own_reads.append("\n".join(blank[open_line - 1:close_line]))
    own = "\n".join(own_reads)
    others = []
    for rel in check_layout.source_files(ROOT):
        top = rel.split("/", 1)[0]
        if rel in (ARGS_CPP, ARGS_H, FLAGS_CPP, FLAGS_H) or top in ("tests", "fuzz") or \
                not rel.endswith((".cpp", ".h")):
            continue
        others.append(check_layout.blank_cxx(check_layout.read(ROOT, rel)))
    elsewhere = "\n".join(others)
    unread = []
    for flag in declared:
        if flag in ignored:
            continue
        field = ALIASES.get(flag, flag)
        member = re.compile(r"(?:\.|->)\s*" + field + r"\b")
        bare = re.compile(r"(?<![\w.>])" + field + r"\b")  # a member function reading its field
        if member.search(elsewhere) or member.search(own) or bare.search(own):
            continue
        unread.append(flag)
    if len(declared) < 40:
        print(f"flag_readers: found only {len(declared)} declared flags in {FLAGS_CPP}")
        return 1
    print(f"flag_readers: {len(declared)} flags declared, {len(ignored)} on the no-effect list")
    if unread:
        print("flags that nothing reads (read them, or add them to ignored_training_arguments(), "
              "which warns that they have no effect):")
        for flag in unread:
            print(f"  --{flag}")
        return 1
    print("flag_readers: every declared flag is read")
    return 0


if __name__ == "__main__":
    sys.exit(main())
