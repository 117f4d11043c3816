#!/usr/bin/env python3
"""A LoRA fine-tune of a LLaMA shape on 2 ranks under ZeRO-3: ZeroRT next to PEFT +
transformers' Trainer + DeepSpeed, and next to ZeroRT's full fine-tune (issue 50 section 4).

    bench/peers/lora.py [--bin build/bin] [--layers 22] [--dtype fp32] [--lean] [--steps 2]
                        [--reps 7] [--sides zerort_lora,hf_lora] [--jsonl FILE]
                        [--cap_mib MIB]

The model folder is a LlamaForCausalLM made by transformers from the ~1.1B LLaMA shape (hidden
2048, intermediate 5632, 32 heads, 4 key-value heads, vocabulary 32000; --layers decoder layers,
22 for the 1.1B model), saved in --dtype (fp32 or bf16); the data and tokenizer are
tests/peers/hf_clm.py's run 1 (the tokenizer's ids use the first few hundred rows of the
embedding). Both sides train TRL's default adapters (r 16, alpha 32, dropout 0.05 on q_proj and
v_proj) with AdamW, block --block, micro-batch 1, --steps steps, in --dtype (bf16: DeepSpeed's
"bf16": auto and --bf16), ZeRO-3 with the HF Trainer's "auto" buckets and thresholds and
DeepSpeed's defaults for the rest (stage3_max_live_parameters and stage3_max_reuse_distance 1e9:
a parameter used again within 1e9 elements stays gathered, so the layers gathered in the forward
wait for the backward; --lean sets them to 1e8 and 0, each layer released after its use), no
activation checkpointing, one intra-op thread per rank, sdpa.
  * zerort_lora: zrt-train --use_peft (the base partitioned as it loads);
  * hf_lora: TrainingArguments first (so from_pretrained builds the model under zero.Init, each
    rank holding its partition, as transformers' DeepSpeed guide says), then get_peft_model and
    Trainer.train();
  * zerort_lora_int8: zerort_lora with zero_quantized_nontrainable_weights (the frozen
    partitions held as int8 codes with qwZ's groups, dequantized for each gather);
  * zerort_full: zrt-train without adapters (every parameter trained: Adam states, and in bf16
    fp32 masters, for all of them).
Per side, median [min, max] over --reps rotated rounds:
  * step: the Trainer's train_runtime / steps;
  * peak RSS: the largest ru_maxrss of the side's processes (getrusage RUSAGE_CHILDREN of a
    wrapper process that runs only that side: the kernel's number, every rank and launcher).
The limit a rank cannot go under is its share of the frozen base: the parameters' bytes / 2.
--cap_mib runs every rank (each process the launcher starts, and what it execs) in a cgroup-v1
memory group of its own limited to MIB (this machine has no swap, so a rank past it is killed by
the kernel's OOM killer) and reports, per side and rep, whether the job finished under the cap;
the groups go again after each run.
On a CPU without AVX512-BF16, LibTorch's bf16 matmul of a row-major right operand (the input
gradient g @ W of every Linear) runs at a few hundred MFLOP/s, so a bf16 step of the 1.1B shape
takes minutes on either side; --dtype fp32 measures the same job at fp32 speed.
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

LORA = dict(r=16, lora_alpha=32, lora_dropout=0.05, target_modules=["q_proj", "v_proj"])
SHAPE = dict(hidden_size=2048, intermediate_size=5632, num_attention_heads=32,
             num_key_value_heads=4, max_position_embeddings=2048, vocab_size=32000)
AUTO = "auto"
DS_CONFIG = dict(hf_clm.DS_CONFIG, bf16={"enabled": AUTO}, zero_optimization={
    "stage": 3, "reduce_bucket_size": AUTO, "stage3_prefetch_bucket_size": AUTO,
    "stage3_param_persistence_threshold": AUTO})


def make_inputs(tmp, run, layers, dtype, lean=False):
    """hf_clm's data and tokenizer, and the LLaMA folder of the bench's shape in `dtype`."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    hf_clm.make_inputs(tmp, run)
    folder = os.path.join(tmp, "model")
    with open(os.path.join(folder, "config.json")) as f:
        small = json.load(f)
    torch.manual_seed(3)
    config = LlamaConfig(**SHAPE, num_hidden_layers=layers, tie_word_embeddings=False,
                         bos_token_id=small["bos_token_id"], eos_token_id=small["eos_token_id"])
    model = LlamaForCausalLM(config).to(torch.bfloat16 if dtype == "bf16" else torch.float32)
    params = sum(p.numel() for p in model.parameters())
    for name in os.listdir(folder):
        if name.startswith("model") and name.endswith((".safetensors", ".json")):
            os.remove(os.path.join(folder, name))
    model.save_pretrained(folder)
    config = json.loads(json.dumps(DS_CONFIG))
    if lean:
        config["zero_optimization"].update(stage3_max_live_parameters=int(1e8),
                                           stage3_max_reuse_distance=0)
    with open(os.path.join(tmp, "ds.json"), "w") as f:
        json.dump(config, f)
    config["zero_optimization"]["zero_quantized_nontrainable_weights"] = True
    with open(os.path.join(tmp, "ds_int8.json"), "w") as f:
        json.dump(config, f)
    return params


