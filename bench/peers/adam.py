#!/usr/bin/env python3
"""ZeroRT's fused CPU Adam side by side with the real peers and the plain-loop limit.

    bench/peers/adam.py [--bin build] [--sizes 64M,256M] [--threads 1,2] [--variants fp32,bf16]
                        [--reps 7] [--warmup 2] [--steps 3] [--impls zerort,deepspeed,...]
                        [--jsonl FILE] [--svg FILE] [--quick]

On the same machine, data layout (one flat fp32 parameter of N elements), thread count and
hyper-parameters (AdamW, lr 1e-3, betas 0.9/0.999, eps 1e-8, weight decay 0.01):

  zerort         ZeroRT's fused CPU kernel: `<bin>/bench/adam_bench --impls fused`
  deepspeed      deepspeed.ops.adam.DeepSpeedCPUAdam (adamw_mode=True)
  torch_fused    torch.optim.AdamW(fused=True)
  torch_foreach  torch.optim.AdamW(foreach=True)
  plain          bench/peers/plain_adam.c: one plain OpenMP loop with the same access pattern,
                 gcc -O3 -march=native; the physical limit the ratios are taken against

Every measurement is a fresh process (warm-up steps, then timed steps; its value is the median
of its timed steps) with OMP_NUM_THREADS = MKL_NUM_THREADS = T, torch.set_num_threads(T) and
ZRT_NUM_THREADS unset. Repetition i runs the implementations in an order rotated by i. A
correctness run first compares every implementation's parameters after 5 steps with a float64
reference. Metrics and variants: bench/README.md.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

from adam_report import print_tables, summarize, write_svg
from common import choices, compile_c, format_count, loadavg, machine_meta, parse_count

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
IMPLS = ["zerort", "deepspeed", "torch_fused", "torch_foreach", "plain"]
LR, BETAS, EPS, WEIGHT_DECAY = 1e-3, (0.9, 0.999), 1e-8, 0.01
CHECK_SIZE = (1 << 20) + 37  # odd: every implementation's tail handling is exercised
CHECK_STEPS = 5
CHECK_TOL = 1e-6  # max |p - ref| / max |ref| after CHECK_STEPS steps
CHILD_TIMEOUT_S = 1800


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build"),
                    help="ZeroRT build folder holding bench/adam_bench (default: build)")
    ap.add_argument("--sizes", default="64M,256M")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--variants", default="fp32,bf16")
    ap.add_argument("--impls", default=",".join(IMPLS))
    ap.add_argument("--reps", type=int, default=7, help="processes per implementation and row")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps in each process")
    ap.add_argument("--steps", type=int, default=3, help="timed steps in each process")
    ap.add_argument("--jsonl", default="", help="write every run and summary as JSON lines")
    ap.add_argument("--svg", default="", help="write a bar chart of Gparam/s")
    ap.add_argument("--plain-dir", default="",
                    help="where to build plain_adam.so (default: a temporary folder)")
    ap.add_argument("--no-check", action="store_true", help="skip the correctness run")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: --sizes 1M --reps 2 --warmup 1 --steps 2")
    args = ap.parse_args()
    if args.quick:
        args.sizes, args.reps, args.warmup, args.steps = "1M", 2, 1, 2
    args.sizes = [parse_count(s) for s in args.sizes.split(",")]
    args.threads = [int(t) for t in args.threads.split(",")]
    args.variants = choices(ap, "--variants", args.variants, ("fp32", "bf16"))
    args.impls = choices(ap, "--impls", args.impls, IMPLS)
    if args.reps < 1 or args.steps < 1 or args.warmup < 0 or min(args.threads) < 1:
        ap.error("--reps, --steps and --threads must be >= 1, --warmup >= 0")
    args.adam_bench = os.path.join(args.bin, "bench", "adam_bench")
    if "zerort" in args.impls and not os.access(args.adam_bench, os.X_OK):
        ap.error(f"{args.adam_bench} not found: build it (-DZRT_BUILD_BENCH=ON, target adam_bench)"
                 " or pass --bin")
    return args


def build_plain(folder):
    """Compiles plain_adam.c into folder/plain_adam.so; returns its path and the compiler line."""
    os.makedirs(folder, exist_ok=True)
    return compile_c("gcc", ["-O3", "-march=native", "-fopenmp", "-fno-math-errno", "-shared",
                             "-fPIC"], "plain_adam.c", os.path.join(folder, "plain_adam.so"))


def child_env(threads):
    env = dict(os.environ)
    env.pop("ZRT_NUM_THREADS", None)
    env["OMP_NUM_THREADS"] = str(threads)
    env["MKL_NUM_THREADS"] = str(threads)
    return env


def command(impl, variant, threads, args, extra):
    """The argv of one child: adam_bench for zerort, adam_worker.py for the others."""
    if impl == "zerort":
        return [args.adam_bench, "--variants", variant, "--threads", str(threads)] + extra
    return [sys.executable, os.path.join(HERE, "adam_worker.py"), "--impl", impl, "--variant",
            variant, "--threads", str(threads), "--plain-lib", args.plain_lib] + extra


def run_child(argv, threads):
    r = subprocess.run(argv, env=child_env(threads), capture_output=True, text=True,
                       timeout=CHILD_TIMEOUT_S)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {r.returncode}:\n{r.stderr[-3000:]}")
    return r.stdout


def measure_once(impl, variant, size, threads, args):
    """One process: returns the timed steps' milliseconds."""
    if impl == "zerort":
        extra = ["--sizes", str(size), "--impls", "fused", "--no-sweep", "--no-triad", "--warmup",
                 str(args.warmup), "--reps", str(args.steps), "--json"]
        out = json.loads(run_child(command(impl, variant, threads, args, extra), threads))
        args.zerort_isa = out["isa"]
        return out["rows"][0]["runs_ms"]
    extra = ["--size", str(size), "--warmup", str(args.warmup), "--steps", str(args.steps)]
    out = run_child(command(impl, variant, threads, args, extra), threads)
    lines = [ln for ln in out.splitlines() if ln.startswith('{"impl"')]
    return json.loads(lines[-1])["runs_ms"]


