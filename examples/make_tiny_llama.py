"""Makes a small random LLaMA model with transformers and saves it as save_pretrained does, for
trying zrt-generate and `zrt-train --model llama` without downloading anything:

    .venv/bin/python examples/make_tiny_llama.py DIR [--layers 4] [--hidden 128] [--max_shard_size 200KB]
"""
import argparse

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--max_shard_size", default="200KB")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    config = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden,
                         intermediate_size=args.hidden * 11 // 4, num_hidden_layers=args.layers,
                         num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256, bos_token_id=None, eos_token_id=None,
                         pad_token_id=None)
    model = LlamaForCausalLM(config)
    model.save_pretrained(args.dir, max_shard_size=args.max_shard_size)
    print(f"{args.dir}: {sum(p.numel() for p in model.parameters())} parameters")


if __name__ == "__main__":
    main()
