#!/usr/bin/env python3
"""Activation checkpointing: peak RSS per rank and time per step with and without it, ZeroRT
next to HF Trainer + DeepSpeed doing the same (issue 34).

    bench/peers/checkpointing.py [--bin build/bin] [--context 1024] [--layers 4] [--steps 4]
                                 [--reps 7] [--jsonl FILE]

The model: a LLaMA configuration made by transformers (--hidden, default 128, with hidden/16
heads of 16 and intermediate 43/16 of the hidden rounded up to 8: 344 at 128; vocab 512; --layers
decoder layers), at sequence length --context where the activations (the
eager attention's batch x heads x T x T scores and probabilities per layer) are many times the
parameters. Both sides: 2 ranks, ZeRO-3 fp32, micro-batch 1, AdamW lr 1e-3, one intra-op thread
per rank, eager attention, every decoder layer checkpointed when on (zrt-train
--gradient_checkpointing; the Trainer's gradient_checkpointing with use_reentrant False). ZeroRT
runs zrt-train under zrt-launch, DeepSpeed runs transformers' Trainer on gloo ranks
(DS_ACCELERATOR=cpu). Time per step: the run's train_runtime / steps (the first step included,
the same on both sides). Peak RSS: the largest rank's (getrusage; the HF side's includes the
Python interpreter and torch, about 700 MiB more than a C++ rank). The four variants run in
rotated order, --reps rounds; reported: median, min and max. --only zerort (or hf_deepspeed)
runs one side's two variants.

Where the recompute's time goes (ZeroRT side): its runs also turn on DeepSpeed's
wall_clock_breakdown and activation_checkpointing.profile, so rank 0 logs each step's forward,
backward and recompute (inside the backward) times; the medians over steps 2.. of every run are
reported, with the floor the issue names, one extra forward of the checkpointed layers:
(step without + recompute) / step without, against the measured ratio.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "peers"))
from common import Jsonl, machine_meta, rotations  # noqa: E402
from peer_launch import run_ranks  # noqa: E402

DS = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
      "train_batch_size": "auto", "gradient_clipping": "auto",
      "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.0}},
      "zero_optimization": {"stage": 3}, "steps_per_print": 1000000}
# ZeroRT's runs: the same, with the per-step timers (they only read clocks on the CPU).
DS_TIMED = dict(DS, wall_clock_breakdown=True, activation_checkpointing={"profile": True})
TIMES = re.compile(r"time \(ms\) \| fwd: ([0-9.e+-]+) \| bwd: ([0-9.e+-]+) .*"
                   r"recompute \(in bwd_inner\): ([0-9.e+-]+)")
PEAK = ("import os, resource, subprocess, sys\n"
        "rc = subprocess.call(sys.argv[1:])\n"
        "kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
        "print(f\"peak_rss rank {os.environ['OMPI_COMM_WORLD_RANK']} {kb} KiB\", file=sys.stderr)\n"
        "sys.exit(rc)\n")


def run_zerort(args, work, ckpt):
    out = tempfile.mkdtemp(dir=work)
    cmd = [os.path.join(args.bin, "zrt-launch"), "--np", "2", "--timeout", "900", "--",
           sys.executable, "-c", PEAK, os.path.join(args.bin, "zrt-train"), "--model", "llama",
           "--attn_implementation", "eager",
           "--config_name", os.path.join(work, "config", "config.json"), "--deepspeed",
           os.path.join(work, "ds_timed.json"), "--output_dir", out, "--max_steps", str(args.steps),
           "--per_device_train_batch_size", "1", "--context", str(args.context),
           "--learning_rate", "1e-3", "--save_strategy", "no", "--logging_steps", "1"]
    if ckpt:
        cmd.append("--gradient_checkpointing")
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=1000)
    if run.returncode != 0:
        raise SystemExit(f"zrt-train failed: {run.stdout[-2000:]}{run.stderr[-2000:]}")
    peaks = [int(l.split()[3]) / 1024 for l in run.stderr.splitlines() if l.startswith("peak_rss")]
    with open(os.path.join(out, "train_results.json")) as f:
        runtime = json.load(f)["train_runtime"]
    times = [tuple(float(x) for x in m.groups()) for m in TIMES.finditer(run.stdout + run.stderr)]
    return runtime / args.steps, max(peaks), times[1:]


def run_hf(args, work, ckpt):
    out = tempfile.mkdtemp(dir=work)
    failed = run_ranks([os.path.join(HERE, "checkpointing_hf_worker.py"),
                        os.path.join(work, "config"), os.path.join(work, "ds.json"), out,
                        str(args.context), str(args.steps), "1" if ckpt else "0"], 2, 1200,
                       "checkpointing_hf")
    if failed:
        raise SystemExit(f"HF Trainer + DeepSpeed failed: {failed}")
    ranks = [json.load(open(os.path.join(out, f"rank{r}.json"))) for r in range(2)]
    return (max(r["train_runtime"] for r in ranks) / args.steps,
            max(r["peak_rss_mib"] for r in ranks), [])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=128, help="hidden size (heads: hidden / 16)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--only", choices=["zerort", "hf_deepspeed"])
    ap.add_argument("--jsonl")
    args = ap.parse_args()
    from transformers import LlamaConfig
    out = Jsonl(args.jsonl)
    out({"meta": machine_meta(context=args.context, layers=args.layers, hidden=args.hidden,
                              steps=args.steps)})
    work = tempfile.mkdtemp(prefix="zrt_bench_ckpt_")
    LlamaConfig(vocab_size=512, hidden_size=args.hidden,
                intermediate_size=(args.hidden * 43 // 16 + 7) // 8 * 8,
                num_hidden_layers=args.layers, num_attention_heads=args.hidden // 16,
                num_key_value_heads=args.hidden // 16,
                max_position_embeddings=args.context, tie_word_embeddings=False,
                bos_token_id=None, eos_token_id=None, pad_token_id=None).save_pretrained(
                    os.path.join(work, "config"))
    for name, config in (("ds.json", DS), ("ds_timed.json", DS_TIMED)):
        with open(os.path.join(work, name), "w") as f:
            json.dump(config, f)
    variants = [(fw, ckpt) for fw in ("zerort", "hf_deepspeed") for ckpt in (False, True)
                if args.only in (None, fw)]
    rows = {v: [] for v in variants}
    steps = {v: [] for v in variants}  # (fwd, bwd, recompute) ms of each step after the first
    for rep, pos, v in rotations(variants, args.reps):
        step_s, peak, times = (run_zerort if v[0] == "zerort" else run_hf)(args, work, v[1])
        rows[v].append((step_s, peak))
        steps[v] += times
        out({"framework": v[0], "checkpointing": v[1], "rep": rep, "step_s": step_s,
             "peak_rss_mib": peak, "step_times_ms": times})
        print(f"rep {rep} {v[0]:13s} ckpt={int(v[1])}: {step_s:.3f} s/step, peak {peak:.0f} MiB",
              flush=True)
    print(f"\nhidden {args.hidden}, context {args.context}, {args.layers} layers, 2 ranks, ZeRO-3 fp32, {args.reps} reps "
          "(median [min, max])")
    print(f"{'framework':13s} {'ckpt':4s} {'s/step':>24s} {'peak RSS MiB':>24s}")
    med = {}
    for v in variants:
        t = [r[0] for r in rows[v]]
        m = [r[1] for r in rows[v]]
        med[v] = (statistics.median(t), statistics.median(m))
        print(f"{v[0]:13s} {'on' if v[1] else 'off':4s} {med[v][0]:8.3f} [{min(t):.3f}, "
              f"{max(t):.3f}]  {med[v][1]:8.0f} [{min(m):.0f}, {max(m):.0f}]")
    for fw in sorted({v[0] for v in variants}):
        off, on = med[(fw, False)], med[(fw, True)]
        print(f"{fw}: checkpointing costs {on[0] / off[0]:.2f}x the step, peak RSS "
              f"{on[1] / off[1]:.2f}x")
        out({"summary": fw, "step_ratio": on[0] / off[0], "rss_ratio": on[1] / off[1]})
    if steps.get(("zerort", False)) and steps.get(("zerort", True)):
        f0, b0, _ = (statistics.median(s[i] for s in steps[("zerort", False)]) for i in range(3))
        f1, b1, r1 = (statistics.median(s[i] for s in steps[("zerort", True)]) for i in range(3))
        floor = (f0 + b0 + r1) / (f0 + b0)
        print(f"zerort per step (median of steps 2..{args.steps} of every run, ms): without: "
              f"forward {f0:.0f}, backward {b0:.0f}; with: forward {f1:.0f}, backward {b1:.0f} "
              f"of which recompute {r1:.0f} ({r1 / f0:.2f}x the forward, embedding and head "
              f"included); floor (one extra forward of the layers) {floor:.2f}x, measured "
              f"{(f1 + b1) / (f0 + b0):.2f}x; backward without the recompute {b1 - r1:.0f} "
              f"against {b0:.0f}")
        out({"summary": "zerort_breakdown_ms", "fwd_off": f0, "bwd_off": b0, "fwd_on": f1,
             "bwd_on": b1, "recompute": r1, "floor_ratio": floor,
             "measured_ratio": (f1 + b1) / (f0 + b0)})


if __name__ == "__main__":
    main()
