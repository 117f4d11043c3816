#!/usr/bin/env python3
"""NVMe optimizer offload (ZeRO-Infinity) against the disk's limit and DeepSpeed's own, on one
model and the same swap folder (docs/PERFORMANCE.md, "NVMe offload").

  bench/nvme_offload.py [--build build] [--dir /tmp] [--ranks 1] [--reps 7] [--steps 3]
                        [--width 2048] [--layers 16] [--dtype bf16] [--stage 3] [--params nvme]
                        [--sub-group-size 16777216] [--jsonl FILE] [--only zerort,deepspeed,limit]

Variants, one launch per repetition, all variants of a repetition in rotated order:
  zerort-cpu       zero_bench --offload (masters and moments in memory: the step without disk)
  zerort-nvme      zero_bench --nvme DIR (no pipelining: DeepSpeed's default)
  zerort-nvme-pipe zero_bench --nvme DIR --pipeline (pipeline_read and pipeline_write)
  deepspeed-nvme   bench/peers/step_worker.py, DeepSpeed's offload_optimizer nvme with the same
                   sub_group_size, aio and pipeline settings as zerort-nvme-pipe
  limit            bench/aio_limit (plain C, O_DIRECT, same block size and queue depth): an
                   O_DIRECT write and read of as many bytes as zerort-nvme-pipe's step moves

Every launch reports the median step time of its timed steps (the slowest rank's) and each
rank's peak RSS; zero_bench adds the swap bytes per step (the I/O engine's completions and the
kernel's /proc/self/io count) and the optimizer's streaming time, step_worker the kernel's count
of DeepSpeed's bytes per step. The table gives, per variant,
median (min-max) over repetitions; the swap efficiency is the limit's time for the same bytes
(bytes read / limit read rate + bytes written / limit write rate, the limit's medians) over the
optimizer's streaming time.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "peers"))
from common import Jsonl, free_port, loadavg, machine_meta, rotations, run_together  # noqa: E402


def spread(values, digits=0):
    """'median (min-max)' of a non-empty list."""
    return (f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-"
            f"{max(values):.{digits}f})")

VARIANTS = ("zerort-cpu", "zerort-nvme", "zerort-nvme-pipe", "deepspeed-nvme", "limit")


def zero_bench_argv(v, args):
    argv = ["mpirun", "-np", str(args.ranks), "--oversubscribe", "--bind-to", "none", "--timeout",
            str(args.timeout), "-x", "OMP_NUM_THREADS",
            os.path.join(args.build, "bench", "zero_bench"), "--json", "--model", "mlp",
            "--width", str(args.width), "--layers", str(args.layers), "--batch", str(args.batch),
            "--stage", str(args.stage), "--dtype", args.dtype, "--warmup", "1",
            "--steps", str(args.steps), "--lr", "1e-5"]
    if v == "zerort-cpu":
        return argv + ["--offload"]  # (zero_bench's --offload is the optimizer's)
    argv += ["--nvme", args.dir, "--sub-group-size", str(args.sub_group_size),
             "--aio-block-size", str(args.block_size), "--aio-queue-depth", str(args.queue_depth)]
    argv += ["--nvme-params"] if args.params == "nvme" else []
    return argv + (["--pipeline"] if v == "zerort-nvme-pipe" else [])


def deepspeed_argvs(args, threads):
    python = os.path.join(os.path.realpath(sys.prefix), "bin", "python")
    argv = [python, os.path.join(HERE, "peers", "step_worker.py"), "--framework", "deepspeed",
            "--model", "mlp", "--width", str(args.width), "--layers", str(args.layers),
            "--batch", str(args.batch), "--stage", str(args.stage), "--dtype", args.dtype,
            "--warmup", "1", "--steps", str(args.steps), "--lr", "1e-5",
            "--threads", str(threads), "--offload", "nvme", "--nvme-path", args.dir,
            "--sub-group-size", str(args.sub_group_size), "--buffer-count", "16", "--pipeline",
            "--aio-block-size", str(args.block_size), "--aio-queue-depth", str(args.queue_depth),
            "--offload-param", args.params, "--param-buffer-count", "16"]
    return [argv] * args.ranks


def last_json(text):
    rows = [ln for ln in text.splitlines() if ln.startswith("{\"")]
    return json.loads(rows[-1]) if rows else None


def run_limit(args, nbytes):
    exe = os.path.join(args.build, "bench", "aio_limit")
    mib = max(1, int(nbytes) >> 20)
    out = subprocess.run([exe, "--dir", args.dir, "--bytes", f"{mib}M", "--block-size",
                          str(args.block_size), "--queue-depth", str(args.queue_depth),
                          "--reps", "1", "--json"], capture_output=True, text=True,
                         timeout=args.timeout, check=True)
    rows = [json.loads(ln) for ln in out.stdout.splitlines() if ln.startswith("{\"rep\"")]
    row = rows[-1] if rows else None
    if row is None:
        raise RuntimeError(f"aio_limit printed no JSON: {out.stdout[-500:]}{out.stderr[-500:]}")
    return row


def run_variant(v, args, swap_bytes):
    threads = max(1, (os.cpu_count() or 1) // args.ranks)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if v == "limit":
        return run_limit(args, swap_bytes)
    if v.startswith("zerort"):
        launches = [(zero_bench_argv(v, args), env)]
    else:
        port = free_port()
        launches = [(argv, dict(env, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(args.ranks),
                                LOCAL_WORLD_SIZE=str(args.ranks), MASTER_ADDR="127.0.0.1",
                                MASTER_PORT=str(port), DS_ACCELERATOR="cpu"))
                    for r, argv in enumerate(deepspeed_argvs(args, threads))]
    texts, failed = run_together(launches, args.timeout)
    row = last_json(texts[0][0])
    if failed or row is None or not row.get("loss_falls"):
        tail = "\n".join((o + e)[-2000:] for o, e in texts)
        raise RuntimeError(f"{v}: {failed or 'no JSON line or loss did not fall'}\n{tail}")
    return row


def summarize(results):
    lim = results.get("limit", [])
    write_bps = statistics.median(r["write_gbps"] for r in lim) * 1e9 if lim else None
    read_bps = statistics.median(r["read_gbps"] for r in lim) * 1e9 if lim else None
    print("| variant | step ms | optimizer stream ms | swap MiB/step read / write | "
          "swap efficiency vs limit | peak RSS MiB/rank |")
    print("|---|---|---|---|---|---|")
    for v, rows in results.items():
        if v == "limit" or not rows:
            continue
        step = spread([r["step_ms"] for r in rows])
        rss = spread([r["peak_rss_mib"] for r in rows])
        stream = eff = io = "-"
        if rows[0].get("kernel_read_mib") is not None and "stream_ms" not in rows[0]:
            io = f"{statistics.median(r['kernel_read_mib'] for r in rows):.0f} / " \
                 f"{statistics.median(r['kernel_write_mib'] for r in rows):.0f} (kernel)"
        if "stream_ms" in rows[0]:
            stream = spread([r["stream_ms"] for r in rows])
            io = f"{statistics.median(r['swap_read_mib'] for r in rows):.0f} / " \
                 f"{statistics.median(r['swap_write_mib'] for r in rows):.0f}"
            if write_bps:
                effs = [((r["swap_read_mib"] * 2**20) / read_bps +
                         (r["swap_write_mib"] * 2**20) / write_bps) / (r["stream_ms"] / 1e3)
                        for r in rows]
                eff = spread(effs, digits=2)
        print(f"| {v} | {step} | {stream} | {io} | {eff} | {rss} |")
    if lim:
        print(f"\nlimit (aio_limit, {lim[0].get('bytes', 0) >> 20} MiB): write "
              f"{spread([r['write_gbps'] for r in lim], digits=2)} GB/s, read "
              f"{spread([r['read_gbps'] for r in lim], digits=2)} GB/s")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(os.path.dirname(HERE), "build"))
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="the swap folder's parent")
    for name, default in (("ranks", 1), ("reps", 7), ("steps", 3), ("width", 2048),
                          ("layers", 16), ("batch", 4), ("stage", 3),
                          ("sub-group-size", 1 << 22), ("block-size", 1 << 20),
                          ("queue-depth", 8), ("timeout", 900)):
        ap.add_argument(f"--{name}", type=int, default=default)
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp32"))
    ap.add_argument("--params", default="none", choices=("none", "nvme"),
                    help="nvme: the NVMe variants keep the parameters on NVMe too (offload_param, "
                         "max_in_cpu 0, buffer_size 2^23; buffer_count 5 for ZeroRT's unit "
                         "buffers, 16 for DeepSpeed's per-parameter ones, which fails with 5; "
                         "stage 3); zerort-cpu keeps everything in memory")
    ap.add_argument("--only", default=",".join(VARIANTS))
    ap.add_argument("--jsonl", default="")
    args = ap.parse_args()
    args.variants = [v for v in VARIANTS if any(o in v for o in args.only.split(","))]
    return args


def main():
    args = parse_args()
    out = Jsonl(args.jsonl) if args.jsonl else None
    if out:
        out({"kind": "meta", **machine_meta(args=vars(args))})
    results = {v: [] for v in args.variants}
    # The limit moves what ZeroRT's pipelined step moves: measured once first when it is run.
    swap_bytes = 0
    if "zerort-nvme-pipe" in args.variants:
        first = run_variant("zerort-nvme-pipe", args, 0)
        swap_bytes = (first["swap_read_mib"] + first["swap_write_mib"]) / 2 * 2**20
    for rnd, _, v in rotations(args.variants, args.reps):
        try:
            row = run_variant(v, args, swap_bytes or 1 << 30)
        except (RuntimeError, subprocess.SubprocessError, OSError) as e:
            print(f"round {rnd} {v}: FAILED: {e}", file=sys.stderr, flush=True)
            if out:
                out({"kind": "error", "variant": v, "round": rnd, "error": str(e)[-3000:]})
            continue
        row.update(kind="launch", variant=v, round=rnd, loadavg=loadavg())
        results[v].append(row)
        if out:
            out(row)
        print(f"round {rnd} {v}: " + (f"{row['step_ms']:.0f} ms" if "step_ms" in row else
                                      f"write {row['write_gbps']:.2f} read {row['read_gbps']:.2f} GB/s"),
              file=sys.stderr, flush=True)
    summarize(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
