"""Generation side by side: zrt-generate (ZeRO-3 inference over N ranks) and transformers'
generate() in one process, on the same LLaMA model made by transformers, the same prompts
(greedy, a batch of equal-length prompts, a fixed number of new tokens), the same total thread
count. Reports tokens per second of the job (zrt-generate splits the prompts over its ranks, prompt
i on rank i mod N, as each DeepSpeed ZeRO-inference rank decodes its own inputs; all ranks gather
every layer for every forward) and every process's peak RSS (getrusage), with median, min and max
over rotated repetitions.

    .venv/bin/python bench/peers/generate.py --bin build [--ranks 1,2,4] [--dtypes fp32,bf16]
        [--reps 7] [--layers 12 --hidden 768 --vocab 8000] [--lengths 32,28,24,20] [--jsonl F]
        [--quick]

--lengths gives one prompt per length instead of a batch of equal ones: transformers runs them as
one left-padded batch (attention mask), a zrt-generate rank runs its prompts of one length as one
batch and its batches one after the other; the variant "zerort-replicated" (N > 1) runs every
prompt on every rank (--replicate_prompts), i.e. without splitting them over the ranks.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from common import (Jsonl, choices, format_load, loadavg, machine_meta, print_table, rotations,
                    spread)

HF_WORKER = r"""
import json, resource, sys, time, torch
from transformers import LlamaForCausalLM
folder, dtype, prompts, new, threads = sys.argv[1:6]
torch.set_num_threads(int(threads))
model = LlamaForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype),
                                         attn_implementation="eager").eval()
rows = [[int(t) for t in p.split(",")] for p in prompts.split(";")]
width = max(len(r) for r in rows)
# Prompts of several lengths: one batch, padded on the left with an attention mask.
ids = torch.tensor([[0] * (width - len(r)) + r for r in rows])
mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
model.generation_config.pad_token_id = 0
with torch.no_grad():
    t0 = time.perf_counter()
    out = model.generate(ids, attention_mask=mask, do_sample=False,
                         max_new_tokens=int(new), min_new_tokens=int(new))
    seconds = time.perf_counter() - t0
assert out.shape[1] == width + int(new), out.shape
print(json.dumps({"seconds": seconds,
                  "rss_mib": [resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024]}))
"""


def make_model(folder, args):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden,
                      intermediate_size=args.hidden * 8 // 3, num_hidden_layers=args.layers,
                      num_attention_heads=args.hidden // 64, num_key_value_heads=args.hidden // 256,
                      max_position_embeddings=512, bos_token_id=None, eos_token_id=None,
                      pad_token_id=None)
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def prompt_ids(args):
    # arange(...) % vocab, row by row: `batch` rows of `length`, or one row per --lengths entry.
    rows, start = [], 0
    for length in args.prompt_lengths:
        rows.append(",".join(str((start + t) % args.vocab) for t in range(length)))
        start += length
    return ";".join(rows)


def run_variant(v, folder, args, tmp):
    kind, ranks, dtype = v
    if kind == "transformers":
        cmd = [sys.executable, "-c", HF_WORKER, folder,
               {"fp32": "float32", "bf16": "bfloat16"}[dtype], prompt_ids(args),
               str(args.new_tokens), str(args.threads)]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        if out.returncode != 0:
            raise SystemExit(f"transformers worker failed: {out.stderr[-2000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])
    metrics = os.path.join(tmp, "metrics.json")
    env = dict(os.environ, OMP_NUM_THREADS=str(max(1, args.threads // ranks)))
    cmd = [os.path.join(args.bin, "bin", "zrt-launch"), "--np", str(ranks), "--timeout", "1700", "--",
           os.path.join(args.bin, "bin", "zrt-generate"), "--model_name_or_path", folder,
           "--attn_implementation", "eager",
           "--prompt_ids", prompt_ids(args), "--max_new_tokens", str(args.new_tokens),
           "--dtype", dtype, "--output", os.path.join(tmp, "ids.jsonl"), "--metrics_out", metrics]
    if kind == "zerort-replicated":
        cmd.append("--replicate_prompts")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    if out.returncode != 0:
        raise SystemExit(f"zrt-generate failed: {out.stdout[-2000:]}{out.stderr[-2000:]}")
    with open(metrics) as f:
        m = json.load(f)
    return {"seconds": m["generate_seconds"], "rss_mib": m["peak_rss_mib_per_rank"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default="build", help="the ZeroRT build folder")
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--length", type=int, default=32)
    ap.add_argument("--new_tokens", type=int, default=32)
    ap.add_argument("--lengths", help="one prompt per length, e.g. 32,28,24,20 (instead of "
                    "--batch equal prompts of --length)")
    ap.add_argument("--jsonl")
    ap.add_argument("--svg", help="accepted for bench/peers/all.py; no chart is drawn")
    ap.add_argument("--quick", action="store_true", help="tiny model, 1 repetition")
    args = ap.parse_args()
    if args.quick:
        args.layers, args.hidden, args.vocab, args.reps, args.new_tokens = 2, 256, 1000, 1, 8
    ranks = [int(r) for r in choices(ap, "--ranks", args.ranks, ["1", "2", "4"])]
    dtypes = choices(ap, "--dtypes", args.dtypes, ["fp32", "bf16"])
    args.prompt_lengths = ([int(n) for n in args.lengths.split(",")] if args.lengths
                           else [args.length] * args.batch)
    variants = [("transformers", 1, d) for d in dtypes] + [("zerort", n, d) for d in dtypes
                                                           for n in ranks]
    if args.lengths:
        variants += [("zerort-replicated", n, d) for d in dtypes for n in ranks if n > 1]
    emit = Jsonl(args.jsonl)
    with tempfile.TemporaryDirectory(prefix="zrt_bench_generate_") as tmp:
        folder = os.path.join(tmp, "model")
        n_params = make_model(folder, args)
        meta = machine_meta(params=n_params, prompt_lengths=args.prompt_lengths,
                            new_tokens=args.new_tokens, threads=args.threads, reps=args.reps)
        emit({"meta": meta})
        print(f"LLaMA of {n_params / 1e6:.1f}M parameters ({args.layers} layers, hidden "
              f"{args.hidden}, vocab {args.vocab}); prompts of {args.prompt_lengths} tokens, "
              f"{args.new_tokens} new tokens each, greedy; {args.threads} threads in all; "
              f"load before: {format_load(loadavg())}\n")
        results = {v: [] for v in variants}
        for rep, _, v in rotations(variants, args.reps):
            r = run_variant(v, folder, args, tmp)
            results[v].append(r)
            emit({"variant": list(v), "rep": rep, **r})
            print(f"  {v} rep {rep}: {r['seconds']:.2f} s", file=sys.stderr, flush=True)
    rows = []
    for v in variants:
        tps = [len(args.prompt_lengths) * args.new_tokens / r["seconds"] for r in results[v]]
        rss = [max(r["rss_mib"]) for r in results[v]]
        s, m = spread(tps), spread(rss)
        rows.append([v[0], v[1], v[2], f"{s['median']:.1f}", f"{s['min']:.1f}-{s['max']:.1f}",
                     f"{m['median']:.0f}"])
    print_table(["framework", "ranks", "dtype", "tokens/s (median)", "min-max",
                 "peak RSS per process, MiB (largest rank, median)"], rows)
    print(f"Load after: {format_load(loadavg())}. N = 4 on {os.cpu_count()} CPUs is oversubscribed.")
    emit.close()


if __name__ == "__main__":
    main()
