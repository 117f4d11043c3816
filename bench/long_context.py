#!/usr/bin/env python3
"""Long context: the longest sequence each way of training trains one optimizer step of a fixed
LLaMA shape on 2 ranks, each rank in its own memory cgroup capped at --cap_mib (the kernel's count
of the rank's memory; past it the rank is OOM-killed).

    bench/long_context.py [--bin build/bin] [--cap_mib 2048] [--start 1024] [--max_len 131072]
                          [--step_limit 900] [--ways a,b,...] [--jsonl FILE]

The shape (the folder examples/make_tiny_llama.py makes, resized): hidden 128, 2 layers, 4 heads
(GQA, 2 key/value heads), MLP width 512, vocabulary 32000, bf16, ZeRO-3, every decoder layer
checkpointed, micro-batch 1, AdamW, one intra-op thread per rank. Ways:

  zrt-eager      zrt-train --attn_implementation eager
  zrt-sdpa       zrt-train (sdpa)
  zrt-sp-tiled   zrt-train sdpa --sequence_parallel_size 2 --tiled_loss_tokens 1024
                 --tiled_mlp_tokens 1024 (Ulysses over both ranks, the loss and MLPs tiled)
  hf-sdpa        transformers' Trainer + DeepSpeed ZeRO-3, sdpa, gradient checkpointing
  hf-alst        the same with DeepSpeed's ALST as its tutorial wires it: Ulysses over both
                 ranks (accelerate's ParallelismConfig, sp_backend "deepspeed"), LlamaMLP patched
                 to DeepSpeed's TiledMLP, and the causal-LM loss through TiledFusedLogitsLoss

Each way trains blocks of --start tokens, then twice as many, until a step fails (a rank
OOM-killed or an error: its last lines are kept) or takes over --step_limit seconds. The data is
generated text (zrt-train: run_clm's blocks through the folder's tokenizer; the Trainer: the same
number of random token ids, which cost the same memory and time). Reported per way and length:
whether it trained, the step's time and the largest rank's peak cgroup memory.
"""
import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "peers"))
sys.path.insert(0, os.path.join(ROOT, "tests", "peers"))
from common import Jsonl, llama_config_folder, machine_meta  # noqa: E402

MEMCG = "/sys/fs/cgroup/memory"
WAYS = ("zrt-eager", "zrt-sdpa", "zrt-sp-tiled", "hf-sdpa", "hf-alst")
TILE = 1024
DS = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
      "train_batch_size": "auto", "bf16": {"enabled": "auto"},
      "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": 0.0}},
      "zero_optimization": {"stage": 3}, "steps_per_print": 1000000}


def cgroup(rank):
    return os.path.join(MEMCG, f"zrt_long_ctx_{rank}")


def make_cgroups(cap_mib):
    for r in range(2):
        cg = cgroup(r)
        if os.path.isdir(cg):
            remove_cgroup(cg)
        os.mkdir(cg)
        with open(os.path.join(cg, "memory.limit_in_bytes"), "w") as f:
            f.write(str(cap_mib << 20))


def remove_cgroup(cg):
    with open(os.path.join(cg, "cgroup.procs")) as f:
        for pid in f.read().split():
            try:
                os.kill(int(pid), 9)
            except ProcessLookupError:
                pass
    time.sleep(0.3)
    os.rmdir(cg)


def read_cgroups():
    """(the largest rank's peak MiB, OOM kills in all) since the groups were made."""
    peak, kills = 0, 0
    for r in range(2):
        with open(os.path.join(cgroup(r), "memory.max_usage_in_bytes")) as f:
            peak = max(peak, int(f.read()) >> 20)
        with open(os.path.join(cgroup(r), "memory.oom_control")) as f:
            kills += sum(int(l.split()[1]) for l in f if l.startswith("oom_kill "))
    return peak, kills


