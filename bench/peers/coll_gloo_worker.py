"""One rank of the torch.distributed gloo baseline of bench/peers/collectives.py.

    RANK=r WORLD_SIZE=n MASTER_ADDR=... MASTER_PORT=... coll_gloo_worker.py --ops OPS --sizes B,...

Times reduce_scatter_tensor, all_gather_into_tensor and all_reduce on float32 tensors with
comm_bench's convention (bench/README.md "comm_bench"): S is the whole array, each iteration
starts after a barrier and counts the slowest rank's time, the value is the median over
iterations (20 below 4 MiB, 10 below 64 MiB, 5 above, after 2 warm-up runs). One checked run per
row first ("wrong": elements that differ from the closed form, summed over ranks). Rank 0 prints
one JSON object per (op, size); an op gloo refuses gives {"error": ...} instead of timings.
"""

import argparse
import json
import statistics
import sys
import time

import torch
import torch.distributed as dist

NAME = "torch_gloo"


def inputs(op, count, n, r):
    """The op's (output, input) tensors filled with the closed-form pattern."""
    i = torch.arange(count, dtype=torch.float32)
    if op == "all_gather":
        c = count // n
        return torch.empty(count), torch.arange(c, dtype=torch.float32).remainder(5).add(r)
    if op == "reduce_scatter":
        return torch.empty(count // n), i.remainder(7).add(r)
    return None, i.remainder(7).add(r)


def run_op(op, out, inp):
    if op == "reduce_scatter":
        dist.reduce_scatter_tensor(out, inp)
    elif op == "all_gather":
        dist.all_gather_into_tensor(out, inp)
    else:
        dist.all_reduce(inp)


def count_wrong(op, count, n, r):
    out, inp = inputs(op, count, n, r)
    run_op(op, out, inp)
    c = count // n
    i = torch.arange(count, dtype=torch.float32)
    base = n * (n - 1) / 2
    if op == "reduce_scatter":
        bad = out.ne(i.remainder(7).mul(n).add(base)[r * c:(r + 1) * c])
    elif op == "all_gather":
        bad = out.ne(torch.div(i, c, rounding_mode="floor") + i.remainder(c).remainder(5))
    else:
        bad = inp.ne(i.remainder(7).mul(n).add(base))
    total = torch.tensor([int(bad.sum())], dtype=torch.int64)
    dist.all_reduce(total)
    return int(total)


def time_op(op, count, n, r):
    nbytes = count * 4
    iters = 5 if nbytes >= 64 << 20 else 10 if nbytes >= 4 << 20 else 20
    out, inp = inputs(op, count, n, r)
    times = []
    for it in range(2 + iters):
        dist.barrier()
        start = time.perf_counter()
        run_op(op, out, inp)
        elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        if it >= 2:
            times.append(float(elapsed))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", default="reduce_scatter,all_gather,all_reduce")
    ap.add_argument("--sizes", default="1048576")
    args = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    n, r = dist.get_world_size(), dist.get_rank()
    for op in args.ops.split(","):
        for size in (int(s) for s in args.sizes.split(",")):
            count = size // 4 // n * n
            row = {"op": op, "impl": NAME, "bytes": count * 4}
            try:
                row["wrong"] = count_wrong(op, count, n, r)
                row["seconds"] = time_op(op, count, n, r)
            except (RuntimeError, NotImplementedError, ValueError) as e:
                # Every rank raises the same refusal before communicating, so all stay in step.
                row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
                row["unsupported"] = True
            if r == 0:
                print(json.dumps(row), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
