#!/usr/bin/env python3
"""Tiled logits + loss and tiled MLP (Notes [Tiled logits and loss], [Tiled MLP] in models/): peak
RSS per rank and time per step of zrt-train at a long context and a LLaMA-2-sized vocabulary, with
the loss computed whole (the (tokens, vocab) logits, their fp32 log-softmax and gradients) against
--tiled_loss_tokens N, and with --mlp_tile also --tiled_mlp_tokens N on top.

    bench/tiled_loss.py [--bin build/bin] [--context 4096] [--vocab 32000] [--tile 1024]
                        [--intermediate I] [--mlp_tile N] [--steps 2] [--reps 7] [--jsonl FILE]

The model: a LLaMA folder made by examples/make_tiny_llama.py (SentencePiece tokenizer, hidden 128,
2 layers), trained from its configuration with the vocabulary raised to --vocab,
max_position_embeddings to --context and (with --intermediate) the MLP's width to I (--config_name, the folder's tokenizer by --tokenizer_name),
on generated text (run_clm's blocks of --context tokens). Both variants: 2 ranks under zrt-launch,
ZeRO-3 fp32, micro-batch 1, sdpa attention, every decoder layer checkpointed, one intra-op thread
per rank. Peak RSS: the largest rank's (getrusage of the rank process). Time per step: the run's
train_runtime / steps. Rotated order, --reps rounds; reported: median, min and max.
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

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "peers"))
from common import Jsonl, llama_config_folder, machine_meta, rotations  # noqa: E402

PEAK = ("import os, resource, subprocess, sys\n"
        "rc = subprocess.call(sys.argv[1:])\n"
        "kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
        "print(f\"peak_rss rank {os.environ['OMPI_COMM_WORLD_RANK']} {kb} KiB\", file=sys.stderr)\n"
        "sys.exit(rc)\n")
DS = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
      "train_batch_size": "auto",
      "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.0}},
      "zero_optimization": {"stage": 3}, "steps_per_print": 1000000}


def prepare(args, work):
    sizes = {"intermediate_size": args.intermediate} if args.intermediate else {}
    folder, _ = llama_config_folder(work, 2, 128, vocab_size=args.vocab,
                                    max_position_embeddings=args.context, **sizes)
    rng = random.Random(5)
    words = "the model trains on long documents while every rank keeps its shard".split()
    with open(os.path.join(work, "data.txt"), "w") as f:
        for _ in range(args.context * args.steps * 3 // 10 + 200):
            f.write(" ".join(rng.choice(words) for _ in range(20)) + "\n")
    with open(os.path.join(work, "ds.json"), "w") as f:
        json.dump(DS, f)
    return folder


def run(args, work, folder, variant):
    tile, mlp_tile = variant
    out = tempfile.mkdtemp(dir=work)
    cmd = [os.path.join(args.bin, "zrt-launch"), "--np", "2", "--timeout", "900", "--",
           sys.executable, "-c", PEAK, os.path.join(args.bin, "zrt-train"), "--model", "llama",
           "--config_name", os.path.join(work, "config"), "--tokenizer_name", folder,
           "--train_file", os.path.join(work, "data.txt"), "--block_size", str(args.context),
           "--deepspeed", os.path.join(work, "ds.json"), "--output_dir", out,
           "--max_steps", str(args.steps), "--per_device_train_batch_size", "1",
           "--gradient_checkpointing", "--learning_rate", "1e-3", "--save_strategy", "no",
           "--do_train", "--logging_steps", "1", "--tiled_loss_tokens", str(tile),
           "--tiled_mlp_tokens", str(mlp_tile)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1000,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    if done.returncode != 0:
        raise SystemExit(f"zrt-train failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    peaks = [int(l.split()[3]) / 1024 for l in done.stderr.splitlines() if l.startswith("peak_rss")]
    with open(os.path.join(out, "train_results.json")) as f:
        runtime = json.load(f)["train_runtime"]
    with open(os.path.join(out, "trainer_state.json")) as f:
        losses = [e["loss"] for e in json.load(f)["log_history"] if "loss" in e]
    shutil.rmtree(out)
    return runtime / args.steps, max(peaks), losses


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--tile", type=int, default=1024)
    ap.add_argument("--intermediate", type=int)
    ap.add_argument("--mlp_tile", type=int, default=0)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--jsonl")
    args = ap.parse_args()
    out = Jsonl(args.jsonl)
    out({"meta": machine_meta(context=args.context, vocab=args.vocab, tile=args.tile,
                              intermediate=args.intermediate, mlp_tile=args.mlp_tile,
                              steps=args.steps)})
    work = tempfile.mkdtemp(prefix="zrt_bench_tiled_")
    try:
        folder = prepare(args, work)
        variants = [(0, 0), (args.tile, 0)] + ([(args.tile, args.mlp_tile)] if args.mlp_tile else [])
        rows = {v: [] for v in variants}
        losses = {}
        for rep, _, v in rotations(variants, args.reps):
            step_s, peak, loss = run(args, work, folder, v)
            rows[v].append((step_s, peak))
            losses.setdefault(v, loss)
            out({"tile": v[0], "mlp_tile": v[1], "rep": rep, "step_s": step_s,
                 "peak_rss_mib": peak, "losses": loss})
            print(f"rep {rep} tiles {v}: {step_s:.3f} s/step, peak {peak:.0f} MiB", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\ncontext {args.context}, vocab {args.vocab}, 2 ranks, ZeRO-3 fp32, {args.reps} reps "
          "(median [min, max])")
    for v in variants:
        t, m = [r[0] for r in rows[v]], [r[1] for r in rows[v]]
        name = "whole" if v == (0, 0) else f"loss tiles {v[0]}" + (f", MLP tiles {v[1]}" if v[1] else "")
        print(f"{name:28s} s/step {statistics.median(t):.3f} [{min(t):.3f}, {max(t):.3f}]  peak RSS "
              f"MiB {statistics.median(m):.0f} [{min(m):.0f}, {max(m):.0f}]  losses {losses[v]}")
        out({"summary": list(v), "step_s": statistics.median(t), "peak_rss_mib": statistics.median(m)})

if __name__ == "__main__":
    main()
