#!/usr/bin/env python3
"""The LLaMA family's training step at contexts of 1024-4096 tokens, one process, one thread:
zrt-train (sdpa, no DeepSpeed config: stage 0, the engine's AdamW) against transformers' sdpa in a
plain loop (the peer a user would pick: AutoModelForCausalLM.from_config, torch.optim.AdamW) and
against a plain LibTorch loop over the same C++ model (build/bench/llama_step: models/llama.h and
torch::optim::AdamW, no engine), which is the runtime's own overhead.

    bench/llama_step.py [--bin build] [--contexts 1024,2048,4096] [--steps 4] [--reps 7]
                        [--jsonl FILE]

The model: examples/make_tiny_llama.py's folder resized to 4 layers, hidden 256, 8 heads with 4
key/value heads (GQA), its SentencePiece vocabulary; fp32, micro-batch 1, lr 1e-3, no weight
decay, no activation checkpointing. Each program trains --steps steps and reports their seconds
(zrt-train: train_runtime; the others: the timed loop); time per step = that / steps. Rotated
order, --reps rounds; reported: median, min and max, and the ratios of the medians. Needs the
bench programs: cmake -S . -B build -DZRT_BUILD_BENCH=ON && cmake --build build --target llama_step.
"""
import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "peers"))
from common import Jsonl, llama_config_folder, machine_meta, rotations  # noqa: E402

PROGRAMS = ("zrt-train", "transformers", "libtorch")
ENV = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")


def prepare(work, max_context, steps):
    folder, cfg = llama_config_folder(work, 4, 256, num_attention_heads=8, num_key_value_heads=4,
                                      head_dim=32, max_position_embeddings=max_context)
    rng = random.Random(3)
    words = "the model trains on long documents while every rank keeps its shard".split()
    with open(os.path.join(work, "data.txt"), "w") as f:
        for _ in range(max_context * (steps + 2) // 10):
            f.write(" ".join(rng.choice(words) for _ in range(20)) + "\n")
    return folder, cfg


def hf_worker(cfg, context, steps):
    """transformers' plain loop (bench/llama_step.py --worker CFG CONTEXT STEPS)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(cfg),
                                             attn_implementation="sdpa")
    model.config.use_cache = False
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    tokens = torch.randint(0, model.config.vocab_size, (1, context))
    start = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad()
        loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        opt.step()
    print(f"train_runtime {time.perf_counter() - start:.6f}")


def run(args, work, folder, cfg, program, context):
    if program == "zrt-train":
        out = tempfile.mkdtemp(dir=work)
        cmd = [os.path.join(args.bin, "bin", "zrt-train"), "--model", "llama", "--config_name", cfg,
               "--tokenizer_name", folder, "--train_file", os.path.join(work, "data.txt"),
               "--block_size", str(context), "--attn_implementation", "sdpa",
               "--max_steps", str(args.steps), "--per_device_train_batch_size", "1",
               "--learning_rate", "1e-3", "--weight_decay", "0", "--save_strategy", "no",
               "--do_train", "--logging_steps", "1", "--output_dir", out]
        subprocess.run(cmd, check=True, capture_output=True, env=ENV, timeout=3600)
        with open(os.path.join(out, "train_results.json")) as f:
            seconds = json.load(f)["train_runtime"]
        shutil.rmtree(out)
        return seconds / args.steps
    if program == "libtorch":
        cmd = [os.path.join(args.bin, "bench", "llama_step"), cfg, str(context), str(args.steps),
               "sdpa"]
    else:
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", cfg, str(context),
               str(args.steps)]
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, env=ENV, timeout=3600)
    line = next(l for l in done.stdout.splitlines() if l.startswith("train_runtime"))
    return float(line.split()[1]) / args.steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build"))
    ap.add_argument("--contexts", default="1024,2048,4096")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--jsonl")
    ap.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return hf_worker(args.worker[0], int(args.worker[1]), int(args.worker[2]))
    contexts = [int(c) for c in args.contexts.split(",")]
    out = Jsonl(args.jsonl)
    out({"meta": machine_meta(contexts=contexts, steps=args.steps, threads=1)})
    work = tempfile.mkdtemp(prefix="zrt_bench_llama_step_")
    rows = {}
    try:
        folder, cfg = prepare(work, max(contexts), args.steps)
        cases = [(p, c) for c in contexts for p in PROGRAMS]
        for rep, _, (program, context) in rotations(cases, args.reps):
            step = run(args, work, folder, cfg, program, context)
            rows.setdefault((program, context), []).append(step)
            out({"program": program, "context": context, "rep": rep, "step_s": step})
            print(f"rep {rep} {program:12s} {context:5d}: {step:.3f} s/step", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n1 process, 1 thread, fp32, {args.steps} steps, {args.reps} reps: s/step median [min, max]")
    for c in contexts:
        med = {p: statistics.median(rows[(p, c)]) for p in PROGRAMS}
        cells = "  ".join(f"{p} {med[p]:.3f} [{min(rows[(p, c)]):.3f}, {max(rows[(p, c)]):.3f}]"
                          for p in PROGRAMS)
        print(f"{c:5d}: {cells}  zrt/transformers {med['zrt-train'] / med['transformers']:.2f}x  "
              f"zrt/libtorch {med['zrt-train'] / med['libtorch']:.2f}x")
        out({"summary": c, **{p: med[p] for p in PROGRAMS}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
