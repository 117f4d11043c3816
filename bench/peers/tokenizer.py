"""Encoding speed of zrt-tokenize (text/bpe_tokenizer.h) against the tokenizers library.

Usage: python bench/peers/tokenizer.py --bin DIR [--mb 5] [--reps 7] [--vocab 32000] [--kind llama3]

Trains a byte-level BPE with tokenizers (--kind llama3: LLaMA-3 split, ignore_merges; qwen2: NFC and
Qwen2's split; gpt2: ByteLevel's own split) on a seeded ~--mb MB text of JSON lines (the texts of
tests/peers/hf_tokenizer.py: mixed scripts, digits, white space, special tokens), checks once that
zrt-tokenize's ids equal tokenizers', then times, in rotated order, --reps times each:
  zrt        zrt-tokenize --no_special_tokens --stats: the time inside encode() (one thread)
  hf-1       Tokenizer.encode_batch(texts, add_special_tokens=False) with RAYON_NUM_THREADS=1,
             TOKENIZERS_PARALLELISM=false
  hf-default the same with tokenizers' default threads
each from a freshly loaded tokenizer (cold word caches), and prints tokens/s (median, min, max).
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests",
                                "peers"))
import hf_tokenizer as peer  # noqa: E402
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers  # noqa

HF_TIMER = r"""
import json, sys, time
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
texts = [json.loads(l)["text"] for l in open(sys.argv[2], encoding="utf-8")]
start = time.perf_counter()
enc = tok.encode_batch(texts, add_special_tokens=False)
seconds = time.perf_counter() - start
print(json.dumps({"tokens": sum(len(e.ids) for e in enc), "encode_seconds": seconds}))
"""


def build(kind, folder, corpus, vocab):
    if kind == "llama3":
        tok = Tokenizer(models.BPE(ignore_merges=True))
        tok.pre_tokenizer = peer.split_byte_level(peer.LLAMA3_RE)
    elif kind == "qwen2":
        tok = Tokenizer(models.BPE())
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = peer.split_byte_level(peer.QWEN2_RE)
    else:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, show_progress=False,
                                  special_tokens=["<|endoftext|>", "<|begin_of_text|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer=trainer)
    tok.save(os.path.join(folder, "tokenizer.json"))


def texts_of(mb, seed):
    rng = random.Random(seed)
    out, size = [], 0
    while size < mb * 1e6:
        batch = peer.make_texts(rng, 2000, peer.SPECIALS)[15:-1]  # no fixed or long texts
        for t in batch:
            out.append(t)
            size += len(t.encode())
    return out


def run_zrt(binary, folder, lines_file):
    with open(lines_file, "rb") as f:
        p = subprocess.run([binary, folder, "--no_special_tokens", "--stats"], stdin=f,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True)
    return json.loads(p.stderr.decode().strip().split("\n")[-1]), p.stdout


def run_hf(folder, lines_file, threads):
    env = dict(os.environ)
    if threads == 1:
        env.update(RAYON_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    p = subprocess.run([sys.executable, "-c", HF_TIMER, os.path.join(folder, "tokenizer.json"),
                        lines_file], env=env, stdout=subprocess.PIPE, check=True)
    return json.loads(p.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--mb", type=float, default=5)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--kind", default="llama3", choices=["llama3", "qwen2", "gpt2"])
    args = ap.parse_args()
    binary = os.path.join(args.bin, "zrt-tokenize")
    with tempfile.TemporaryDirectory() as folder:
        texts = texts_of(args.mb, 42)
        build(args.kind, folder, texts, args.vocab)
        lines_file = os.path.join(folder, "texts.jsonl")
        with open(lines_file, "w", encoding="utf-8") as f:
            for t in texts:
                f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
        nbytes = sum(len(t.encode()) for t in texts)
        # Check once: the same ids as tokenizers.
        tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
        want = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
        _, out = run_zrt(binary, folder, lines_file)
        got = [json.loads(l)["ids"] for l in out.decode().split("\n")[:-1]]
        assert got == want, "zrt-tokenize and tokenizers disagree"
        runs = {"zrt": [], "hf-1": [], "hf-default": []}
        order = list(runs)
        for rep in range(args.reps):
            for name in order[rep % 3:] + order[:rep % 3]:
                if name == "zrt":
                    r, _ = run_zrt(binary, folder, lines_file)
                else:
                    r = run_hf(folder, lines_file, 1 if name == "hf-1" else 0)
                runs[name].append(r["tokens"] / r["encode_seconds"])
        tokens = sum(len(ids) for ids in want)
        print(f"{args.kind}: {len(texts)} texts, {nbytes / 1e6:.2f} MB, {tokens} tokens, vocab "
              f"{tok.get_vocab_size()}, {args.reps} reps, rotated; tokens/s (median [min, max]):")
        for name, v in runs.items():
            med = statistics.median(v)
            print(f"  {name:11s} {med / 1e6:7.3f} M  [{min(v) / 1e6:.3f}, {max(v) / 1e6:.3f}]  "
                  f"x{med / statistics.median(runs['hf-1']):.2f} of hf-1")


if __name__ == "__main__":
    main()
