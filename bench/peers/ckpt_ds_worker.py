#!/usr/bin/env python3
"""One rank of DeepSpeed's side of bench/peers/ckpt.py: engine.save_checkpoint and
load_checkpoint of the training state of zrt-train's MLP after one step, timed.

    RANK=r WORLD_SIZE=N MASTER_ADDR=... MASTER_PORT=... DS_ACCELERATOR=cpu \\
        ckpt_ds_worker.py --dir DIR --stage S --width W --layers L --threads T

The model is tests/peers/twins.py's Mlp (the twin of engine_ckpt_bench's), fp32, trained by
deepspeed.initialize over gloo with a DeepSpeedCPUAdam client optimizer (AdamW, lr 1e-3) and the
ZeRO stage given. After one step: a warm-up save (not timed, deleted), then the timed save of tag
global_step1 into DIR/ckpt, followed on every rank by an fsync of the files it wrote (and, on
rank 0, of the files no rank's name claims and the folders): DeepSpeed's save does not fsync, so
this makes its time one to durable files like ZeroRT's. Then load_checkpoint of that tag: one
untimed, one timed warm (the files in the page cache), one timed cold (rank 0 first drops every
file's pages with os.posix_fadvise(POSIX_FADV_DONTNEED)). Each time is from a barrier to the
slowest rank's return. Rank 0 prints one JSON line starting {"framework": "deepspeed", ...}.
"""
import argparse
import json
import os
import re
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests", "peers"))

RANK_FILE = re.compile(r"zero_pp_rank_(\d+)_")


def owner(name):
    """The rank that wrote a DeepSpeed checkpoint file: zero_pp_rank_{r}_* are rank r's, the rest
    (mp_rank_00_model_states.pt, latest, the copied zero_to_fp32.py) rank 0's."""
    m = RANK_FILE.search(name)
    return int(m.group(1)) if m else 0


def fsync_path(path, flags=os.O_RDONLY):
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_mine(root, rank):
    """fsync of the files under root this rank wrote; rank 0 also fsyncs every folder."""
    for folder, _, names in os.walk(root):
        for name in names:
            if owner(name) == rank:
                fsync_path(os.path.join(folder, name))
        if rank == 0:
            fsync_path(folder, os.O_RDONLY | os.O_DIRECTORY)
    if rank == 0:
        fsync_path(os.path.dirname(os.path.abspath(root)), os.O_RDONLY | os.O_DIRECTORY)


def drop_pages(root):
    for folder, _, names in os.walk(root):
        for name in names:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def timed(fn):
    """Seconds of fn() from a barrier to the slowest rank's return."""
    import torch
    torch.distributed.barrier()
    t0 = time.perf_counter()
    fn()
    dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
    torch.distributed.all_reduce(dt, op=torch.distributed.ReduceOp.MAX)
    return dt.item()


def make_engine(args):
    import torch
    import deepspeed
    from deepspeed.ops.adam import DeepSpeedCPUAdam
    from twins import Mlp
    deepspeed.init_distributed(dist_backend="gloo")
    torch.set_num_threads(args.threads)
    world = torch.distributed.get_world_size()
    torch.manual_seed(42)
    model = Mlp(args.width, args.layers)
    opt = DeepSpeedCPUAdam(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                           weight_decay=0.01, adamw_mode=True)
    config = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
              "train_batch_size": 4 * world, "zero_optimization": {"stage": args.stage},
              "steps_per_print": 1000}
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=config)
    return engine


def load(engine, path):
    loaded, _ = engine.load_checkpoint(path, tag="global_step1")
    if loaded is None:
        raise RuntimeError(f"DeepSpeed load_checkpoint found nothing in {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--stage", type=int, default=1)
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-load", action="store_true")
    args = ap.parse_args()
    import torch
    engine = make_engine(args)
    rank = torch.distributed.get_rank()

    def step():
        x = torch.rand(4, 16) * 2 - 1
        engine.backward(torch.nn.functional.mse_loss(engine(x), torch.zeros(4, 2)))
        engine.step()

    t_step = timed(step)
    warm_dir, save_dir = os.path.join(args.dir, "warmup"), os.path.join(args.dir, "ckpt")

    def save(path):
        engine.save_checkpoint(path, tag="global_step1")
        fsync_mine(path, rank)
        torch.distributed.barrier()

    save(warm_dir)
    if rank == 0:
        shutil.rmtree(warm_dir)
    t_save = timed(lambda: save(save_dir))
    t_warm = t_cold = -1.0
    if not args.no_load:
        load(engine, save_dir)  # untimed: first-call costs
        t_warm = timed(lambda: load(engine, save_dir))
        if rank == 0:
            drop_pages(save_dir)
        t_cold = timed(lambda: load(engine, save_dir))
    if rank == 0:
        params = sum(p.ds_numel if hasattr(p, "ds_numel") else p.numel()
                     for p in engine.module.parameters())
        print(json.dumps({"framework": "deepspeed", "stage": args.stage,
                          "world": torch.distributed.get_world_size(), "params": params,
                          "step_s": t_step, "save_s": t_save, "load_warm_s": t_warm,
                          "load_cold_s": t_cold}), flush=True)
    torch.distributed.barrier()
    if hasattr(engine, "destroy"):
        engine.destroy()


if __name__ == "__main__":
    main()