CGROUP = "/sys/fs/cgroup/memory/zrt_bench_lora"


def enter_cap(mib):
    """Moves this process into a memory cgroup of its own limited to `mib` MiB."""
    group = os.path.join(CGROUP, f"rank_{os.getpid()}")
    os.makedirs(group, exist_ok=True)
    with open(os.path.join(group, "memory.limit_in_bytes"), "w") as f:
        f.write(str(int(mib) * 2**20))
    with open(os.path.join(group, "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))


def remove_caps():
    """Removes the rank groups (empty once their processes are gone) and their parent."""
    if not os.path.isdir(CGROUP):
        return
    for name in os.listdir(CGROUP):
        if name.startswith("rank_"):
            for _ in range(50):
                try:
                    os.rmdir(os.path.join(CGROUP, name))
                    break
                except OSError:
                    time.sleep(0.1)
    os.rmdir(CGROUP)


def hf_worker(tmp):
    """One rank of the PEFT + Trainer + DeepSpeed side (started by run_ranks)."""
    if os.environ.get("ZRT_BENCH_CAP_MIB"):
        enter_cap(os.environ["ZRT_BENCH_CAP_MIB"])
    import deepspeed
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import (AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments,
                              default_data_collator)
    torch.set_num_threads(1)
    with open(os.path.join(tmp, "run.json")) as f:
        run = json.load(f)
    deepspeed.init_distributed(dist_backend="gloo")
    args = TrainingArguments(
        output_dir=os.path.join(tmp, "hf"), deepspeed=os.path.join(tmp, "ds.json"),
        bf16=run["dtype"] == "bf16",
        per_device_train_batch_size=1, max_steps=run["steps"], learning_rate=run["lr"],
        warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0, seed=run["seed"], logging_steps=1,
        save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True)
    folder = os.path.join(tmp, "model")
    model = AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.bfloat16 if run["dtype"] == "bf16" else torch.float32,
        attn_implementation="sdpa")
    model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", **LORA))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    train_docs, _ = hf_clm.run_clm_documents(tmp, run)
    train = hf_clm.run_clm_blocks(tokenizer, train_docs, run["block"])

    trainer = Trainer(model=model, args=args, train_dataset=hf_clm.labelled_blocks(train),
                      data_collator=default_data_collator)
    metrics = trainer.train().metrics
    if torch.distributed.get_rank() == 0:
        with open(os.path.join(tmp, "hf_result.json"), "w") as f:
            json.dump(metrics, f)


def side_once(args):
    """Runs one side once (this process is the wrapper): prints train_runtime and max RSS."""
    with open(os.path.join(args.tmp, "run.json")) as f:
        run = json.load(f)
    out = tempfile.mkdtemp(dir=args.tmp)
    start = time.monotonic()
    if args.side.startswith("zerort"):
        env = dict(os.environ, OMP_NUM_THREADS="1")
        argv = hf_clm.zrt_argv(args.tmp, run, out)
        argv.remove("--do_eval")
        argv[argv.index("--warmup_steps") + 1] = "0"
        argv += (["--bf16"] if run["dtype"] == "bf16" else []) + (
            ["--use_peft"] if args.side.startswith("zerort_lora") else [])
        if args.side == "zerort_lora_int8":
            argv[argv.index("--deepspeed") + 1] = os.path.join(args.tmp, "ds_int8.json")
        capped = [sys.executable, os.path.abspath(__file__), "--cap_exec", str(args.cap_mib),
                  "--"] if args.cap_mib else []
        cmd = [os.path.join(args.bin, "zrt-launch"), "--np", "2", "--timeout", "3000", "--"] + \
            capped + [os.path.join(args.bin, "zrt-train")] + argv
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=3100, env=env)
        if done.returncode != 0:
            if args.cap_mib:
                return print(json.dumps({"fits": False, "error": done.stderr[-300:]}))
            raise SystemExit(f"zrt-train failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
        with open(os.path.join(out, "train_results.json")) as f:
            train = json.load(f)["train_runtime"]
    else:
        if args.cap_mib:
            os.environ["ZRT_BENCH_CAP_MIB"] = str(args.cap_mib)
        failed = run_ranks([os.path.abspath(__file__), "--worker", args.tmp], 2, 3000,
                           "lora_bench_hf")
        if failed and args.cap_mib:
            return print(json.dumps({"fits": False, "error": str(failed)[-300:]}))
        if failed:
            raise SystemExit(f"PEFT + Trainer + DeepSpeed failed: {failed}")
        with open(os.path.join(args.tmp, "hf_result.json")) as f:
            train = json.load(f)["train_runtime"]
    wall = time.monotonic() - start
    shutil.rmtree(out, ignore_errors=True)
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
    print(json.dumps({"wall_s": wall, "train_runtime_s": train, "peak_rss_mib": rss, "fits": True}))


def run_side(args, tmp, side):
    cmd = [sys.executable, os.path.abspath(__file__), "--side", side, "--tmp", tmp,
           "--bin", args.bin] + (["--cap_mib", str(args.cap_mib)] if args.cap_mib else [])
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=3200)
    finally:
        remove_caps()
    if done.returncode != 0:
        raise SystemExit(f"{side} failed: {done.stdout[-3000:]}{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--layers", type=int, default=22)
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--lean", action="store_true",
                    help="stage3_max_live_parameters 1e8, stage3_max_reuse_distance 0")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--sides", default="zerort_lora,hf_lora")
    ap.add_argument("--jsonl")
    ap.add_argument("--cap_mib", type=int, help="each rank in a memory cgroup of MIB MiB")
    ap.add_argument("--cap_exec", type=int, help=argparse.SUPPRESS)
    ap.add_argument("command", nargs="*", help=argparse.SUPPRESS)
    ap.add_argument("--side", help=argparse.SUPPRESS)
    ap.add_argument("--tmp", help=argparse.SUPPRESS)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.cap_exec:  # one rank of a capped ZeroRT side: into its group, then the program
        enter_cap(args.cap_exec)
        os.execv(args.command[0], args.command)
    if args.worker:
        return hf_worker(args.worker)
    if args.side:
        return side_once(args)
    os.environ["OMP_NUM_THREADS"] = "1"
    sides = args.sides.split(",")
    unknown = set(sides) - {"zerort_lora", "zerort_lora_int8", "hf_lora", "zerort_full"}
    if unknown:
        raise SystemExit(f"--sides: unknown {sorted(unknown)}")
    run = dict(hf_clm.RUN, steps=args.steps, block=args.block, micro=1, lr=1e-4, attn="sdpa",
               save_steps=None, docs=2000, dtype=args.dtype, lean=args.lean)
    out = Jsonl(args.jsonl)
    tmp = tempfile.mkdtemp(prefix="zrt_bench_lora_")
    try:
        params = make_inputs(tmp, run, args.layers, args.dtype, args.lean)
        with open(os.path.join(tmp, "run.json"), "w") as f:
            json.dump(run, f)
        limit = (2 if args.dtype == "bf16" else 4) * params / 2 / 2**20  # per rank, 2 ranks
        out({"meta": machine_meta(run=run, parameters=params, layers=args.layers)})
        print(f"LLaMA shape, {args.layers} layers, {args.dtype}: {params} parameters; the frozen "
              f"base's share per rank: {limit:.0f} MiB", flush=True)
        rows = {s: [] for s in sides}
        for rep, _, side in rotations(sides, args.reps):
            r = run_side(args, tmp, side)
            if not r["fits"]:
                out(dict(r, framework=side, rep=rep, cap_mib=args.cap_mib))
                print(f"rep {rep} {side:12s} did not finish under {args.cap_mib} MiB per rank: "
                      f"{r['error'][-200:]}", flush=True)
                continue
            if args.cap_mib:
                r["cap_mib"] = args.cap_mib
            step = r["train_runtime_s"] / args.steps
            rows[side].append((step, r["peak_rss_mib"]))
            out(dict(r, framework=side, rep=rep, step_s=step))
            print(f"rep {rep} {side:12s} step {step:7.2f} s, peak RSS "
                  f"{r['peak_rss_mib']:6.0f} MiB", flush=True)
        out({"frozen_share_mib": limit})
        print(f"\n| side | step s | peak RSS MiB | RSS - frozen share ({limit:.0f} MiB) |  "
              f"(median [min, max], {args.reps} reps)")
        print("|---|---|---|---|")
        for side in sides:
            if not rows[side]:
                print(f"| {side} | did not finish under the cap | | |")
                continue
            step, rss = [r[0] for r in rows[side]], [r[1] for r in rows[side]]
            print(f"| {side} | {statistics.median(step):.2f} [{min(step):.2f}, {max(step):.2f}] | "
                  f"{statistics.median(rss):.0f} [{min(rss):.0f}, {max(rss):.0f}] | "
                  f"{statistics.median(rss) - limit:.0f} |")
    finally:
        out.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
