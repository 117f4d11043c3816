"""Writes tests/data/text: byte-level BPE tokenizer folders made by the `tokenizers` library, with
the ids and texts that library gives for a fixed set of texts, for tests/text/text_test.cpp.

Usage: .venv/bin/python tests/text/make_text_fixtures.py [OUT]   (default: tests/data/text)

The four tokenizers are tests/peers/hf_tokenizer.py's (gpt2, gpt2_alt, llama3, qwen2: trained by
BpeTrainer on a seeded corpus, with special and added tokens). For each, expected.json holds
{"vocab_size", "cases": [{"text", "ids", "ids_plain", "decoded", "decoded_with_specials"}]}:
ids with and without the special tokens the tokenizer adds, and the text of `ids` with special
tokens skipped and kept. splits.json holds, for each pre-tokenizer pattern (GPT-2, LLaMA-3,
Qwen2), the pieces tokenizers' Split(pattern, "isolated") cuts each text into. The folders
qwen2_class and gpt2_class hold tokenizer.json files whose pre-tokenizer is not their family's
(a GPT-2 one with config.json's model_type qwen2 and the generic tokenizer_class, which qwen2
overrules; a Qwen2 one with model_type gpt2 and no tokenizer_class), and their
expected.json holds the ids transformers' AutoTokenizer gives (its family class replaces the
file's pipeline: Note [The tokenizer class transformers picks] in text/tokenizer_class.h). Run
once and checked in; running it again must give the same files (the seeds are fixed).
"""
import json
import os
import random
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "peers"))

import hf_tokenizer as h  # noqa: E402  (tests/peers/hf_tokenizer.py: the builders and texts)
from tokenizers import Regex, Tokenizer, pre_tokenizers  # noqa: E402

SEED = 1234
TEXTS = 48


def texts():
    out = h.make_texts(random.Random(SEED + 1), TEXTS, h.SPECIALS)
    return out[:-1]  # without make_texts' one long text: the fixture stays small


def write_json(path, value):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, ensure_ascii=False, indent=0)
        f.write("\n")


def expected(folder, cases):
    tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    out = []
    for text in cases:
        ids = tok.encode(text, add_special_tokens=True).ids
        out.append({"text": text, "ids": ids,
                    "ids_plain": tok.encode(text, add_special_tokens=False).ids,
                    "decoded": tok.decode(ids, skip_special_tokens=True),
                    "decoded_with_specials": tok.decode(ids, skip_special_tokens=False)})
    return {"vocab_size": tok.get_vocab_size(with_added_tokens=True), "cases": out}


def class_fixture(out, name, source, model_type, hub_class, cases):
    """A copy of `source`'s tokenizer.json under config.json's `model_type` (and
    tokenizer_config.json's `hub_class` when given), with AutoTokenizer's ids (transformers picks
    the family's class)."""
    from transformers import AutoTokenizer
    folder = os.path.join(out, name)
    os.makedirs(folder)
    shutil.copy(os.path.join(source, "tokenizer.json"), folder)
    write_json(os.path.join(folder, "config.json"), {"model_type": model_type})
    write_json(os.path.join(folder, "tokenizer_config.json"),
               {"tokenizer_class": hub_class} if hub_class else {})
    tok = AutoTokenizer.from_pretrained(folder)
    write_json(os.path.join(folder, "expected.json"), {
        "class": type(tok).__name__,
        "cases": [{"text": t, "ids": tok(t, add_special_tokens=True)["input_ids"],
                   "ids_plain": tok(t, add_special_tokens=False)["input_ids"]} for t in cases]})


def splits(cases):
    out = {}
    for name, regex in (("gpt2", h.GPT2_RE), ("llama3", h.LLAMA3_RE), ("qwen2", h.QWEN2_RE)):
        split = pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False)
        out[name] = {"regex": regex, "cases": [
            {"text": t, "pieces": [p for p, _ in split.pre_tokenize_str(t)]} for t in cases]}
    return out


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "data", "text")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    rng = random.Random(SEED)
    gpt2 = h.build_gpt2(out, rng)
    folders = [gpt2, h.build_gpt2_alt(out, gpt2), h.build_llama3(out, rng), h.build_qwen2(out, rng)]
    cases = texts()
    for folder in folders:
        write_json(os.path.join(folder, "expected.json"), expected(folder, cases))
    write_json(os.path.join(out, "splits.json"), splits(cases))
    class_fixture(out, "qwen2_class", gpt2, "qwen2", "PreTrainedTokenizerFast", cases)
    class_fixture(out, "gpt2_class", folders[3], "gpt2", None, cases)
    print(f"make_text_fixtures: {len(folders) + 2} tokenizers, {len(cases)} texts in {out}")


if __name__ == "__main__":
    main()
