#!/usr/bin/env python3
"""The one command of issue 15: every side-by-side benchmark of bench/peers/, one after the
other, on the same machine, into one folder:

    .venv/bin/python bench/peers/all.py --bin build --out bench-results [--quick] [--only adam,step]

runs adam.py, collectives.py, step.py, ckpt.py and generate.py (in that order; --only picks
some), each with
its defaults (the real run) or --quick (a smoke run of a few minutes in all), writing
OUT/<name>.md (its tables), OUT/<name>.jsonl and OUT/<name>.svg, and OUT/report.md: the tables of
all of them under one header with the machine, the peers' versions, the load average before and
after each part and how long it took. A part that fails is reported as failed (its exit code
and the tail of its output) and the others still run; the exit code is then 1.

Needs a Release build with -DZRT_BUILD_BENCH=ON (targets adam_bench, comm_bench, zero_bench,
engine_ckpt_bench; zrt-launch and zrt-generate for generate.py) and the project's venv
(DeepSpeed, torch, transformers). Measure on an otherwise idle
machine: the parts time themselves against each other, not against a quiet reference."""

import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from common import format_load, loadavg, machine_meta  # noqa: E402

PARTS = ("adam", "collectives", "step", "ckpt", "generate")


def part_command(name, args, out):
    """The command line of one part, with its outputs in `out`."""
    py = [sys.executable, os.path.join(HERE, f"{name}.py")]
    files = ["--jsonl", os.path.join(out, f"{name}.jsonl"), "--svg", os.path.join(out, f"{name}.svg")]
    if name == "collectives":
        cmd = py + ["--comm-bench", os.path.join(args.bin, "bench", "comm_bench")]
    else:
        cmd = py + ["--bin", args.bin]
    if args.quick:
        cmd.append("--quick")
    return cmd + files


def run_part(name, args, out):
    """Runs one part; returns (exit code, seconds, load before, load after, its markdown)."""
    cmd = part_command(name, args, out)
    before, start = loadavg(), time.time()
    print(f"[all.py] {name}: {' '.join(cmd)}", file=sys.stderr, flush=True)
    md_path = os.path.join(out, f"{name}.md")
    with open(md_path, "w") as md:
        try:
            rc = subprocess.run(cmd, stdout=md, timeout=args.timeout).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    seconds, after = time.time() - start, loadavg()
    with open(md_path) as f:
        text = f.read()
    print(f"[all.py] {name}: exit {rc} after {seconds:.0f} s", file=sys.stderr, flush=True)
    return rc, seconds, before, after, text, cmd


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default="build", help="the ZeroRT build folder (default: build)")
    ap.add_argument("--out", default="bench-results", help="folder for every output")
    ap.add_argument("--only", default=",".join(PARTS), help=f"comma-separated of {PARTS}")
    ap.add_argument("--quick", action="store_true", help="every part's smoke run")
    ap.add_argument("--timeout", type=float, default=3 * 3600, help="seconds per part")
    args = ap.parse_args()
    only = [p.strip() for p in args.only.split(",") if p.strip()]
    unknown = [p for p in only if p not in PARTS]
    if unknown:
        ap.error(f"--only: unknown part(s) {unknown}; expected some of {PARTS}")
    args.bin = os.path.abspath(args.bin)
    os.makedirs(args.out, exist_ok=True)
    info = machine_meta(parts=only, quick=args.quick)
    v = info["versions"]
    sections, failed = [], []
    for name in only:
        rc, seconds, before, after, text, cmd = run_part(name, args, args.out)
        head = (f"# {name}\n\nCommand: `{' '.join(cmd)}`; exit {rc}; {seconds:.0f} s; load average "
                f"{format_load(before)} before, {format_load(after)} after.\n\n")
        sections.append(head + text)
        if rc != 0:
            failed.append(name)
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write(f"# bench/peers/all.py on {info['cpu']} ({info['cpus']} CPUs), {info['date']}\n\n"
                f"torch {v['torch']}, DeepSpeed {v['deepspeed']}; command `{info['command']}`"
                f"{' (quick: smoke sizes, not a measurement)' if args.quick else ''}.\n\n")
        f.write("\n".join(sections))
        if failed:
            f.write(f"\nFailed parts: {', '.join(failed)}\n")
    print(f"[all.py] report: {os.path.join(args.out, 'report.md')}"
          f"{'; failed: ' + ', '.join(failed) if failed else ''}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
