"""Makes a small random LLaMA model with transformers and saves it as save_pretrained does, for
trying zrt-generate and `zrt-train --model llama` without downloading anything:

    .venv/bin/python examples/make_tiny_llama.py DIR [--layers 4] [--hidden 128] [--max_shard_size 200KB]
                                                     [--tokenizer]

--tokenizer also trains a small SentencePiece model (BPE with byte fallback, LLaMA's kind) with
Debian's spm_train (package `sentencepiece`, from scripts/install_deps.sh) on a generated corpus,
and writes it as LLaMA 2 folders have it: tokenizer.model and tokenizer_config.json (BOS added,
no EOS); the model's vocabulary is then the tokenizer's pieces, with BOS 1 and EOS 2.
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import tempfile

WORDS = ("the quick brown fox jumps over a lazy dog while every rank gathers its shard of the "
         "model and trains layer by layer café naïve résumé über straße año niño 2024 42 7 "
         "0.5 data token").split()


def corpus_lines(seed, count=400):
    """`count` lines of seeded random words (accents and digits included)."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) for _ in range(count)]


def train_tokenizer(folder, seed=0, vocab=400):
    """Trains a SentencePiece BPE model with byte fallback into folder/tokenizer.model (pieces
    0, 1, 2 = <unk>, <s>, </s>, as LLaMA's) and returns its number of pieces."""
    spm_train = shutil.which("spm_train")
    if spm_train is None:
        raise SystemExit("spm_train not found: install Debian's sentencepiece package "
                         "(scripts/install_deps.sh does)")
    os.makedirs(folder, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "corpus.txt")
        with open(corpus, "w") as f:
            f.write("\n".join(corpus_lines(seed)) + "\n")
        subprocess.run([spm_train, f"--input={corpus}", f"--model_prefix={tmp}/tokenizer",
                        "--model_type=bpe", f"--vocab_size={vocab}", "--byte_fallback=true",
                        "--split_digits=true", "--allow_whitespace_only_pieces=true",
                        "--normalization_rule_name=identity", "--remove_extra_whitespaces=false",
                        "--add_dummy_prefix=true", "--num_threads=1", "--hard_vocab_limit=false",
                        "--minloglevel=2"], check=True, capture_output=True)
        shutil.copy(os.path.join(tmp, "tokenizer.model"), folder)
        with open(os.path.join(tmp, "tokenizer.vocab")) as f:
            return sum(1 for _ in f)


def write_tokenizer_config(folder, add_bos=True, add_eos=False):
    """tokenizer_config.json as LLaMA 2 folders have it."""
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"add_bos_token": add_bos, "add_eos_token": add_eos, "bos_token": "<s>",
                   "eos_token": "</s>", "unk_token": "<unk>", "legacy": False,
                   "tokenizer_class": "LlamaTokenizer"}, f, indent=2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--max_shard_size", default="200KB")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokenizer", action="store_true",
                    help="also a SentencePiece tokenizer (needs spm_train); sets the vocabulary")
    args = ap.parse_args()
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    special = dict(bos_token_id=None, eos_token_id=None)
    if args.tokenizer:
        args.vocab = train_tokenizer(args.dir, args.seed)
        write_tokenizer_config(args.dir)
        special = dict(bos_token_id=1, eos_token_id=2)
    torch.manual_seed(args.seed)
    config = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden,
                         intermediate_size=args.hidden * 11 // 4, num_hidden_layers=args.layers,
                         num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256, pad_token_id=None, **special)
    model = LlamaForCausalLM(config)
    model.save_pretrained(args.dir, max_shard_size=args.max_shard_size)
    print(f"{args.dir}: {sum(p.numel() for p in model.parameters())} parameters"
          + (f", a tokenizer of {args.vocab} pieces" if args.tokenizer else ""))


if __name__ == "__main__":
    main()
