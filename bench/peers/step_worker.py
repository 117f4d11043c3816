#!/usr/bin/env python3
"""One rank of one peer's training-step measurement, for bench/peers/step.py.

    step_worker.py --framework deepspeed|ddp|fsdp2 [--stage S] [--dtype fp32|bf16]
                   [--optim fused|foreach] --model mlp|gpt [--layers L --width W --heads H
                   --context T --vocab V] --batch B --warmup K --steps M --lr LR --threads T
                   [--offload none|cpu|nvme --nvme-path DIR --sub-group-size N --buffer-count C
                    --pipeline --aio-block-size B --aio-queue-depth Q --aio-threads T]

Started once per rank by step.py with the env:// rendezvous (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT) and DS_ACCELERATOR=cpu. The model is the twin of zrt-train's example model
(tests/peers/twins.py), built after torch.manual_seed(0); rank r's fixed micro-batch is what
bench/zero_bench.cpp gives rank r (rows [r B, (r+1) B) of the same generated data). Each step
starts after a barrier; its time is the slowest rank's (an all-reduce of the rank times). Rank 0
prints one JSON line: the timed steps, the loss of the first and the last step, and each rank's
peak RSS (getrusage ru_maxrss, /proc/self/status VmHWM) and RssAnon after the steps.
"""

import argparse
import json
import math
import os
import resource
import statistics
import sys
import time

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests", "peers"))

from twins import Gpt, Mlp, gpt_loss, regression_data  # noqa: E402

BETAS, EPS, WEIGHT_DECAY = (0.9, 0.999), 1e-8, 0.01


def workload(args, rank, world):
    """(model, inputs, loss(output)) of this rank, as zero_bench's mlp_workload/gpt_workload."""
    torch.manual_seed(0)
    b = args.batch
    if args.model == "mlp":
        model = Mlp(args.width, args.layers)
        x, y = regression_data(world * b, 1)
        x, y = x[rank * b:(rank + 1) * b], y[rank * b:(rank + 1) * b]
        return model, x, lambda out: torch.nn.functional.mse_loss(out, y)
    model = Gpt(vocab=args.vocab, context=args.context, width=args.width, heads=args.heads,
                layers=args.layers)
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(args.vocab, (world * b, args.context + 1), generator=gen)
    mine = tokens[rank * b:(rank + 1) * b]
    x, y = mine[:, :args.context].contiguous(), mine[:, 1:].contiguous()
    return model, x, lambda out: gpt_loss(out, y)


def ds_config(args, world):
    zero = {"stage": args.stage, "overlap_comm": True, "reduce_bucket_size": 25000000,
            "allgather_bucket_size": 50000000}
    if args.stage == 3:
        zero["stage3_prefetch_bucket_size"] = 50000000
    if args.offload != "none":
        zero["offload_optimizer"] = {"device": args.offload}
    if args.offload == "nvme":
        zero["offload_optimizer"].update(nvme_path=args.nvme_path, buffer_count=args.buffer_count,
                                         pipeline_read=args.pipeline, pipeline_write=args.pipeline)
        zero["sub_group_size"] = args.sub_group_size
    if args.offload_param == "nvme":
        zero["offload_param"] = {"device": "nvme", "nvme_path": args.nvme_path,
                                 "buffer_count": args.param_buffer_count,
                                 "buffer_size": args.param_buffer_size, "max_in_cpu": 0}
    config = {
        "train_micro_batch_size_per_gpu": args.batch,
        "gradient_accumulation_steps": 1,
        "train_batch_size": args.batch * world,
        "gradient_clipping": 0.0,
        "optimizer": {"type": "AdamW", "params": {"lr": args.lr, "betas": list(BETAS), "eps": EPS,
                                                  "weight_decay": WEIGHT_DECAY}},
        "bf16": {"enabled": args.dtype == "bf16"},
        "zero_optimization": zero,
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
    }
    if args.offload == "nvme":
        config["aio"] = {"block_size": args.aio_block_size, "queue_depth": args.aio_queue_depth,
                         "intra_op_parallelism": args.aio_threads, "single_submit": False,
                         "overlap_events": True}
    return config


def deepspeed_stepper(args, model, x, loss_of, world):
    import deepspeed
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=ds_config(args, world))
    xb = x.to(torch.bfloat16) if args.dtype == "bf16" and args.model == "mlp" else x

    def step():
        loss = loss_of(engine(xb))
        engine.backward(loss)
        engine.step()
        return loss
    opt = engine.optimizer
    inner = getattr(opt, "optimizer", opt)
    return step, f"{type(opt).__name__}({type(inner).__name__})"


def torch_stepper(args, model, x, loss_of, world):
    """DDP, or FSDP2 (fully_shard on each block, then on the root), with torch's AdamW."""
    if args.framework == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("cpu", (world,))
        for i in range(args.layers):
            fully_shard(getattr(model, f"h{i}"), mesh=mesh)
        fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=BETAS, eps=EPS,
                            weight_decay=WEIGHT_DECAY, fused=args.optim == "fused",
                            foreach=args.optim == "foreach")

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_of(model(x))
        loss.backward()
        opt.step()
        return loss
    return step, f"{type(model).__name__}+AdamW({args.optim})"


