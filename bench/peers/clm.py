#!/usr/bin/env python3
"""The run_clm fine-tuning job, ZeroRT next to transformers' Trainer + DeepSpeed: tokens/s of the
whole job and of its training (issue 39 section 4).

    bench/peers/clm.py [--bin build/bin] [--steps 10] [--reps 7] [--jsonl FILE]

The job is tests/peers/hf_clm.py's, sized up: a LLaMA-3-style folder (byte-level BPE with LLaMA-3's
split regex, --vocab tokens, trained by `tokenizers`; a LlamaForCausalLM with LLaMA-3 rope scaling,
--hidden wide, --layers decoder layers, heads of 32, half as many key/value heads), a data.jsonl
of --docs documents of up to 60 words, block size --block, micro-batch 2, 2 ranks, ZeRO-3 fp32,
AdamW with warmup, --steps steps, then evaluation on the held-out 5% and the model saved in HF
format. ZeroRT: `zrt-launch --np 2 -- zrt-train` with the flags run_clm.py takes (its token cache
deleted before every run, so each run tokenizes the data, as the Trainer side does in-process).
The peer: hf_clm.py's Trainer worker (AutoTokenizer, run_clm's tokenize and group_texts,
default_data_collator, the Trainer's sampler; DeepSpeed on gloo). One intra-op thread per rank on
both sides (OMP_NUM_THREADS=1; the Trainer side also torch.set_num_threads(1)); eager attention
on both.

Reported per side, median [min, max] over --reps rotated rounds:
  * job tokens/s: trained tokens (steps x 2 ranks x 2 x block) over the wall time of the whole
    job (launch to exit: start-up, tokenization, training, evaluation, saving);
  * train tokens/s: the same tokens over the Trainer's train_runtime (the training loop alone).
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "peers"))
from common import Jsonl, machine_meta, rotations  # noqa: E402
import hf_clm  # noqa: E402
from peer_launch import run_ranks  # noqa: E402


def run_zerort(args, tmp, run):
    for cache in glob.glob(os.path.join(tmp, "data.jsonl.*.zrt-tokens")):
        os.remove(cache)
    out = tempfile.mkdtemp(dir=tmp)
    cmd = [os.path.join(args.bin, "zrt-launch"), "--np", "2", "--timeout", "1200", "--",
           os.path.join(args.bin, "zrt-train")] + hf_clm.zrt_argv(tmp, run, out)
    start = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1300,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    wall = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"zrt-train failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    with open(os.path.join(out, "train_results.json")) as f:
        return wall, json.load(f)["train_runtime"]


def run_hf(args, tmp, run):
    start = time.monotonic()
    failed = run_ranks([hf_clm.__file__, "--worker", tmp], 2, 1200, "clm_bench_hf")
    wall = time.monotonic() - start
    if failed:
        raise SystemExit(f"HF Trainer + DeepSpeed failed: {failed}")
    with open(os.path.join(tmp, "hf_result.json")) as f:
        return wall, json.load(f)["train"]["train_runtime"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--block", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=2000)
    ap.add_argument("--docs", type=int, default=20000)
    ap.add_argument("--jsonl")
    args = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = "1"
    heads = args.hidden // 32
    run = dict(hf_clm.RUN, steps=args.steps, block=args.block, vocab=args.vocab, docs=args.docs,
               doc_words=60, val_pct=5, lr=1e-4, attn="eager",
               model=dict(hidden_size=args.hidden, intermediate_size=(args.hidden * 43 // 16 + 7) // 8 * 8,
                          num_hidden_layers=args.layers, num_attention_heads=heads,
                          num_key_value_heads=max(1, heads // 2),
                          max_position_embeddings=max(512, args.block)))
    tokens = args.steps * run["world"] * run["micro"] * args.block
    out = Jsonl(args.jsonl)
    out({"meta": machine_meta(run=run, tokens=tokens)})
    tmp = tempfile.mkdtemp(prefix="zrt_bench_clm_")
    hf_clm.make_inputs(tmp, run)
    print(f"data: {os.path.getsize(os.path.join(tmp, 'data.jsonl')) / 2**20:.1f} MiB, "
          f"{tokens} trained tokens per run", flush=True)
    sides = ["zerort", "hf_deepspeed"]
    rows = {s: [] for s in sides}
    for rep, _, side in rotations(sides, args.reps):
        wall, train = (run_zerort if side == "zerort" else run_hf)(args, tmp, run)
        rows[side].append((tokens / wall, tokens / train))
        out({"framework": side, "rep": rep, "wall_s": wall, "train_runtime_s": train,
             "job_tokens_per_s": tokens / wall, "train_tokens_per_s": tokens / train})
        print(f"rep {rep} {side:13s} job {wall:6.1f} s ({tokens / wall:7.0f} tokens/s), "
              f"train {train:6.1f} s ({tokens / train:7.0f} tokens/s)", flush=True)
    print(f"\n| framework | job tokens/s | train tokens/s |  (median [min, max], {args.reps} reps)")
    print("|---|---|---|")
    for side in sides:
        job, train = [r[0] for r in rows[side]], [r[1] for r in rows[side]]
        print(f"| {side} | {statistics.median(job):.0f} [{min(job):.0f}, {max(job):.0f}] | "
              f"{statistics.median(train):.0f} [{min(train):.0f}, {max(train):.0f}] |")
    out.close()


if __name__ == "__main__":
    main()
