#!/usr/bin/env python3
"""Checkpoint save and load of a whole training state: ZeroRT's engine against the device
ceiling and DeepSpeed's engine (issue 15).

    bench/peers/ckpt.py [--bin build] [--stages 1,3] [--worlds 1,2] [--width 2048] [--layers 16]
                        [--rounds 7] [--variants zerort,deepspeed,plain,plain_nokick]
                        [--dir /tmp]
                        [--timeout 1200] [--jsonl FILE] [--svg FILE] [--quick]

One training state, three writers, on the same machine and folder:

  zerort     build/bench/engine_ckpt_bench under mpirun -np N: Engine::save_checkpoint (the whole
             commit: temp files, fsync, rename, directory fsyncs, manifest, `latest`) and
             load_checkpoint, warm and cold
  deepspeed  bench/peers/ckpt_ds_worker.py on N gloo ranks (DS_ACCELERATOR=cpu, DeepSpeedCPUAdam):
             engine.save_checkpoint followed by an fsync of every file it wrote (DeepSpeed does not
             fsync; without it its time would end before the bytes are durable), load_checkpoint
             warm and cold
  plain      bench/peers/plain_write.c (compiled here with gcc -O2): the same number of bytes in
             the same number of files per rank as ZeroRT's checkpoint of that round, write(2) +
             sync_file_range every 8 MiB + fsync, the device ceiling of a durable save
  plain_nokick  the same without sync_file_range: whether the early writeback helps here

The model is zrt-train's MLP (tests/peers/twins.py Mlp; ~67M parameters by default, ~1 GiB of
state at stages 1-2 with fp32 weights, masters and two Adam moments), fp32, after one AdamW step.
Each (stage, N) runs `rounds` rounds, the variants in an order rotated per round, one launch per
variant and round, each into a fresh folder under --dir that is deleted afterwards. In a launch a
warm-up save comes first and is not timed. Bytes are measured by walking the written folder.
OMP_NUM_THREADS = MKL_NUM_THREADS = cores / N in every launch. Results: bench/README.md.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

from common import Jsonl, choices, compile_c, free_port, loadavg, machine_meta, rotations, run_together
from ckpt_report import print_tables, summarize, write_svg

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
VARIANTS = ["zerort", "deepspeed", "plain", "plain_nokick"]


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build"),
                    help="ZeroRT build folder holding bench/engine_ckpt_bench (default: build)")
    ap.add_argument("--stages", default="1,3")
    ap.add_argument("--worlds", default="1,2", help="ranks N")
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--dir", default="/tmp", help="where the checkpoints are written")
    ap.add_argument("--timeout", type=float, default=1200, help="seconds per launch")
    ap.add_argument("--jsonl", default="", help="write every launch and summary as JSON lines")
    ap.add_argument("--svg", default="", help="write a bar chart of GB/s")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: --width 256 --layers 2 --rounds 1")
    args = ap.parse_args()
    if args.quick:
        args.width, args.layers, args.rounds = 256, 2, 1
    args.stages = [int(s) for s in args.stages.split(",")]
    args.worlds = [int(n) for n in args.worlds.split(",")]
    args.variants = choices(ap, "--variants", args.variants, VARIANTS)
    if {"plain", "plain_nokick"} & set(args.variants) and "zerort" not in args.variants:
        ap.error("plain writes ZeroRT's file sizes: it needs the zerort variant")
    if args.rounds < 1 or min(args.worlds) < 1 or any(s not in (0, 1, 2, 3) for s in args.stages):
        ap.error("--rounds and --worlds must be >= 1, --stages within 0..3")
    # zerort first: round 0 then measures ZeroRT's files before plain needs their sizes.
    args.variants = [v for v in VARIANTS if v in args.variants]
    args.bench = os.path.join(args.bin, "bench", "engine_ckpt_bench")
    if "zerort" in args.variants and not os.access(args.bench, os.X_OK):
        ap.error(f"{args.bench} not found: build it (-DZRT_BUILD_BENCH=ON, target "
                 "engine_ckpt_bench) or pass --bin")
    return args


def build_plain(folder):
    """Compiles plain_write.c into folder/plain_write; returns its path and the compiler line."""
    return compile_c("gcc", ["-O2", "-pthread"], "plain_write.c", os.path.join(folder, "plain_write"))


def child_env(threads, **extra):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", **extra)
    env.pop("ZRT_NUM_THREADS", None)
    return env


def run_all(launches, timeout):
    """Runs [(argv, env)] at once (common.run_together). Returns (stdout of the first, error text
    or None): on a failure, why, the last line any process printed (often the exception) and the
    tails of the outputs."""
    texts, error = run_together(launches, timeout)
    if error:
        lines = [ln for pair in texts for s in pair for ln in s.splitlines()
                 if any(c.isalpha() for c in ln)]
        tail = "\n".join(s[-1500:] for pair in texts for s in pair if s.strip())
        error = f"{error}: {lines[-1].strip() if lines else 'no output'}\n{tail}"
    return texts[0][0], error


def json_line(stdout, prefix):
    lines = [ln for ln in stdout.splitlines() if ln.startswith(prefix)]
    if not lines:
        raise RuntimeError(f"no result line starting {prefix!r} in the output")
    return json.loads(lines[-1])


def launch_zerort(stage, world, folder, args, threads):
    argv = ["mpirun", "-np", str(world), "--oversubscribe", "--bind-to", "none", "--timeout",
            str(int(args.timeout)), "-x", "OMP_NUM_THREADS", "-x", "MKL_NUM_THREADS",
            args.bench, "--dir", folder, "--stage", str(stage), "--width", str(args.width),
            "--layers", str(args.layers)]
    out, error = run_all([(argv, child_env(threads))], args.timeout + 30)
    if error:
        raise RuntimeError(error)
    return json_line(out, '{"framework"'), os.path.join(folder, "ckpt")


def launch_deepspeed(stage, world, folder, args, threads):
    port = str(free_port())
    launches = []
    for rank in range(world):
        env = child_env(threads, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                        LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                        DS_ACCELERATOR="cpu")
        argv = [sys.executable, os.path.join(HERE, "ckpt_ds_worker.py"), "--dir", folder,
                "--stage", str(stage), "--width", str(args.width), "--layers", str(args.layers),
                "--threads", str(threads)]
        launches.append((argv, env))
    out, error = run_all(launches, args.timeout)
    if error:
        raise RuntimeError(error)
    return json_line(out, '{"framework"'), os.path.join(folder, "ckpt")


def launch_plain(layout, folder, args, kick):
    if not layout:
        raise RuntimeError("no ZeroRT checkpoint measured yet: plain writes its file sizes")
    argv = [args.plain_bin] + ([] if kick else ["--no-kick"]) + [folder]
    argv += [f"{rank}:{size}" for rank, size in layout]
    out, error = run_all([(argv, child_env(1))], args.timeout)
    if error:
        raise RuntimeError(error)
    seconds = json_line(out, '{"seconds"')["seconds"]
    return {"framework": "plain" if kick else "plain_nokick", "save_s": seconds}, folder


def walk(root):
    """Files under root: [(relative path, size in bytes, allocated bytes)]."""
    files = []
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            st = os.stat(path)
            files.append((os.path.relpath(path, root), st.st_size, st.st_blocks * 512))
    return sorted(files)


def zerort_layout(root, files):
    """[(rank, size)] of a ZeroRT checkpoint: each file's rank from the tag's manifest, rank 0 for
    the manifest and `latest`."""
    ranks = {}
    for rel, _, _ in files:
        if os.path.basename(rel) == "zrt_manifest.json":
            with open(os.path.join(root, rel)) as f:
                for entry in json.load(f)["files"]:
                    ranks[os.path.join(os.path.dirname(rel), entry["name"])] = entry["rank"]
    return [(ranks.get(rel, 0), size) for rel, size, _ in files]


def measure(variant, stage, world, args, state):
    """One launch; returns its result row (with the error instead of times if it failed)."""
    threads = max(1, (os.cpu_count() or 1) // world)
    folder = tempfile.mkdtemp(prefix=f"zrt-ckpt-{variant}-", dir=args.dir)
    row = {"kind": "run", "variant": variant, "stage": stage, "world": world, "threads": threads}
    try:
        if variant == "zerort":
            result, root = launch_zerort(stage, world, folder, args, threads)
        elif variant == "deepspeed":
            result, root = launch_deepspeed(stage, world, folder, args, threads)
        else:
            result, root = launch_plain(state.get((stage, world)), folder, args,
                                        kick=variant == "plain")
        files = walk(root)
        if variant == "zerort":
            state[(stage, world)] = zerort_layout(root, files)
        row.update({k: v for k, v in result.items() if k != "framework"})
        row.update({"files": len(files), "bytes": sum(f[1] for f in files),
                    "allocated": sum(f[2] for f in files), "names": [f[0] for f in files]})
    except Exception as e:  # a failed variant is a row with its error
        row["error"] = str(e)[-3000:]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    row["loadavg"] = loadavg()
    return row


def run(args, emit):
    state, results = {}, []
    start = time.time()
    for stage in args.stages:
        for world in args.worlds:
            runs = {v: [] for v in args.variants}
            before = loadavg()
            for rnd, pos, variant in rotations(args.variants, args.rounds):
                row = measure(variant, stage, world, args, state)
                row.update(round=rnd, position=pos)
                emit(row)
                runs[variant].append(row)
                status = row.get("error", "").splitlines()[0][:120] if "error" in row else "ok"
                print(f"[{time.time() - start:.0f} s] stage {stage} N={world} round {rnd} "
                      f"{variant}: {status}", file=sys.stderr, flush=True)
            for s in summarize(stage, world, runs, before, loadavg()):
                emit(s)
                results.append(s)
    return results, time.time() - start


def main():
    args = parse_args()
    os.makedirs(args.dir, exist_ok=True)
    jsonl = Jsonl(args.jsonl)
    tools = tempfile.mkdtemp(prefix="zrt-plain-write-")
    try:
        args.plain_bin, plain_cc = build_plain(tools)
        info = machine_meta(plain_compiler=plain_cc, rounds=args.rounds, width=args.width,
                            layers=args.layers, dir=args.dir)
        jsonl(info)
        results, seconds = run(args, jsonl)
        jsonl({"kind": "end", "seconds": seconds, "loadavg": loadavg()})
        print_tables(results, info, loadavg(), seconds)
        if args.svg:
            write_svg(results, args.svg, info)
    finally:
        shutil.rmtree(tools, ignore_errors=True)
        jsonl.close()
    return 0 if all(not r["errors"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
