#!/usr/bin/env python3
"""A Mixtral-shaped fine-tune on 2 ranks, ZeroRT next to transformers' Trainer + DeepSpeed ZeRO-3:
step time, peak RSS per rank, and bytes moved per step (issue 53 section 4).

    bench/peers/moe.py [--bin build/bin] [--steps 10] [--reps 7] [--jsonl FILE]

The job is tests/peers/hf_clm.py's Mixtral run, sized up: a LLaMA-3-style tokenizer (--vocab
tokens) and data.jsonl, a MixtralForCausalLM made by transformers (--layers layers, hidden
--hidden, --experts experts of width --expert_width, top-2, output_router_logits with
router_aux_loss_coef 0.02), block --block, micro-batch 2, ZeRO-3 fp32 (every parameter
partitioned: stage3_param_persistence_threshold 0), AdamW, --steps steps, one intra-op thread per
rank, eager attention on both sides. ZeroRT gathers each decoder layer with all its experts (the sparse block inside the layer's
unit); DeepSpeed gathers each sparse block whole (its default leaf modules) and the rest module
by module. Expert parallelism is not measured: ZeroRT does not implement it.

Per side, median [min, max] over --reps rotated rounds:
  * step: the Trainer's train_runtime / steps (the training loop alone);
  * peak RSS: the largest ru_maxrss of the side's processes (getrusage RUSAGE_CHILDREN of a
    wrapper process that runs only that side: the kernel's number, every rank and launcher);
Once per side, untimed, bytes per step per rank: the difference between a run of 2 x --steps and
one of --steps steps, divided by --steps (start-up, loading, evaluation and saving cancel):
  * ZeroRT: bytes handed to MPI (bench/pmpi's LD_PRELOAD counter: point-to-point sends plus
    collective inputs), per rank;
  * DeepSpeed (gloo over TCP): bytes through the loopback interface of a network namespace the
    two ranks run alone in (ip netns; TCP/IP headers included), halved per rank. Needs root.
Against the ZeRO-3 model: per step each rank sends (W-1)/W of the parameters' bytes for each of
the two gathers (forward, backward) and for the gradient reduce-scatter: 3 (W-1)/W x 4 P.
"""
import argparse
import json
import os
import resource
import shutil
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

NETNS = "zrt_bench_moe"


