#!/usr/bin/env python3
"""Writes text/unicode_tables.cpp: the Unicode data text/unicode_text.cpp needs for the
byte-level BPE tokenizer (text/bpe_tokenizer.h), from this Python's `unicodedata`.

Usage: gen_unicode_tables.py [OUT]   (default: text/unicode_tables.cpp next to this script)

Tables (all sorted, searched by binary search):
  letters, numbers     ranges of general category L* (Lu Ll Lt Lm Lo) and N* (Nd Nl No): \\p{L}, \\p{N}
  word characters      ranges of what Rust's regex crate calls \\w (tokenizers' single_word
                       test): L*, M*, Nd, Nl, Pc, Join_Control, and the Other_Alphabetic
                       symbols (circled and squared Latin letters)
  white space          ranges of the White_Space property (what Oniguruma's \\s matches)
  combining classes    ranges of equal non-zero canonical combining class
  decompositions       each code point's canonical mapping (one level; applied recursively at
                       run time) and whether NFC composes it back (a primary composite: not a
                       composition exclusion, singleton or non-starter decomposition), Hangul
                       syllables left out (they decompose by arithmetic)

The Unicode version of the data is written into the file; rerun with a newer Python to update.
"""
import os
import sys
import unicodedata

# The White_Space property (PropList.txt). unicodedata has no accessor for it; str.isspace()
# is White_Space plus U+001C..U+001F (bidi class B/S), which the check below confirms.
WHITE_SPACE = [(0x09, 0x0D), (0x20, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0x1680, 0x1680),
               (0x2000, 0x200A), (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F),
               (0x3000, 0x3000)]
# Join_Control and the So code points of Other_Alphabetic (PropList.txt), part of \w.
WORD_EXTRA = [(0x200C, 0x200D), (0x24B6, 0x24E9), (0x1F130, 0x1F149), (0x1F150, 0x1F169),
              (0x1F170, 0x1F189)]
HANGUL_FIRST, HANGUL_LAST = 0xAC00, 0xD7A3


def code_points():
    return (c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)


def ranges(predicate):
    out = []
    for c in code_points():
        if predicate(c):
            if out and out[-1][1] == c - 1:
                out[-1][1] = c
            else:
                out.append([c, c])
    return out


def class_ranges():
    out = []
    for c in code_points():
        k = unicodedata.combining(chr(c))
        if k == 0:
            continue
        if out and out[-1][1] == c - 1 and out[-1][2] == k:
            out[-1][1] = c
        else:
            out.append([c, c, k])
    return out


def canonical_mapping(c):
    d = unicodedata.decomposition(chr(c))
    if not d or d.startswith("<"):
        return None
    return [int(x, 16) for x in d.split()]


def full_decomposition(c):
    m = canonical_mapping(c)
    if m is None:
        return [c]
    return [x for part in m for x in full_decomposition(part)]


def decompositions():
    out = []
    for c in code_points():
        if HANGUL_FIRST <= c <= HANGUL_LAST or canonical_mapping(c) is None:
            continue
        d = full_decomposition(c)
        assert unicodedata.normalize("NFD", chr(c)) == "".join(map(chr, d)), hex(c)
        out.append((c, d))
    return out


def compositions():
    out = []
    for c in code_points():
        if HANGUL_FIRST <= c <= HANGUL_LAST:
            continue
        m = canonical_mapping(c)
        if m is None or len(m) != 2:
            continue
        if unicodedata.normalize("NFC", chr(c)) != chr(c):
            continue  # excluded from composition
        out.append((m[0], m[1], c))
    return sorted(out)


def check_white_space():
    listed = {c for lo, hi in WHITE_SPACE for c in range(lo, hi + 1)}
    spaces = {c for c in code_points() if chr(c).isspace()}
    assert spaces - listed == set(range(0x1C, 0x20)), sorted(map(hex, spaces ^ listed))


def pack(numbers):
    """Non-negative integers as text: each in hex digits, most significant first, every digit but
    the last written as 'g'..'v' (16 + digit) so that the last one ('0'..'9', 'a'..'f') ends it."""
    out = []
    for n in numbers:
        digits = "%x" % n
        out.append("".join(chr(ord("g") + int(d, 16)) for d in digits[:-1]) + digits[-1])
    return "".join(out)


def range_numbers(rs):
    """[lo, hi, extra...] rows as (lo - previous hi - 1, hi - lo, extra...) deltas."""
    out, prev = [], -1
    for r in rs:
        out += [r[0] - prev - 1, r[1] - r[0]] + list(r[2:])
        prev = r[1]
    return out


def decomposition_numbers():
    """Per code point with a canonical mapping: (code point - previous one, 2 * mapping length +
    whether NFC composes the mapping back into it, the mapping)."""
    composes = {c for _, _, c in compositions()}
    out, prev = [], -1
    for c in code_points():
        if HANGUL_FIRST <= c <= HANGUL_LAST:
            continue
        m = canonical_mapping(c)
        if m is None:
            continue
        assert unicodedata.normalize("NFD", chr(c)) == "".join(map(chr, full_decomposition(c)))
        out += [c - prev, 2 * len(m) + (c in composes)] + m
        prev = c
    return out


def literal(name, numbers):
    text = pack(numbers)
    one_line = 'const char %s[] = "%s";\n' % (name, text)
    if len(one_line) <= 101:
        return one_line
    width = 94
    lines = ['    "%s"' % text[i:i + width] for i in range(0, len(text), width)]
    return "const char %s[] =\n%s;\n" % (name, "\n".join(lines))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "examples",
                                                                   "unicode_tables.cpp")
    check_white_space()
    letters = ranges(lambda c: unicodedata.category(chr(c)).startswith("L"))
    numbers = ranges(lambda c: unicodedata.category(chr(c)).startswith("N"))
    extra = {c for lo, hi in WORD_EXTRA for c in range(lo, hi + 1)}
    words = ranges(lambda c: c in extra or unicodedata.category(chr(c))[0] in "LM"
                   or unicodedata.category(chr(c)) in ("Nd", "Nl", "Pc"))
    classes = class_ranges()
    decomp = decomposition_numbers()
    body = f"""// GENERATED by scripts/gen_unicode_tables.py from Python {sys.version.split()[0]}'s unicodedata,
// Unicode {unicodedata.unidata_version}. Do not edit: rerun the script.
//
// Each table is a string of non-negative integers (the packing: unicode_text.h, kLetters):
// ranges as (start - previous end - 1, end - start) pairs, combining classes as such pairs
// followed by the class, decompositions as (code point - previous one, 2 * length + composes,
// mapping...) with Hangul syllables left out.
#include "text/unicode_text.h"

namespace zrt::examples::unicode {{

const char kUnicodeVersion[] = "{unicodedata.unidata_version}";

{literal("kLetters", range_numbers(letters))}
{literal("kNumbers", range_numbers(numbers))}
{literal("kWordChars", range_numbers(words))}
{literal("kWhiteSpace", range_numbers(WHITE_SPACE))}
{literal("kCombiningClasses", range_numbers(classes))}
{literal("kDecompositions", decomp)}
}}  // namespace zrt::examples::unicode
"""
    with open(out_path, "w") as f:
        f.write(body)
    print(f"{out_path}: Unicode {unicodedata.unidata_version}, {len(letters)} letter ranges, "
          f"{len(numbers)} number ranges, {len(classes)} class ranges, "
          f"{len(decomp)} decomposition numbers")


if __name__ == "__main__":
    main()