def prepare(work, max_len):
    folder, _ = llama_config_folder(work, 2, 128, vocab_size=32000, max_position_embeddings=max_len,
                                    intermediate_size=512, num_attention_heads=4,
                                    num_key_value_heads=2, head_dim=32, torch_dtype="bfloat16",
                                    dtype=None)
    rng = random.Random(5)
    words = "the model trains on long documents while every rank keeps its shard".split()
    # Long documents: run_clm cuts blocks from 1000 documents at a time, which must hold one.
    with open(os.path.join(work, "data.txt"), "w") as f:
        for _ in range(max_len // 200 + 1100):
            f.write(" ".join(rng.choice(words) for _ in range(400)) + "\n")
    with open(os.path.join(work, "ds.json"), "w") as f:
        json.dump(DS, f)
    return folder


def zrt_command(args, work, folder, way, length, out):
    flags = {"zrt-eager": ["--attn_implementation", "eager"], "zrt-sdpa": [],
             "zrt-sp-tiled": ["--sequence_parallel_size", "2", "--tiled_loss_tokens", str(TILE),
                              "--tiled_mlp_tokens", str(TILE)]}[way]
    into = f"echo $$ > {MEMCG}/zrt_long_ctx_$OMPI_COMM_WORLD_RANK/cgroup.procs && exec \"$@\""
    return [os.path.join(args.bin, "zrt-launch"), "--np", "2", "--timeout",
            str(args.step_limit + 300), "--", "sh", "-c", into, "_",
            os.path.join(args.bin, "zrt-train"), "--model", "llama",
            "--config_name", os.path.join(work, "config"), "--tokenizer_name", folder,
            "--train_file", os.path.join(work, "data.txt"), "--block_size", str(length),
            "--deepspeed", os.path.join(work, "ds.json"), "--output_dir", out, "--bf16", "true",
            "--max_steps", "1", "--per_device_train_batch_size", "1", "--gradient_checkpointing",
            "--learning_rate", "1e-3", "--save_strategy", "no", "--do_train",
            "--logging_steps", "1"] + flags


def zrt_step_seconds(out):
    with open(os.path.join(out, "train_results.json")) as f:
        return json.load(f)["train_runtime"]


def hf_worker(spec_path):
    """One rank of the Trainer's run (bench/long_context.py --worker SPEC)."""
    with open(spec_path) as f:
        spec = json.load(f)
    with open(os.path.join(MEMCG, f"zrt_long_ctx_{os.environ['RANK']}", "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
    torch.set_num_threads(1)
    length, alst = spec["length"], spec["way"] == "hf-alst"
    extra = {}
    if alst:
        import deepspeed
        from accelerate.parallelism_config import ParallelismConfig
        from accelerate.utils import DeepSpeedSequenceParallelConfig
        deepspeed.init_distributed(dist_backend="gloo")  # on CPU nothing else does
        patch_alst(transformers)
        handler = DeepSpeedSequenceParallelConfig(sp_seq_length=length, sp_seq_length_is_variable=False,
                                                  sp_attn_implementation="sdpa")
        extra["parallelism_config"] = ParallelismConfig(sp_backend="deepspeed", sp_size=2,
                                                        sp_handler=handler)
    model = AutoModelForCausalLM.from_pretrained(spec["folder"], attn_implementation="sdpa",
                                                 dtype=torch.bfloat16)
    model.config.use_cache = False
    args = TrainingArguments(output_dir=spec["out"], deepspeed=spec["ds"], bf16=True,
                             per_device_train_batch_size=1, max_steps=1, learning_rate=1e-3,
                             gradient_checkpointing=True, save_strategy="no", report_to=[],
                             use_cpu=True, disable_tqdm=True, logging_steps=1, **extra)
    rng = random.Random(7)
    blocks = [[rng.randrange(300) for _ in range(length)] for _ in range(4)]

    class Blocks(torch.utils.data.Dataset):
        def __len__(self):
            return len(blocks)

        def __getitem__(self, i):
            return {"input_ids": blocks[i], "labels": list(blocks[i]),
                    "position_ids": list(range(length))}

    metrics = Trainer(model=model, args=args, train_dataset=Blocks()).train().metrics
    if int(os.environ["RANK"]) == 0:
        with open(os.path.join(spec["out"], "train_results.json"), "w") as f:
            json.dump(metrics, f)


def patch_alst(transformers):
    """DeepSpeed's ALST pieces as its tutorial and docstrings wire them into transformers' LLaMA:
    LlamaMLP through TiledMLP, and LlamaForCausalLM's loss through TiledFusedLogitsLoss (the
    logits never whole), both over ceil(tokens / hidden) shards agreed by all ranks."""
    import torch
    from deepspeed import comm as dist
    from deepspeed.runtime.sequence_parallel.ulysses_sp import TiledFusedLogitsLoss, TiledMLP
    from transformers.modeling_outputs import CausalLMOutputWithPast
    from transformers.models.llama import modeling_llama

    def shards_for(x):
        n = torch.tensor(math.ceil(x.shape[1] / TILE))
        dist.all_reduce(n, op=dist.ReduceOp.MAX)
        return int(n.item())

    def mlp_forward(self, x):
        def whole(self, x):
            return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
        return TiledMLP.apply(whole, self, x, shards_for(x),
                              [self.down_proj.weight, self.gate_proj.weight, self.up_proj.weight])

    def causal_lm_forward(self, input_ids=None, attention_mask=None, position_ids=None,
                          labels=None, shift_labels=None, **kwargs):
        hidden = self.model(input_ids=input_ids, position_ids=position_ids,
                            attention_mask=attention_mask, use_cache=False).last_hidden_state
        if shift_labels is None:
            shift_labels = torch.nn.functional.pad(labels, (0, 1), value=-100)[:, 1:]

        def loss_sum(self, h, y):
            logits = self.lm_head(h).float()
            return torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1),
                                                     ignore_index=-100, reduction="sum")
        total = TiledFusedLogitsLoss.apply(loss_sum, self, hidden, shift_labels, None,
                                           shards_for(hidden), [self.lm_head.weight], "sum")
        loss = total / (shift_labels != -100).sum().clamp(min=1)
        return CausalLMOutputWithPast(loss=loss, logits=None)

    modeling_llama.LlamaMLP.forward = mlp_forward
    modeling_llama.LlamaForCausalLM.forward = causal_lm_forward


def hf_command(args, work, folder, way, length, out):
    spec = os.path.join(out, "spec.json")
    with open(spec, "w") as f:
        json.dump({"folder": os.path.join(work, "hf_model"), "ds": os.path.join(work, "ds.json"),
                   "out": out, "way": way, "length": length}, f)
    return [os.path.abspath(__file__), "--worker", spec]


def hf_model(work, folder):
    """The same configuration as a transformers folder (random bf16 weights)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    config = AutoConfig.from_pretrained(os.path.join(work, "config"))
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).save_pretrained(
        os.path.join(work, "hf_model"))


def attempt(args, work, folder, way, length):
    """One step of `way` at `length` tokens: (trained, step seconds, peak MiB, why not)."""
    from peer_launch import run_ranks
    out = tempfile.mkdtemp(dir=work)
    make_cgroups(args.cap_mib)
    why = None
    log = os.path.join(out, "log.txt")
    try:
        if way.startswith("zrt"):
            with open(log, "w") as f:
                rc = subprocess.run(zrt_command(args, work, folder, way, length, out), stdout=f,
                                    stderr=subprocess.STDOUT, env=dict(os.environ, OMP_NUM_THREADS="1",
                                    OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1"),
                                    timeout=args.step_limit + 600).returncode
            why = None if rc == 0 else f"exit {rc}"
        else:
            with open(log, "w") as f:
                saved = os.dup(2), os.dup(1)
                os.dup2(f.fileno(), 2)
                os.dup2(f.fileno(), 1)
                try:
                    why = run_ranks(hf_command(args, work, folder, way, length, out), 2,
                                    args.step_limit + 600, way)
                finally:
                    os.dup2(saved[0], 2)
                    os.dup2(saved[1], 1)
        peak, kills = read_cgroups()
        if kills:
            why = f"OOM-killed at the {args.cap_mib} MiB cap"
        step = zrt_step_seconds(out) if why is None else None
        if step is not None and step > args.step_limit:
            why = f"step took {step:.0f} s, over the {args.step_limit} s limit"
        if why and not kills:
            with open(log) as f:
                why += ": " + " | ".join(l.strip() for l in f.read().splitlines()[-4:])
        return why is None, step, peak, why
    finally:
        for r in range(2):
            remove_cgroup(cgroup(r))
        shutil.rmtree(out, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--cap_mib", type=int, default=2048)
    ap.add_argument("--start", type=int, default=1024)
    ap.add_argument("--max_len", type=int, default=131072)
    ap.add_argument("--step_limit", type=int, default=900)
    ap.add_argument("--ways", default=",".join(WAYS))
    ap.add_argument("--jsonl")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return hf_worker(args.worker)
    out = Jsonl(args.jsonl)
    out({"meta": machine_meta(cap_mib=args.cap_mib, start=args.start, step_limit=args.step_limit,
                              tile=TILE)})
    work = tempfile.mkdtemp(prefix="zrt_bench_long_")
    longest = {}
    try:
        folder = prepare(work, args.max_len)
        hf_model(work, folder)
        for way in args.ways.split(","):
            length = args.start
            while length <= args.max_len:
                ok, step, peak, why = attempt(args, work, folder, way, length)
                out({"way": way, "length": length, "trained": ok, "step_s": step,
                     "peak_mib": peak, "why": why})
                print(f"{way:14s} {length:7d} tokens: " + (
                    f"trained, {step:.1f} s, peak {peak} MiB" if ok else f"failed ({why})"),
                    flush=True)
                if not ok:
                    break
                longest[way] = (length, step, peak)
                length *= 2
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nlongest sequence trained, 2 ranks, each capped at {args.cap_mib} MiB:")
    for way in args.ways.split(","):
        got = longest.get(way)
        print(f"  {way:14s} " + (f"{got[0]} tokens ({got[1]:.1f} s, peak {got[2]} MiB)" if got
                                 else f"none from {args.start}"))
        out({"summary": way, "longest": got[0] if got else 0})
    return 0


if __name__ == "__main__":
    sys.exit(main())