def measure_row(variant, size, threads, args, emit):
    """All implementations at one size, variant and thread count, args.reps processes each in
    rotated order. Returns ({impl: [per-process median ms]}, load average before, after)."""
    values = {impl: [] for impl in args.impls}
    k = len(args.impls)
    load_before = loadavg()
    for rep in range(args.reps):
        order = args.impls[rep % k:] + args.impls[:rep % k]
        for pos, impl in enumerate(order):
            runs = measure_once(impl, variant, size, threads, args)
            values[impl].append(statistics.median(runs))
            emit({"kind": "run", "variant": variant, "params": size, "threads": threads,
                  "impl": impl, "rep": rep, "position": pos, "runs_ms": runs,
                  "value_ms": values[impl][-1], "loadavg": loadavg()})
    return values, load_before, loadavg()


def reference_adamw(p, g, steps):
    """float64 AdamW (decoupled decay, bias correction) with the same gradient every step."""
    p, g = p.astype(np.float64), g.astype(np.float64)
    m, v = np.zeros_like(p), np.zeros_like(p)
    for t in range(1, steps + 1):
        p = p * (1 - LR * WEIGHT_DECAY)
        m = BETAS[0] * m + (1 - BETAS[0]) * g
        v = BETAS[1] * v + (1 - BETAS[1]) * g * g
        bc1, bc2 = 1 - BETAS[0] ** t, 1 - BETAS[1] ** t
        p = p - LR / bc1 * m / (np.sqrt(v) / np.sqrt(bc2) + EPS)
    return p