def side_once(args):
    """Runs one side once (this process is the wrapper): prints wall, train_runtime, max RSS."""
    with open(os.path.join(args.tmp, "run.json")) as f:
        run = json.load(f)
    out = tempfile.mkdtemp(dir=args.tmp)
    start = time.monotonic()
    if args.side == "zerort":
        env = dict(os.environ, OMP_NUM_THREADS="1")
        launch = [os.path.join(args.bin, "zrt-launch"), "--np", "2", "--timeout", "1800", "--"]
        if args.pmpi:  # the counter preloaded into the ranks only: mpirun itself
            launch = ["mpirun", "-np", "2", "--bind-to", "none", "--timeout", "1800",
                      "-x", "OMP_NUM_THREADS", "-x", f"LD_PRELOAD={args.pmpi}",
                      "-x", f"ZRT_PMPI_OUT={args.pmpi_out}"]
        cmd = launch + [os.path.join(args.bin, "zrt-train")] + hf_clm.zrt_argv(args.tmp, run, out)
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=1900, env=env)
        if done.returncode != 0:
            raise SystemExit(f"zrt-train failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
        with open(os.path.join(out, "train_results.json")) as f:
            train = json.load(f)["train_runtime"]
    else:
        failed = run_ranks([hf_clm.__file__, "--worker", args.tmp], 2, 1800, "moe_bench_hf")
        if failed:
            raise SystemExit(f"HF Trainer + DeepSpeed failed: {failed}")
        with open(os.path.join(args.tmp, "hf_result.json")) as f:
            train = json.load(f)["train"]["train_runtime"]
    wall = time.monotonic() - start
    shutil.rmtree(out, ignore_errors=True)
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
    print(json.dumps({"wall_s": wall, "train_runtime_s": train, "peak_rss_mib": rss}))


def run_side(args, tmp, run, side, steps, prefix=(), pmpi=None):
    run = dict(run, steps=steps)
    with open(os.path.join(tmp, "run.json"), "w") as f:
        json.dump(run, f)
    cmd = list(prefix) + [sys.executable, os.path.abspath(__file__), "--side", side, "--tmp", tmp,
                          "--bin", args.bin]
    if pmpi:
        cmd += ["--pmpi", pmpi[0], "--pmpi_out", pmpi[1]]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=2000)
    if done.returncode != 0:
        raise SystemExit(f"{side} failed: {done.stdout[-3000:]}{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def loopback_bytes():
    out = subprocess.run(["ip", "netns", "exec", NETNS, "cat", "/sys/class/net/lo/statistics/tx_bytes"],
                         capture_output=True, text=True, check=True)
    return int(out.stdout)


def bytes_per_step(args, tmp, run, side):
    """Per rank and step, from runs of --steps and 2 x --steps steps."""
    totals = []
    for steps in (args.steps, 2 * args.steps):
        if side == "zerort":
            lib = os.path.join(os.path.dirname(args.bin), "bench", "pmpi", "libzrt_pmpi_count.so")
            path = os.path.join(tmp, "pmpi.jsonl")
            if os.path.exists(path):
                os.remove(path)
            run_side(args, tmp, run, side, steps, pmpi=(lib, path))
            with open(path) as f:
                rows = [json.loads(line) for line in f]
            totals.append(sum(r["p2p_send_bytes"] + r["coll_bytes"] for r in rows) / len(rows))
        else:
            before = loopback_bytes()
            run_side(args, tmp, run, side, steps, prefix=["ip", "netns", "exec", NETNS])
            totals.append((loopback_bytes() - before) / 2)
    return (totals[1] - totals[0]) / args.steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--block", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--expert_width", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=2000)
    ap.add_argument("--docs", type=int, default=6000)
    ap.add_argument("--jsonl")
    ap.add_argument("--side", help=argparse.SUPPRESS)
    ap.add_argument("--tmp", help=argparse.SUPPRESS)
    ap.add_argument("--pmpi", help=argparse.SUPPRESS)
    ap.add_argument("--pmpi_out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.side:
        return side_once(args)
    os.environ["OMP_NUM_THREADS"] = "1"
    heads = args.hidden // 32
    run = dict(hf_clm.MIXTRAL_RUN, steps=args.steps, block=args.block, vocab=args.vocab,
               docs=args.docs, doc_words=60, val_pct=5, lr=1e-4, attn="eager",
               model=dict(hidden_size=args.hidden, intermediate_size=args.expert_width,
                          num_hidden_layers=args.layers, num_attention_heads=heads,
                          num_key_value_heads=max(1, heads // 2), num_local_experts=args.experts,
                          num_experts_per_tok=2, output_router_logits=True,
                          router_aux_loss_coef=0.02, max_position_embeddings=max(512, args.block)))
    out = Jsonl(args.jsonl)
    tmp = tempfile.mkdtemp(prefix="zrt_bench_moe_")
    hf_clm.make_inputs(tmp, run)
    from transformers import AutoConfig
    cfg = AutoConfig.from_pretrained(os.path.join(tmp, "model"))
    from transformers import AutoModelForCausalLM
    params = sum(p.numel() for p in AutoModelForCausalLM.from_config(cfg).parameters())
    model_bytes = 3 * 0.5 * 4 * params  # 3 (W - 1)/W x 4 P at W = 2
    out({"meta": machine_meta(run=run, parameters=params)})
    print(f"Mixtral-shaped: {params} parameters; ZeRO-3 model: {model_bytes / 2**20:.1f} MiB per "
          f"rank and step", flush=True)
    sides = ["zerort", "hf_deepspeed"]
    rows = {s: [] for s in sides}
    for rep, _, side in rotations(sides, args.reps):
        r = run_side(args, tmp, run, side, args.steps)
        step = r["train_runtime_s"] / args.steps
        rows[side].append((step, r["peak_rss_mib"]))
        out(dict(r, framework=side, rep=rep, step_s=step))
        print(f"rep {rep} {side:13s} step {step * 1000:7.1f} ms, peak RSS {r['peak_rss_mib']:6.0f} MiB",
              flush=True)
    subprocess.run(["ip", "netns", "add", NETNS], check=True)
    try:
        subprocess.run(["ip", "netns", "exec", NETNS, "ip", "link", "set", "lo", "up"], check=True)
        moved = {side: bytes_per_step(args, tmp, run, side) for side in sides}
    finally:
        subprocess.run(["ip", "netns", "delete", NETNS])
    out({"bytes_per_step_per_rank": moved, "zero3_model_bytes": model_bytes})
    print(f"\n| framework | step ms | peak RSS MiB | MiB moved per step and rank (model "
          f"{model_bytes / 2**20:.1f}) |  (median [min, max], {args.reps} reps)")
    print("|---|---|---|---|")
    for side in sides:
        step, rss = [r[0] * 1000 for r in rows[side]], [r[1] for r in rows[side]]
        print(f"| {side} | {statistics.median(step):.1f} [{min(step):.1f}, {max(step):.1f}] | "
              f"{statistics.median(rss):.0f} [{min(rss):.0f}, {max(rss):.0f}] | "
              f"{moved[side] / 2**20:.1f} |")
    out.close()
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
