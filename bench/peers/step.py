#!/usr/bin/env python3
"""The training step (forward, backward, optimizer step) of zrt-train's two example models, GPT
and MLP, in ZeroRT and in the real peers, side by side (issue 15).

    bench/peers/step.py [--bin build] [--models gpt,mlp] [--ranks 1,2,4] [--rounds 2]
                        [--warmup 2] [--steps 7] [--frameworks zerort,deepspeed,ddp,fsdp2]
                        [--jsonl FILE] [--svg FILE] [--timeout 600] [--quick]

Same model (models/gpt.h, models/mlp.h and their twins in tests/peers/twins.py, one seed),
data (a fixed micro-batch per rank, generated alike on both sides), micro-batch, AdamW
hyper-parameters (lr 1e-3 for the GPT, 1e-4 for the MLP, betas 0.9/0.999, eps 1e-8, weight decay 0.01, no clipping) and
max(1, cores / N) intra-op threads per rank. Variants at each N:

  zerort     `mpirun -np N <bin>/bench/zero_bench --model M`: stages 0-3 in fp32 and bf16,
             stages 1 and 2 with the optimizer offloaded to the CPU (fp32, bf16)
  deepspeed  bench/peers/step_worker.py on N gloo ranks, DS_ACCELERATOR=cpu: stages 0-3,
             fp32 and bf16, its AdamW from the config
  ddp        torch DistributedDataParallel, AdamW fused=True and foreach=True (fp32)
  fsdp2      torch.distributed.fsdp.fully_shard per block and on the root, same two AdamWs

Each variant runs as one launch per round (warm-up steps, then timed steps; each step's time is
the slowest rank's); rounds run the variants in rotated order. Reported: the median over all
timed steps of all rounds, their min and max, the largest peak RSS over ranks (each process
measures itself), the loss of the first and last step (a launch whose loss is not finite or
does not fall is an error row and is not run again), and the ratios of bench/README.md.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

from common import Jsonl, choices, format_load, free_port, loadavg, machine_meta, rotations, run_together
from step_report import print_report, write_svg

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# AdamW's lr per model: the deep MLP's loss on its fixed batch rises for the first steps at 1e-3.
LR = {"gpt": 1e-3, "mlp": 1e-4}
# Chosen so that a step takes ~50-500 ms at N = 1 on 2 idle cores (see bench/README.md).
SIZES = {"gpt": {"layers": 4, "width": 256, "heads": 4, "context": 64, "vocab": 256, "batch": 4},
         "mlp": {"layers": 8, "width": 768, "batch": 64}}
QUICK_SIZES = {"gpt": {"layers": 2, "width": 64, "heads": 4, "context": 32, "vocab": 256,
                       "batch": 4},
               "mlp": {"layers": 2, "width": 64, "batch": 16}}
FRAMEWORKS = ("zerort", "deepspeed", "ddp", "fsdp2")


def variants(frameworks):
    """Every variant of one (model, N), as dicts; `name` is the table's row label."""
    out = []
    for fw in frameworks:
        if fw in ("zerort", "deepspeed"):
            for dtype in ("fp32", "bf16"):
                for stage in range(4):
                    out.append({"framework": fw, "stage": stage, "dtype": dtype, "offload": False})
                if fw == "zerort":
                    for stage in (1, 2):
                        out.append({"framework": fw, "stage": stage, "dtype": dtype,
                                    "offload": True})
        else:
            for optim in ("fused", "foreach"):
                out.append({"framework": fw, "optim": optim, "dtype": "fp32"})
    for v in out:
        if "stage" in v:
            v["name"] = (f"{v['framework']} z{v['stage']} {v['dtype']}"
                         + (" +offload" if v["offload"] else ""))
        else:
            v["name"] = f"{v['framework']} {v['optim']}"
    return out


def size_flags(sizes):
    return [a for k, val in sizes.items() if k != "batch" for a in (f"--{k}", str(val))]


def zerort_argv(v, model, ranks, args, sizes):
    argv = ["mpirun", "-np", str(ranks), "--oversubscribe", "--bind-to", "none", "--timeout",
            str(args.timeout), "-x", "OMP_NUM_THREADS",
            os.path.join(args.bin, "bench", "zero_bench"), "--json", "--model", model,
            "--stage", str(v["stage"]), "--dtype", v["dtype"], "--batch", str(sizes["batch"]),
            "--warmup", str(args.warmup), "--steps", str(args.steps), "--lr", str(LR[model])]
    return argv + size_flags(sizes) + (["--offload"] if v["offload"] else [])


def worker_argv(v, model, args, sizes, threads):
    python = os.path.join(os.path.realpath(sys.prefix), "bin", "python")
    argv = [python, os.path.join(HERE, "step_worker.py"), "--framework", v["framework"],
            "--model", model, "--dtype", v["dtype"], "--batch", str(sizes["batch"]),
            "--warmup", str(args.warmup), "--steps", str(args.steps), "--lr", str(LR[model]),
            "--threads", str(threads)]
    if "stage" in v:
        argv += ["--stage", str(v["stage"])]
    else:
        argv += ["--optim", v["optim"]]
    return argv + size_flags(sizes)


