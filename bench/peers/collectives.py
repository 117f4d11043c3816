#!/usr/bin/env python3
"""ZeroRT's collectives side by side with every baseline a user could pick instead.

    bench/peers/collectives.py [--comm-bench build/bench/comm_bench] [--sizes 1M,4M,16M,64M]
                               [--ranks 2,4] [--ops reduce_scatter,all_gather,all_reduce]
                               [--reps 7] [--groups zrt,mpi,ring,forced,gloo] [--timeout 600]
                               [--jsonl FILE] [--svg FILE] [--quick]

On one machine, with the same float32 buffer sizes (S = the whole array, nccl-tests' convention)
and the same timing convention (bench/README.md "comm_bench"), at N ranks each:

  zrt      build/bench/comm_bench --json: rows zrt (the backend as configured), zrt_ring and
           zrt_native (its two algorithms forced)
  mpi      bench/peers/mpi_coll.c (mpicc -O3, built here into a temporary folder): Open MPI's
           MPI_Reduce_scatter, MPI_Reduce_scatter_block, MPI_Allreduce keeping a slice,
           MPI_Allgather and MPI_Allreduce with Open MPI's default choice of algorithm
  ring     mpi_coll.c's plain point-to-point ring (MPI_Sendrecv) for each op
  forced   each of the tuned component's algorithms for reduce_scatter, reduce_scatter_block,
           allgather and allreduce (as `ompi_info --param coll tuned --level 9` lists them),
           forced with --mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_<op>_algorithm K
  gloo     torch.distributed's gloo backend (coll_gloo_worker.py, env:// rendezvous on a free
           loopback port): reduce_scatter_tensor, all_gather_into_tensor, all_reduce

Every variant is one launch (mpirun or N Python processes) per round with all sizes and ops
inside; rounds run the variants in rotated order; each figure is the median over rounds, with min
and max. Every rank runs with OMP_NUM_THREADS=1. A launch that fails or times out gives rows with
its error, not the end of the run. "best baseline" is the fastest row that is not ZeroRT's.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from common import (Jsonl, choices, compile_c, format_count, free_port, loadavg, machine_meta, parse_count,
                    rotations, run_together)
from collectives_report import print_report, summarize, write_svg

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OPS = ["reduce_scatter", "all_gather", "all_reduce"]
GROUPS = ["zrt", "mpi", "ring", "forced", "gloo"]
# Open MPI's tuned parameter name -> (our op, mpi_coll --impls value, row name)
FORCED_OPS = {"reduce_scatter": ("reduce_scatter", "mpi_rs", "mpi_reduce_scatter"),
              "reduce_scatter_block": ("reduce_scatter", "mpi_rsb", "mpi_reduce_scatter_block"),
              "allgather": ("all_gather", "mpi_ag", "mpi_allgather"),
              "allreduce": ("all_reduce", "mpi_ar", "mpi_allreduce")}
MPI_DEFAULT_ROWS = {"reduce_scatter": ["mpi_reduce_scatter", "mpi_reduce_scatter_block",
                                       "mpi_allreduce_slice"],
                    "all_gather": ["mpi_allgather"], "all_reduce": ["mpi_allreduce"]}


def bus_factor(op, n):
    return 2.0 * (n - 1) / n if op == "all_reduce" else (n - 1) / n


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--comm-bench", default=os.path.join(ROOT, "build", "bench", "comm_bench"))
    ap.add_argument("--sizes", default="1M,4M,16M,64M", help="bytes of the whole array")
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--reps", type=int, default=7, help="rounds (launches per variant)")
    ap.add_argument("--groups", default=",".join(GROUPS), help="variant groups to run")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per launch")
    ap.add_argument("--jsonl", default="", help="write every launch and summary as JSON lines")
    ap.add_argument("--svg", default="", help="write a bar chart of busbw")
    ap.add_argument("--quick", action="store_true", help="smoke run: --sizes 1M --ranks 2 --reps 1")
    args = ap.parse_args()
    if args.quick:
        args.sizes, args.ranks, args.reps = "1M", "2", 1
    args.sizes = sorted({parse_count(s) for s in args.sizes.split(",")})
    args.ranks = [int(n) for n in args.ranks.split(",")]
    args.ops = choices(ap, "--ops", args.ops, OPS)
    args.groups = choices(ap, "--groups", args.groups, GROUPS)
    if args.reps < 1 or min(args.ranks) < 2:
        ap.error("--reps must be >= 1 and --ranks >= 2")
    if "zrt" in args.groups and not os.access(args.comm_bench, os.X_OK):
        ap.error(f"{args.comm_bench} not found: build target comm_bench or pass --comm-bench")
    return args


def child_env():
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env.pop("ZRT_NUM_THREADS", None)
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def mpirun(n, timeout, mca=()):
    argv = ["mpirun", "-np", str(n), "--oversubscribe", "--bind-to", "none", "--timeout",
            str(timeout), "-x", "OMP_NUM_THREADS=1"]
    for key, value in mca:
        argv += ["--mca", key, str(value)]
    return argv


def forced_algorithms():
    """[(tuned op name, K, algorithm name)] for the ops of FORCED_OPS, K >= 1 (0 is 'ignore')."""
    out = subprocess.run(["ompi_info", "--param", "coll", "tuned", "--level", "9", "--parsable"],
                         capture_output=True, text=True, check=True).stdout
    algos = []
    for line in out.splitlines():
        # mca:coll:tuned:param:coll_tuned_allreduce_algorithm:enumerator:value:4:ring
        parts = line.split(":")
        if len(parts) != 9 or parts[5:7] != ["enumerator", "value"]:
            continue
        param = parts[4]
        if not (param.startswith("coll_tuned_") and param.endswith("_algorithm")):
            continue
        op = param[len("coll_tuned_"):-len("_algorithm")]
        if op in FORCED_OPS and int(parts[7]) > 0:
            algos.append((op, int(parts[7]), parts[8]))
    return algos


class Variant:
    """One launch per round: `argv(n)` runs it, `parse(stdout)` gives its rows, `expected`
    lists the (op, row name) pairs it should produce (each at every size)."""

    def __init__(self, name, group, argv, parse, expected, launcher="mpirun"):
        self.name, self.group, self.argv, self.parse = name, group, argv, parse
        self.expected, self.launcher = expected, launcher


def parse_json_lines(stdout):
    return [json.loads(ln) for ln in stdout.splitlines() if ln.startswith("{")]


def parse_comm_bench(n):
    def parse(stdout):
        start = stdout.index('{"ranks"')
        doc = json.loads(stdout[start:stdout.rindex("}") + 1])
        rows = []
        for r in doc["rows"]:
            for impl in ("zrt", "zrt_ring", "zrt_native"):
                busbw = r.get(f"{impl}_busbw")
                if busbw:
                    secs = r["bytes"] / (busbw * 1e9 / bus_factor(r["op"], n))
                    rows.append({"op": r["op"], "impl": impl, "bytes": r["bytes"],
                                 "seconds": secs, "wrong": r["wrong"]})
        return rows
    return parse


def make_variants(args, n, coll_bin, algos):
    sizes = ",".join(str(s) for s in args.sizes)
    ops = ",".join(args.ops)
    out = []
    if "zrt" in args.groups:
        lo, hi = format_count(args.sizes[0]), format_count(args.sizes[-1])
        argv = mpirun(n, args.timeout) + [args.comm_bench, "--json", "--ops", ops, "--sizes",
                                          f"{lo}:{hi}"]
        expected = [(op, impl) for op in args.ops for impl in ("zrt", "zrt_ring", "zrt_native")
                    if not (op == "all_reduce" and impl != "zrt")]
        out.append(Variant("zrt", "zrt", argv, parse_comm_bench(n), expected))
    if "mpi" in args.groups:
        argv = mpirun(n, args.timeout) + [coll_bin, "--ops", ops, "--impls", "mpi", "--sizes",
                                          sizes]
        expected = [(op, impl) for op in args.ops for impl in MPI_DEFAULT_ROWS[op]]
        out.append(Variant("mpi default", "mpi", argv, parse_json_lines, expected))
    if "ring" in args.groups:
        argv = mpirun(n, args.timeout) + [coll_bin, "--ops", ops, "--impls", "ring", "--sizes",
                                          sizes]
        out.append(Variant("mpi_ring", "ring", argv, parse_json_lines,
                           [(op, "mpi_ring") for op in args.ops]))
    if "forced" in args.groups:
        out += forced_variants(args, n, coll_bin, algos, sizes)
    if "gloo" in args.groups:
        argv = [sys.executable, os.path.join(HERE, "coll_gloo_worker.py"), "--ops", ops,
                "--sizes", sizes]
        out.append(Variant("torch_gloo", "gloo", argv, parse_json_lines,
                           [(op, "torch_gloo") for op in args.ops], launcher="python"))
    return out


def forced_variants(args, n, coll_bin, algos, sizes):
    out = []
    for tuned_op, k, algo in algos:
        op, impl, row = FORCED_OPS[tuned_op]
        if op not in args.ops:
            continue
        name = f"{row} alg {k} ({algo})"
        mca = [("coll_tuned_use_dynamic_rules", 1), (f"coll_tuned_{tuned_op}_algorithm", k)]
        argv = mpirun(n, args.timeout, mca) + [coll_bin, "--ops", op, "--impls", impl, "--sizes",
                                               sizes]

        def parse(stdout, name=name):
            return [dict(r, impl=name) for r in parse_json_lines(stdout)]
        out.append(Variant(name, "forced", argv, parse, [(op, name)]))
    return out


def run_python_ranks(argv, n, timeout, workdir):
    """Runs argv as n torch.distributed ranks (env://, a free loopback port); all of them are
    killed when one fails or the deadline passes. Returns (rank 0's stdout, error or None)."""
    del workdir  # the outputs go to temporary files
    port = free_port()
    launches = [(argv, dict(child_env(), RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(n),
                            LOCAL_WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1",
                            MASTER_PORT=str(port)))
                for rank in range(n)]
    texts, error = run_together(launches, timeout)
    if error:
        error += ": " + " | ".join(e.strip().splitlines()[-1] for _, e in texts if e.strip())[-400:]
    return texts[0][0], error


def short_error(stderr):
    """MPI's own error lines ("An error occurred in MPI_Allgather", "MPI_ERR_...") when there are
    some, else the last lines of stderr."""
    lines = [ln.split("***", 1)[-1].strip() for ln in stderr.splitlines()]
    mpi = [ln for ln in lines if ln.startswith("An error occurred in") or ln.startswith("MPI_ERR")]
    return " ".join(dict.fromkeys(mpi) if mpi else lines[-3:])[-400:]


def launch(variant, n, args, workdir):
    """Runs one variant once; returns (rows, error or None)."""
    try:
        if variant.launcher == "python":
            stdout, error = run_python_ranks(variant.argv, n, args.timeout, workdir)
        else:
            r = subprocess.run(variant.argv, env=child_env(), capture_output=True, text=True,
                               timeout=args.timeout + 30)
            stdout = r.stdout
            error = None if r.returncode == 0 else f"exit {r.returncode}: {short_error(r.stderr)}"
        rows = variant.parse(stdout) if stdout.strip() else []
    except subprocess.TimeoutExpired:
        return [], f"timed out after {args.timeout + 30} s"
    except (ValueError, KeyError) as e:
        return [], f"unreadable output: {type(e).__name__}: {e}"
    return rows, error


def new_cell(cells, op, impl, size):
    return cells.setdefault((op, impl, size), {"seconds": [], "wrong": [], "errors": [],
                                               "bytes": size})


def measure(args, n, variants, workdir, emit):
    """args.reps rounds of every variant at n ranks, rotated. Returns
    {(op, impl, size asked): {"bytes", "seconds": [...], "wrong": [...],
    "errors": [...]}}."""
    cells = {}
    for rep, pos, v in rotations(variants, args.reps):
        t0 = time.time()
        rows, error = launch(v, n, args, workdir)
        got = set()
        for r in rows:
            # Requested size this row measured (the count is rounded down to a multiple of n);
            # comm_bench's x4 series may also hold sizes that were not asked for.
            size = next((s for s in args.sizes if 0 <= s - r["bytes"] < 4 * n), None)
            if size is None:
                continue
            cell = new_cell(cells, r["op"], r["impl"], size)
            cell["bytes"] = r["bytes"]
            got.add((r["op"], r["impl"], size))
            if "error" in r:
                cell["errors"].append(f"unsupported by gloo ({r['error']})"
                                      if r.get("unsupported") else r["error"])
            else:
                cell["seconds"].append(r["seconds"])
                cell["wrong"].append(r["wrong"])
        for op, impl in v.expected:
            for size in args.sizes:
                if (op, impl, size) not in got:
                    new_cell(cells, op, impl, size)["errors"].append(
                        error or ("no output for this row and size" + (
                            " (comm_bench measures S = smallest x 4^k only)"
                            if v.group == "zrt" else "")))
        emit({"kind": "run", "ranks": n, "variant": v.name, "rep": rep, "position": pos,
              "rows": rows, "error": error, "seconds": time.time() - t0, "loadavg": loadavg()})
        print(f"[N={n} round {rep + 1}/{args.reps}] {v.name}: {time.time() - t0:.1f} s"
              + (f" ERROR {error}" if error else ""), file=sys.stderr, flush=True)
    return cells


def build_mpi_coll(folder):
    return compile_c("mpicc", ["-O3"], "mpi_coll.c", os.path.join(folder, "mpi_coll"))


def mpi_version():
    out = subprocess.run(["mpirun", "--version"], capture_output=True, text=True).stdout
    return out.splitlines()[0] if out else "unknown"


def main():
    args = parse_args()
    workdir = tempfile.mkdtemp(prefix="zrt-coll-")
    emit = Jsonl(args.jsonl)
    try:
        coll_bin, compiler = build_mpi_coll(workdir)
        algos = forced_algorithms() if "forced" in args.groups else []
        info = machine_meta(mpi=mpi_version(), mpi_coll_compiler=compiler, reps=args.reps,
                            sizes=args.sizes, ranks=args.ranks, ops=args.ops,
                            forced_algorithms=algos, omp_num_threads=1)
        emit(info)
        start = time.time()
        summaries = []
        for n in args.ranks:
            before = loadavg()
            variants = make_variants(args, n, coll_bin, algos)
            cells = measure(args, n, variants, workdir, emit)
            for row in summarize(cells, n, before, loadavg(), bus_factor):
                emit(row)
                summaries.append(row)
        emit({"kind": "end", "seconds": time.time() - start, "loadavg": loadavg()})
        print_report(summaries, info, args, time.time() - start)
        if args.svg:
            write_svg(args.svg, summaries, info)
    finally:
        emit.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if any(r.get("wrong") for r in summaries) else 0


if __name__ == "__main__":
    sys.exit(main())
