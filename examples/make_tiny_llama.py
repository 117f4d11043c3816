"""Makes a small random LLaMA model with transformers and saves it as save_pretrained does, for
trying zrt-generate and `zrt-train --model llama` without downloading anything:

    .venv/bin/python examples/make_tiny_llama.py DIR [--layers 4] [--hidden 128] [--max_shard_size 200KB]
                                                     [--tokenizer [sentencepiece|llama3]]

--tokenizer (sentencepiece) also trains a small SentencePiece model (BPE with byte fallback, LLaMA
2's kind) with Debian's spm_train (package `sentencepiece`, from scripts/install_deps.sh) on a
generated corpus, and writes it as LLaMA 2 folders have it: tokenizer.model and
tokenizer_config.json (BOS added, no EOS); the model's vocabulary is then the tokenizer's pieces,
with BOS 1 and EOS 2. --tokenizer llama3 makes a LLaMA 3 folder instead: a byte-level BPE
tokenizer.json trained by the `tokenizers` package (LLaMA 3's split regex, ignore_merges,
<|begin_of_text|> added by its post-processor) and LLaMA 3.1's rope scaling (rope_type llama3).
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


LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_BOS, LLAMA3_EOS = "<|begin_of_text|>", "<|end_of_text|>"


def train_llama3_tokenizer(folder, texts, vocab=400):
    """A LLaMA 3 style tokenizer.json (and tokenizer_config.json) trained by `tokenizers` on
    `texts`; returns (vocabulary size, BOS id, EOS id)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    os.makedirs(folder, exist_ok=True)
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=[LLAMA3_BOS, LLAMA3_EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    bos = tok.token_to_id(LLAMA3_BOS)
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{LLAMA3_BOS} $A",
                                      pair=f"{LLAMA3_BOS} $A {LLAMA3_BOS} $B",
                                      special_tokens=[(LLAMA3_BOS, bos)])])
    tok.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": LLAMA3_BOS,
                   "eos_token": LLAMA3_EOS, "model_max_length": 131072}, f, indent=2)
    return tok.get_vocab_size(), bos, tok.token_to_id(LLAMA3_EOS)


# LLaMA 3.1's rotary scaling (with a short original context, so that it matters at these sizes).
LLAMA3_ROPE = dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
                   high_freq_factor=4.0, original_max_position_embeddings=32)


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
    ap.add_argument("--tokenizer", nargs="?", const="sentencepiece",
                    choices=["sentencepiece", "llama3"],
                    help="also a tokenizer: sentencepiece (tokenizer.model, needs spm_train) or "
                         "llama3 (tokenizer.json); sets the vocabulary")
    args = ap.parse_args()
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    special = dict(bos_token_id=None, eos_token_id=None)
    if args.tokenizer == "sentencepiece":
        args.vocab = train_tokenizer(args.dir, args.seed)
        write_tokenizer_config(args.dir)
        special = dict(bos_token_id=1, eos_token_id=2)
    elif args.tokenizer == "llama3":
        args.vocab, bos, eos = train_llama3_tokenizer(args.dir, corpus_lines(args.seed, 2000))
        special = dict(bos_token_id=bos, eos_token_id=eos, rope_parameters=LLAMA3_ROPE)
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
