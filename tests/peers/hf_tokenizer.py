"""zrt-tokenize (text/bpe_tokenizer.h) against the tokenizers library, id for id and byte for byte.

Usage: python hf_tokenizer.py --bin DIR [--texts N] [--seed S] [--keep DIR]

Builds byte-level BPE tokenizers with `tokenizers` itself in a temporary folder (no downloads),
each trained by BpeTrainer on a small seeded corpus (so that merges exist):
  gpt2      ByteLevel(use_regex) pre-tokenizer, no prefix space; <|endoftext|> special, <mask>
            special with lstrip, non-special added tokens (one with a space and an accent, one
            single_word); merges saved as [a, b] pairs
  gpt2_alt  the same model as Split(GPT-2 regex) + ByteLevel(add_prefix_space, no regex), merges
            rewritten as "a b" strings, a ByteLevel post-processor
  llama3    Split(LLaMA-3 regex) + ByteLevel(use_regex=False), ignore_merges (with whole words put
            into the vocabulary without merges), <|begin_of_text|> / <|end_of_text|> specials, a
            TemplateProcessing adding BOS (in a Sequence after ByteLevel, as LLaMA 3 has it),
            tokenizer_config.json
  qwen2     NFC normalizer, Split(Qwen2 regex) + ByteLevel, <|endoftext|> <|im_start|> <|im_end|>
            specials, no BOS
Then, for each, a seeded set of texts (mixed scripts, composed and decomposed accents, Hangul
jamo, emoji sequences, digit runs, white space runs, contractions, punctuation, special tokens in
the text, the empty string, random code points of Unicode 3.2) must encode to the same ids with and without
special tokens, and those ids plus random id sequences must decode to the same text with
skip_special_tokens both ways; vocab sizes must agree; and tokenizer.json files that are no byte-level
BPE, or one zrt-tokenize cannot honour, must be refused with the reason. Prints one summary line; exits 1 on any
difference, showing the first few.
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import unicodedata

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)

GPT2_RE = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
             r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_RE = LLAMA3_RE.replace(r"\p{N}{1,3}", r"\p{N}")

SPECIALS = ["<|endoftext|>", "<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>",
            "<mask>", "<custom>", "café au lait", "wordtok"]

WORDS = ("the of and to in is was for on that with as by at from it he she they we you this be "
         "are were has have had not but or an which their there been one all would can will "
         "time people year way day man thing woman life child world school state family student "
         "group country problem hand part place case week company system program question work "
         "government number night point home water room mother area money story fact month lot "
         "right study book eye job word business issue side kind head house service friend father "
         "power hour game line end member law car city community name president team minute idea "
         "kid body information back parent face others level office door health person art war "
         "history party result change morning reason research girl guy moment air teacher force "
         "education internationalization tokenization").split()
ACCENTED = ["café", "naïve", "Ångström", "résumé", "façade", "jalapeño", "Müller", "Škoda",
            "crème brûlée", "Æsir", "Œuvre", "São Paulo", "Đorđe", "Łódź", "ﬁnance", "Å"]
SCRIPTS = ["日本語のテキストです。", "中文字符和标点，", "مرحبا بالعالم", "नमस्ते दुनिया", "한국어 텍스트",
           "Ελληνικά γράμματα", "Русский текст", "עברית", "ภาษาไทย", "ქართული"]
EMOJI = ["👨\u200d👩\u200d👧\u200d👦", "👍🏽", "🏳️\u200d🌈", "❤️", "🇫🇷", "😀😃😄", "🧑🏿\u200d💻"]
SPACES = [" ", "  ", "\t", "\n", "\r\n", "\n\n", "\u00a0", "\u3000", " \n ", "\r", "\u2028",
          "\u0085", "\x0b", "   \t"]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M", "'LL",
                "'D", "'ſ", "'x"]
PUNCT = ["!", "!!!", "...", "?!", ",", "--", "«»", "“quoted”", "(", ")", "[x]", "#", "$5", "@",
         "&&", "'", "\"", "<", "<|", "|>", "<|endof", "_"]


def assigned_code_points():
    """Code points Unicode 3.2 already had: tokenizers' NFC data is older than ours (about Unicode
    9: the combining classes of later marks, e.g. U+10F50, are 0 there), and its Oniguruma newer."""
    out = []
    for c in range(0x20, 0x30000):
        if 0xD800 <= c <= 0xDFFF:
            continue
        if unicodedata.ucd_3_2_0.category(chr(c)) == "Cn":
            continue
        if unicodedata.category(chr(c)) not in ("Cn", "Cs", "Co"):
            out.append(c)
    return out


def random_jamo(rng):
    s = chr(0x1100 + rng.randrange(19)) + chr(0x1161 + rng.randrange(21))
    if rng.random() < 0.5:
        s += chr(0x11A8 + rng.randrange(27))
    return s


def random_piece(rng, cps, specials):
    r = rng.random()
    if r < 0.25:
        w = rng.choice(WORDS)
        return w.upper() if rng.random() < 0.1 else w.capitalize() if rng.random() < 0.2 else w
    if r < 0.33:
        w = rng.choice(ACCENTED)
        return unicodedata.normalize("NFD", w) if rng.random() < 0.5 else w
    if r < 0.41:
        s = rng.choice(SCRIPTS)
        return s[:rng.randint(1, len(s))]
    if r < 0.45:
        return random_jamo(rng)
    if r < 0.49:
        return rng.choice(EMOJI)
    if r < 0.56:
        return "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 7)))
    if r < 0.70:
        return rng.choice(SPACES)
    if r < 0.76:
        return rng.choice(CONTRACTIONS)
    if r < 0.84:
        return rng.choice(PUNCT)
    if r < 0.89:
        return rng.choice(specials)
    if r < 0.95:
        return "".join(chr(rng.choice(cps)) for _ in range(rng.randint(1, 4)))
    return chr(0x0300 + rng.randrange(0x70))  # a lone combining mark


def make_texts(rng, n, specials):
    cps = assigned_code_points()
    texts = ["", " ", "\n", "hello world", "  leading", "trailing  ", specials[0],
             specials[0] + specials[0], " " + specials[0] + " x",
             "a" * 300, "7" * 40, "x" + "é" * 200, "\u1100\u1161\u11a8" * 3,
             "IT'S WE'RE I'M YOU'LL SHE'D THEY'VE DON'T it's we're",
             "wordtok wordtoks xwordtok wordtok. <mask> hello  <mask>x café au lait"]
    while len(texts) < n:
        pieces = [random_piece(rng, cps, specials) for _ in range(rng.randint(1, 12))]
        glue = "" if rng.random() < 0.3 else " "
        texts.append(glue.join(pieces))
    long_text = " ".join(texts[:400])  # one long text: many words, several cache misses
    texts.append(long_text)
    return texts


def corpus(rng, n=2500):
    return make_texts(rng, n, ["the", "and"])


def train(tok, rng, vocab_size, specials):
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                  special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(rng), trainer=trainer)
    return tok


def build_gpt2(folder, rng):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    train(tok, rng, 1200, ["<|endoftext|>"])
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True)])
    tok.add_tokens([AddedToken("<custom>"), AddedToken("café au lait"),
                    AddedToken("wordtok", single_word=True)])
    path = os.path.join(folder, "gpt2")
    os.makedirs(path)
    tok.save(os.path.join(path, "tokenizer.json"))
    return path


def build_gpt2_alt(folder, gpt2_path):
    with open(os.path.join(gpt2_path, "tokenizer.json")) as f:
        j = json.load(f)
    j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": GPT2_RE}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": False}]}
    j["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in j["model"]["merges"]]
    j["post_processor"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True}
    path = os.path.join(os.path.dirname(gpt2_path), "gpt2_alt")
    os.makedirs(path)
    with open(os.path.join(path, "tokenizer.json"), "w") as f:
        json.dump(j, f, ensure_ascii=False)
    return path


def split_byte_level(regex):
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


def add_whole_words(path, words):
    """Vocabulary entries without merges: with ignore_merges they are one token each."""
    with open(path) as f:
        j = json.load(f)
    vocab = j["model"]["vocab"]
    next_id = max(list(vocab.values()) + [t["id"] for t in j["added_tokens"]]) + 1
    for w in words:
        key = "".join(chr(BYTE_CHARS[b]) for b in w.encode())
        if key not in vocab:
            vocab[key] = next_id
            next_id += 1
    with open(path, "w") as f:
        json.dump(j, f, ensure_ascii=False)


def byte_chars():
    printable = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, n = {}, 0
    for b in range(256):
        if b in printable:
            out[b] = b
        else:
            out[b] = 256 + n
            n += 1
    return out


BYTE_CHARS = byte_chars()


def build_llama3(folder, rng):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = split_byte_level(LLAMA3_RE)
    tok.decoder = decoders.ByteLevel()
    train(tok, rng, 1500, ["<|begin_of_text|>", "<|end_of_text|>"])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    path = os.path.join(folder, "llama3")
    os.makedirs(path)
    tok.save(os.path.join(path, "tokenizer.json"))
    add_whole_words(os.path.join(path, "tokenizer.json"),
                    [" internationalization", " tokenization", "Ångström", " 日本語", "ologies"])
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>",
                   "tokenizer_class": "PreTrainedTokenizerFast"}, f)
    return path


def build_qwen2(folder, rng):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = split_byte_level(QWEN2_RE)
    tok.decoder = decoders.ByteLevel()
    train(tok, rng, 1800, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    path = os.path.join(folder, "qwen2")
    os.makedirs(path)
    tok.save(os.path.join(path, "tokenizer.json"))
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": None, "eos_token": "<|endoftext|>", "add_prefix_space": False}, f)
    return path


def run_tool(binary, folder, lines, *flags):
    inp = "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines)
    p = subprocess.run([binary, folder, *flags], input=inp.encode(), capture_output=True)
    if p.returncode != 0:
        sys.exit(f"{binary} {folder} {' '.join(flags)} failed ({p.returncode}): "
                 f"{p.stderr.decode()[-2000:]}")
    out = p.stdout.decode().split("\n")
    assert out[-1] == "" and len(out) == len(lines) + 1, (len(out), len(lines))
    return [json.loads(x) for x in out[:-1]]


def random_ids(rng, size, n):
    return [[rng.randrange(-2, size + 5) for _ in range(rng.randint(0, 20))] for _ in range(n)]


def check(name, folder, binary, texts, rng, differences):
    tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    size = tok.get_vocab_size(with_added_tokens=True)
    described = subprocess.run([binary, folder, "--describe"], capture_output=True,
                               text=True).stdout.strip()
    m = re.search(r": byte-level BPE, (\d+) tokens", described)
    if not m or int(m.group(1)) != size:
        differences.append((name, "vocab size", described, size))
    counts = {"encode": 0, "decode": 0}
    for add in (True, False):
        ours = run_tool(binary, folder, [{"text": t} for t in texts],
                        *([] if add else ["--no_special_tokens"]))
        for t, o in zip(texts, ours):
            want = tok.encode(t, add_special_tokens=add).ids
            counts["encode"] += 1
            if o["ids"] != want:
                differences.append((name, f"encode add_special_tokens={add}", t, o["ids"], want))
    id_lists = [tok.encode(t).ids for t in texts] + random_ids(rng, size, len(texts))
    for skip in (True, False):
        ours = run_tool(binary, folder, [{"ids": ids} for ids in id_lists],
                        "--decode", *([] if skip else ["--keep_special_tokens"]))
        for ids, o in zip(id_lists, ours):
            want = tok.decode([i for i in ids if 0 <= i], skip_special_tokens=skip)
            counts["decode"] += 1
            if o["text"] != want:
                differences.append((name, f"decode skip_special_tokens={skip}", ids, o["text"],
                                    want))
    return counts


# tokenizer.json changes zrt-tokenize must refuse: (what, change, exit code, words of the message).
# Exit 1: no byte-level BPE (the caller falls back to tokenizer.model); 2: a ConfigError.
REFUSALS = [
    ("Metaspace BPE (LLaMA 2)", lambda j: j.update(
        pre_tokenizer={"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
                       "split": False}, decoder=None) or j["model"].update(byte_fallback=True),
     1, ["not byte-level", "Metaspace", "byte_fallback"]),
    ("WordPiece model", lambda j: j["model"].update(type="WordPiece"), 1, ["WordPiece"]),
    ("unknown regex", lambda j: j.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\p{N}+"}, "behavior": "Isolated",
         "invert": False}, {"type": "ByteLevel", "add_prefix_space": False,
                            "use_regex": False}]}), 2, ["pre_tokenizer.pattern", "\\p{N}+"]),
    ("Digits pre-tokenizer", lambda j: j.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True}, {"type": "ByteLevel"}]}), 2, ["Digits"]),
    ("NFKC normalizer", lambda j: j.update(normalizer={"type": "NFKC"}), 2,
     ["normalizer", "NFKC"]),
    ("RobertaProcessing", lambda j: j.update(post_processor={"type": "RobertaProcessing"}), 2,
     ["post_processor", "RobertaProcessing"]),
    ("merge out of vocabulary", lambda j: j["model"]["merges"].append(["zzzq", "qqqz"]), 2,
     ["merges", "zzzq"]),
]


def check_refusals(binary, gpt2_path, differences):
    with open(os.path.join(gpt2_path, "tokenizer.json")) as f:
        base = f.read()
    for what, change, code, words in REFUSALS:
        with tempfile.TemporaryDirectory() as folder:
            j = json.loads(base)
            change(j)
            with open(os.path.join(folder, "tokenizer.json"), "w") as f:
                json.dump(j, f)
            p = subprocess.run([binary, folder, "--describe"], capture_output=True, text=True)
            if p.returncode != code or not all(w in p.stderr for w in words):
                differences.append(("refusal", what, p.returncode, p.stderr.strip()))
    return len(REFUSALS)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="the folder holding zrt-tokenize")
    ap.add_argument("--texts", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--keep", help="build the tokenizers here (kept) instead of a temp folder")
    args = ap.parse_args()
    binary = os.path.join(args.bin, "zrt-tokenize")
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or tmp
        os.makedirs(folder, exist_ok=True)
        gpt2 = build_gpt2(folder, rng)
        folders = {"gpt2": gpt2, "gpt2_alt": build_gpt2_alt(folder, gpt2),
                   "llama3": build_llama3(folder, rng), "qwen2": build_qwen2(folder, rng)}
        texts = make_texts(random.Random(args.seed + 1), args.texts, SPECIALS)
        differences, encodes, decodes = [], 0, 0
        for name, path in folders.items():
            c = check(name, path, binary, texts, rng, differences)
            encodes += c["encode"]
            decodes += c["decode"]
        refusals = check_refusals(binary, gpt2, differences)
    print(f"hf_tokenizer: {len(folders)} tokenizers ({', '.join(folders)}), {len(texts)} texts, "
          f"{encodes} encodes and {decodes} decodes against tokenizers, {refusals} refusals: "
          f"{len(differences)} differences")
    for d in differences[:8]:
        print("  ", *[repr(x)[:300] for x in d])
    sys.exit(1 if differences else 0)


if __name__ == "__main__":
    main()
