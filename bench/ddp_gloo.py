"""PyTorch DDP (gloo) on the model and batch of bench/zero_bench.cpp, for the stage-0 comparison.

Run with Debian's python3-torch (not a pip torch), one process per rank (env:// rendezvous):
  MASTER_ADDR=127.0.0.1 MASTER_PORT=29571 RANK=r WORLD_SIZE=N /usr/bin/python3 bench/ddp_gloo.py \
      [--layers 12] [--width 2048] [--batch 8] [--steps 10] [--dtype fp32]
Prints one JSON line on rank 0: the median step time of the slowest rank.
"""
import argparse
import json
import statistics
import time

import torch
import torch.distributed as dist


class Block(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = torch.nn.Linear(width, width)

    def forward(self, x):
        return x + torch.tanh(self.fc(x))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[Block(args.width) for _ in range(args.layers)])
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=100)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(args.batch, args.width) * 0.5
    y = torch.randn(args.batch, args.width) * 0.5
    times, losses = [], []
    for step in range(args.steps + 2):
        dist.barrier()
        t0 = time.perf_counter()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        dt = torch.tensor([time.perf_counter() - t0])
        dist.all_reduce(dt, op=dist.ReduceOp.MAX)
        losses.append(loss.item())
        if step >= 2:
            times.append(dt.item())
    if dist.get_rank() == 0:
        print(json.dumps({"impl": "torch DDP (gloo)", "ranks": dist.get_world_size(),
                          "step_ms": round(statistics.median(times) * 1e3, 2),
                          "loss_falls": losses[-1] < losses[0]}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
