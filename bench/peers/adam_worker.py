#!/usr/bin/env python3
"""One measurement of one Python-side Adam implementation in a process, for bench/peers/adam.py.

    adam_worker.py --impl deepspeed|torch_fused|torch_foreach|plain --variant fp32|bf16
                   --size N --threads T --warmup W --steps K [--plain-lib plain_adam.so]
        prints one JSON line: {"impl": ..., "runs_ms": [K step times]}
    adam_worker.py --impl ... --variant ... --replay DIR --steps K [--plain-lib ...]
        the correctness run: reads DIR/p.f32 and DIR/g.f32 or DIR/g.bf16, runs steps 1..K with
        the same gradient, writes DIR/out_p.f32 (and DIR/out_copy.bf16 for bf16), like
        `adam_bench --replay`.

Every implementation gets one flat fp32 parameter of N elements (the layout of a ZeRO partition)
and the hyper-parameters below. Variants:

- fp32: fp32 gradient, one optimizer step.
- bf16: a bf16 gradient and, after the step, a bf16 copy of the updated fp32 parameters; what
  ZeroRT's kernel and plain_adam.c do in their one pass. DeepSpeedCPUAdam and torch's AdamW need
  fp32 gradients for fp32 parameters (DeepSpeed's cpu_adam takes the gradient in the parameter's
  dtype), so their timed step is what DeepSpeed's offload path does for the same result: copy the
  bf16 gradient into a preallocated fp32 buffer, step, copy the parameters to bf16.
"""

import argparse
import ctypes
import json
import os
import time

import torch

LR, BETAS, EPS, WEIGHT_DECAY = 1e-3, (0.9, 0.999), 1e-8, 0.01
IMPLS = ("deepspeed", "torch_fused", "torch_foreach", "plain")


class Problem:
    """The tensors of one run: fp32 p (and its bf16 copy), the gradient as given (g_in) and, for
    the torch optimizers, the fp32 gradient they read (g32: g_in itself for fp32, a buffer for
    bf16)."""

    def __init__(self, p, g_in, impl):
        self.p = p
        self.g_in = g_in
        self.bf16 = g_in.dtype == torch.bfloat16
        self.g32 = torch.empty_like(p) if self.bf16 and impl != "plain" else g_in
        self.copy = torch.empty(p.numel(), dtype=torch.bfloat16) if self.bf16 else None


def torch_stepper(pr, impl):
    param = torch.nn.Parameter(pr.p, requires_grad=True)
    param.grad = pr.g32
    if impl == "deepspeed":
        from deepspeed.ops.adam import DeepSpeedCPUAdam
        opt = DeepSpeedCPUAdam([param], lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY,
                               adamw_mode=True)
    else:
        opt = torch.optim.AdamW([param], lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY,
                                fused=impl == "torch_fused", foreach=impl == "torch_foreach")

    def step(_t):
        if pr.bf16:
            pr.g32.copy_(pr.g_in)
        opt.step()
        if pr.bf16:
            pr.copy.copy_(param.detach())
    return step


def plain_stepper(pr, lib_path, threads):
    lib = ctypes.CDLL(lib_path)
    fn = lib.plain_adamw_step
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                   ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                   ctypes.c_double, ctypes.c_double, ctypes.c_double, ctypes.c_double,
                   ctypes.c_double, ctypes.c_int]
    m = torch.zeros_like(pr.p)
    v = torch.zeros_like(pr.p)
    copy_ptr = pr.copy.data_ptr() if pr.bf16 else None

    def step(t):
        fn(pr.p.data_ptr(), pr.g_in.data_ptr(), int(pr.bf16), m.data_ptr(), v.data_ptr(),
           copy_ptr, pr.p.numel(), t, LR, BETAS[0], BETAS[1], EPS, WEIGHT_DECAY, threads)
    return step


def make_stepper(pr, args):
    if args.impl == "plain":
        return plain_stepper(pr, args.plain_lib, args.threads)
    return torch_stepper(pr, args.impl)


def measure(args):
    n = args.size
    p = torch.rand(n) - 0.5
    g = torch.rand(n) - 0.5
    if args.variant == "bf16":
        g = g.to(torch.bfloat16)
    step = make_stepper(Problem(p, g, args.impl), args)
    for t in range(1, args.warmup + 1):
        step(t)
    runs = []
    for t in range(args.warmup + 1, args.warmup + args.steps + 1):
        start = time.perf_counter()
        step(t)
        runs.append((time.perf_counter() - start) * 1e3)
    print(json.dumps({"impl": args.impl, "runs_ms": runs}), flush=True)


def replay(args):
    d = args.replay
    n = os.path.getsize(os.path.join(d, "p.f32")) // 4
    p = torch.from_file(os.path.join(d, "p.f32"), size=n, dtype=torch.float32).clone()
    bf16 = args.variant == "bf16"
    gname, gtype = ("g.bf16", torch.bfloat16) if bf16 else ("g.f32", torch.float32)
    g = torch.from_file(os.path.join(d, gname), size=n, dtype=gtype).clone()
    pr = Problem(p, g, args.impl)
    step = make_stepper(pr, args)
    for t in range(1, args.steps + 1):
        step(t)
    pr.p.numpy().tofile(os.path.join(d, "out_p.f32"))
    if pr.bf16:
        pr.copy.view(torch.int16).numpy().tofile(os.path.join(d, "out_copy.bf16"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--impl", choices=IMPLS, required=True)
    ap.add_argument("--variant", choices=("fp32", "bf16"), required=True)
    ap.add_argument("--size", type=int, default=0)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--plain-lib", default="")
    ap.add_argument("--replay", default="")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.impl == "plain" and not args.plain_lib:
        ap.error("--impl plain needs --plain-lib")
    if args.replay:
        replay(args)
    else:
        measure(args)


if __name__ == "__main__":
    main()