def own_memory_mib():
    """[ru_maxrss, VmHWM, RssAnon] of this process in MiB."""
    mem = [resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 0.0, 0.0]
    with open("/proc/self/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmHWM", "RssAnon"):
                mem[1 if key == "VmHWM" else 2] = float(rest.split()[0]) / 1024.0
    return mem


def storage_io():
    """/proc/self/io's read_bytes and write_bytes: what the process (every thread, DeepSpeed's
    aio threads included) made the storage layer move, as the kernel counts it."""
    out = {}
    with open("/proc/self/io") as f:
        for line in f:
            key, value = line.split(":")
            out[key] = int(value)
    return out.get("read_bytes", 0), out.get("write_bytes", 0)


def timed_steps(step, total, warmup=0, io=None):
    """Runs `total` steps; returns each step's loss and slowest-rank seconds. With `io` (a list),
    appends the storage bytes read and written by the steps after the first `warmup`."""
    losses, times = [], []
    for i in range(total):
        if io is not None and i == warmup:
            io.extend(storage_io())
        dist.barrier()
        t0 = time.perf_counter()
        loss = step()
        dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(dt, op=dist.ReduceOp.MAX)
        losses.append(float(loss.detach().float()))
        times.append(float(dt))
    if io is not None and len(io) == 2:
        after = storage_io()
        io[:] = [after[0] - io[0], after[1] - io[1]]
    return losses, times


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--framework", choices=("deepspeed", "ddp", "fsdp2"), required=True)
    ap.add_argument("--stage", type=int, default=0)
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--optim", choices=("fused", "foreach"), default="fused")
    ap.add_argument("--model", choices=("mlp", "gpt"), required=True)
    for name, default in (("layers", 2), ("width", 64), ("heads", 4), ("context", 32),
                          ("vocab", 256), ("batch", 8), ("warmup", 2), ("steps", 7),
                          ("threads", 1)):
        ap.add_argument(f"--{name}", type=int, default=default)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--offload", choices=("none", "cpu", "nvme"), default="none",
                    help="DeepSpeed's offload_optimizer.device")
    ap.add_argument("--nvme-path", default="/tmp")
    ap.add_argument("--offload-param", choices=("none", "nvme"), default="none",
                    help="DeepSpeed's offload_param.device (stage 3, max_in_cpu 0)")
    ap.add_argument("--param-buffer-count", type=int, default=5)
    ap.add_argument("--param-buffer-size", type=int, default=1 << 23)
    ap.add_argument("--sub-group-size", type=int, default=1000000000)
    ap.add_argument("--buffer-count", type=int, default=4)
    ap.add_argument("--pipeline", action="store_true", help="pipeline_read and pipeline_write")
    for name, default in (("aio-block-size", 1048576), ("aio-queue-depth", 8), ("aio-threads", 1)):
        ap.add_argument(f"--{name}", type=int, default=default)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if args.framework == "deepspeed":
        import deepspeed
        deepspeed.init_distributed(dist_backend="gloo")
    else:
        dist.init_process_group("gloo")
    model, x, loss_of = workload(args, rank, world)
    params = sum(p.numel() for p in model.parameters())
    make = deepspeed_stepper if args.framework == "deepspeed" else torch_stepper
    step, what = make(args, model, x, loss_of, world)
    io = []
    losses, times = timed_steps(step, args.warmup + args.steps, args.warmup, io)
    mem = torch.tensor([own_memory_mib()], dtype=torch.float64)
    gathered = [torch.zeros_like(mem) for _ in range(world)]
    dist.all_gather(gathered, mem)
    per_rank = torch.cat(gathered).tolist()
    ok = math.isfinite(losses[-1]) and losses[-1] < losses[0]
    if rank == 0:
        steps_ms = [t * 1e3 for t in times[args.warmup:]]
        print(json.dumps({
            "framework": args.framework, "stage": args.stage, "dtype": args.dtype,
            "offload": args.offload,
            "offload_param": args.offload_param,
            "kernel_read_mib": io[0] / args.steps / 2**20 if len(io) == 2 else None,
            "kernel_write_mib": io[1] / args.steps / 2**20 if len(io) == 2 else None,
            "optim": args.optim, "ranks": world, "threads": torch.get_num_threads(),
            "model": args.model, "params": params, "what": what,
            "step_ms": statistics.median(steps_ms),
            "steps_ms": steps_ms, "peak_rss_mib": max(r[0] for r in per_rank),
            "rss_per_rank_mib": [r[0] for r in per_rank],
            "vmhwm_per_rank_mib": [r[1] for r in per_rank],
            "rss_anon_per_rank_mib": [r[2] for r in per_rank],
            "loss_first": losses[0], "loss_last": losses[-1], "loss_falls": ok}), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