def check_variant(variant, args, workdir):
    """Runs every implementation CHECK_STEPS steps on the same data; returns result rows."""
    gen = torch.Generator().manual_seed(1234)
    p = torch.rand(CHECK_SIZE, generator=gen) - 0.5
    g = torch.rand(CHECK_SIZE, generator=gen) - 0.5
    if variant == "bf16":
        g = g.to(torch.bfloat16)
    ref = reference_adamw(p.numpy(), g.float().numpy(), CHECK_STEPS)
    threads = max(args.threads)
    rows = []
    for impl in args.impls:
        d = os.path.join(workdir, f"{variant}-{impl}")
        os.makedirs(d)
        p.numpy().tofile(os.path.join(d, "p.f32"))
        if variant == "bf16":
            g.view(torch.int16).numpy().tofile(os.path.join(d, "g.bf16"))
        else:
            g.numpy().tofile(os.path.join(d, "g.f32"))
        extra = ["--replay", d, "--steps", str(CHECK_STEPS)]
        if impl == "zerort":
            extra += ["--variant", variant]
        run_child(command(impl, variant, threads, args, extra), threads)
        out = np.fromfile(os.path.join(d, "out_p.f32"), dtype=np.float32)
        diff = float(np.abs(out.astype(np.float64) - ref).max() / np.abs(ref).max())
        copy_ok = True
        if variant == "bf16":
            copy = np.fromfile(os.path.join(d, "out_copy.bf16"), dtype=np.int16)
            want = torch.from_numpy(out).to(torch.bfloat16).view(torch.int16).numpy()
            copy_ok = bool(np.array_equal(copy, want))
        rows.append({"kind": "check", "variant": variant, "impl": impl, "params": CHECK_SIZE,
                     "steps": CHECK_STEPS, "threads": threads, "max_rel_diff": diff,
                     "tolerance": CHECK_TOL, "bf16_copy_exact": copy_ok,
                     "ok": diff <= CHECK_TOL and copy_ok})
    return rows


def run_checks(args, emit):
    workdir = tempfile.mkdtemp(prefix="zrt-adam-check-")
    try:
        rows = [r for v in args.variants for r in check_variant(v, args, workdir)]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"## Correctness: {CHECK_STEPS} steps on {CHECK_SIZE} parameters, "
          f"{max(args.threads)} thread(s), against float64 AdamW; "
          f"max |p - ref| / max |ref| <= {CHECK_TOL:g}, bf16 copy == p.to(bf16) bit for bit\n")
    print("| variant | impl | max rel diff | bf16 copy | ok |\n|---|---|---|---|---|")
    for r in rows:
        emit(r)
        copy = ("exact" if r["bf16_copy_exact"] else "DIFFERS") if r["variant"] == "bf16" else "-"
        print(f"| {r['variant']} | {r['impl']} | {r['max_rel_diff']:.2e} | {copy} | "
              f"{'ok' if r['ok'] else 'FAILED'} |")
    print()
    return all(r["ok"] for r in rows)


def meta(args):
    return machine_meta(plain_compiler=args.plain_cc,
                        hyper={"lr": LR, "betas": BETAS, "eps": EPS, "weight_decay": WEIGHT_DECAY},
                        reps=args.reps, warmup=args.warmup, steps=args.steps)


def main():
    args = parse_args()
    plain_dir = args.plain_dir or tempfile.mkdtemp(prefix="zrt-plain-adam-")
    try:
        args.plain_lib, args.plain_cc = build_plain(plain_dir)
        return run(args)
    finally:
        if not args.plain_dir:
            shutil.rmtree(plain_dir, ignore_errors=True)


def run(args):
    jsonl = open(args.jsonl, "w") if args.jsonl else None

    def emit(obj):
        if jsonl:
            jsonl.write(json.dumps(obj) + "\n")
            jsonl.flush()

    info = meta(args)
    emit(info)
    versions = info["versions"]
    print(f"# Adam side by side: {info['cpu']}, {info['cpus']} CPUs, torch {versions['torch']}, "
          f"DeepSpeed {versions['deepspeed']}, {info['date']}\n")
    ok = args.no_check or run_checks(args, emit)
    start = time.time()
    results = []
    for size in args.sizes:
        for variant in args.variants:
            for threads in args.threads:
                values, before, after = measure_row(variant, size, threads, args, emit)
                for row in summarize(variant, size, threads, values, before, after):
                    emit(row)
                    results.append(row)
                print(f"[{time.time() - start:.0f} s] {variant} {format_count(size)} "
                      f"{threads} thread(s) done", file=sys.stderr, flush=True)
    info["zerort_isa"] = getattr(args, "zerort_isa", None)
    emit({"kind": "end", "seconds": time.time() - start, "loadavg": loadavg(),
          "zerort_isa": info["zerort_isa"], "checks_ok": ok})
    print_tables(results, info, loadavg(), time.time() - start)
    if args.svg:
        write_svg(results, args.svg, info)
    if jsonl:
        jsonl.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