def launch(argvs, envs, timeout, logdir):
    """Starts one process per argv (common.run_together); returns rank 0's last JSON line, or
    raises RuntimeError with the failure and the tail of the output."""
    del logdir  # the outputs go to temporary files
    texts, failed = run_together(list(zip(argvs, envs)), timeout)
    rows = [ln for ln in texts[0][0].splitlines() if ln.startswith("{\"")]
    row = json.loads(rows[-1]) if rows else {}
    if row and not row.get("loss_falls"):
        raise RuntimeError(f"loss did not fall: {row.get('loss_first')} -> {row.get('loss_last')}")
    if failed or not rows:
        tail = "\n".join((out + err)[-1500:] for out, err in texts)
        raise RuntimeError(f"{failed or 'no JSON line'}: {' '.join(argvs[0])}\n{tail}")
    return row


def run_variant(v, model, ranks, args):
    """One launch of one variant; returns its JSON row (or raises RuntimeError)."""
    sizes = args.sizes[model]
    threads = max(1, (os.cpu_count() or 1) // ranks)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.pop("ZRT_NUM_THREADS", None)
    with tempfile.TemporaryDirectory(prefix="zrt_step_") as logdir:
        if v["framework"] == "zerort":
            row = launch([zerort_argv(v, model, ranks, args, sizes)], [env], args.timeout, logdir)
        else:
            port = free_port()
            argv = worker_argv(v, model, args, sizes, threads)
            envs = [dict(env, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(ranks),
                         LOCAL_WORLD_SIZE=str(ranks), MASTER_ADDR="127.0.0.1",
                         MASTER_PORT=str(port), DS_ACCELERATOR="cpu") for r in range(ranks)]
            row = launch([argv] * ranks, envs, args.timeout, logdir)
    return row


def run_group(model, ranks, args, emit):
    """Every round of every variant of one (model, N); returns {name: result}."""
    vs = [v for v in variants(args.frameworks)
          if not args.only or any(o in v["name"] for o in args.only.split(","))]
    results = {v["name"]: {"variant": v, "rows": [], "error": None} for v in vs}
    for rnd, _, v in rotations(vs, args.rounds):
        res = results[v["name"]]
        if res["error"]:
            continue
        t0 = time.monotonic()
        try:
            row = run_variant(v, model, ranks, args)
        except (RuntimeError, OSError) as e:
            res["error"] = str(e).splitlines()[0][:300]
            print(f"  {model} N={ranks} {v['name']}: FAILED: {e}", file=sys.stderr, flush=True)
            emit({"kind": "error", "model": model, "ranks": ranks, "variant": v["name"],
                  "round": rnd, "error": str(e)[-3000:]})
            continue
        row.update(kind="launch", model=model, ranks=ranks, variant=v["name"], round=rnd,
                   loadavg=loadavg(), wall_s=time.monotonic() - t0)
        res["rows"].append(row)
        emit(row)
        print(f"  {model} N={ranks} round {rnd} {v['name']}: {row['step_ms']:.1f} ms "
              f"(launch {row['wall_s']:.0f} s, load {format_load(row['loadavg'])})",
              file=sys.stderr, flush=True)
    return results


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build"),
                    help="ZeroRT build folder holding bench/zero_bench (default: build)")
    ap.add_argument("--models", default="gpt,mlp")
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    ap.add_argument("--only", default="", help="run only the variants whose name contains one of these (comma-separated)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=7)
    ap.add_argument("--timeout", type=int, default=600, help="seconds per launch")
    ap.add_argument("--jsonl", default="")
    ap.add_argument("--svg", default="")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: tiny models, N = 1, 2, 1 round, 1 + 3 steps")
    args = ap.parse_args()
    args.sizes = SIZES
    if args.quick:
        args.sizes, args.rounds, args.warmup, args.steps = QUICK_SIZES, 1, 1, 3
        if args.ranks == "1,2,4":
            args.ranks = "1,2"
    args.models = choices(ap, "--models", args.models, tuple(SIZES))
    args.ranks = [int(n) for n in args.ranks.split(",")]
    args.frameworks = choices(ap, "--frameworks", args.frameworks, FRAMEWORKS)
    if "zerort" in args.frameworks and not os.access(
            os.path.join(args.bin, "bench", "zero_bench"), os.X_OK):
        ap.error(f"{args.bin}/bench/zero_bench not found: build the target zero_bench "
                 "(-DZRT_BUILD_BENCH=ON) or pass --bin")
    if "zerort" in args.frameworks and not shutil.which("mpirun"):
        ap.error("mpirun not found")
    return args


def main():
    args = parse_args()
    emit = Jsonl(args.jsonl)
    meta = machine_meta(sizes=args.sizes, rounds=args.rounds, warmup=args.warmup,
                        steps=args.steps, ranks=args.ranks, lr=LR)
    emit(meta)
    print(f"step.py: {meta['cpu']}, {meta['cpus']} CPUs, load {format_load(meta['loadavg'])}; "
          f"{args.rounds} rounds x ({args.warmup} warm-up + {args.steps} timed steps)")
    for m in args.models:
        print(f"  {m}: " + ", ".join(f"{k} {v}" for k, v in args.sizes[m].items()))
    print(flush=True)
    t0 = time.monotonic()
    groups = []
    for model in args.models:
        for ranks in args.ranks:
            results = run_group(model, ranks, args, emit)
            groups.append((model, ranks, results))
            print_report(model, ranks, results, emit, args)
    if args.svg:
        write_svg(args.svg, groups)
    print(f"step.py: {time.monotonic() - t0:.0f} s in all, load {format_load(loadavg())}")
    emit.close()
    failed = sum(1 for _, _, res in groups for r in res.values() if r["error"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
