#!/usr/bin/env python3
"""ZeroRT across emulated hosts with shaped links: training step time and the share of
communication hidden behind compute, per ZeRO stage, layout and link setting; plus the collective
times that the scaling model (bench/scaling_model.py) fits its alpha-beta terms to.

Runs as root on the hosts of scripts/netns_cluster.sh (network namespaces on a bridge, TCP only).
Each link setting shapes both hosts' links (rate each way, one-way delay out of each host). For
each setting:
  * comm_bench (reduce_scatter, all_gather, all_reduce; 16 KiB to 16 MiB) on every layout;
  * zrt-train on every (layout, stage), REPS times in rotated order, recording the step time
    (train_runtime / steps), rank 0's communication time and the part of it the step waited for
    (the engine's comm timers: Comm::times()), and the bytes that crossed zrt-h2's link (the
    kernel's counters of its veth, both directions).
Output: one JSON object per line (--out, and stdout), then a markdown table on stderr.

  sudo bench/slow_network.py [--build build] [--reps 3] [--out slow_network.jsonl]
"""
import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLUSTER = os.path.join(ROOT, "scripts", "netns_cluster.sh")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMP_NUM_THREADS="1", ZRT_LOG_LEVEL="warn")


def sh(*args, **kw):
    return subprocess.run(args, check=True, text=True, capture_output=True, env=ENV, **kw).stdout


def link_bytes():
    base = "/sys/class/net/zrt-h2b/statistics/"
    return sum(int(open(base + f).read()) for f in ("rx_bytes", "tx_bytes"))


def launch(hostfile, program, timeout=900):
    """zrt-launch started on zrt-h1 with the cluster's mpirun options; returns stdout+stderr."""
    build = ARGS.build
    cmd = [os.path.join(build, "bin", "zrt-launch"), "-H", hostfile, "--timeout", str(timeout),
           "--launcher_args", sh(CLUSTER, "mpirun-args").strip(), "--"] + program
    r = subprocess.run([CLUSTER, "exec", "zrt-h1", shlex.join(cmd)], text=True, env=ENV,
                       capture_output=True, timeout=timeout + 60)
    if r.returncode != 0:
        raise RuntimeError(f"{shlex.join(program[:3])} failed ({r.returncode}):\n"
                           + (r.stdout + r.stderr)[-3000:])
    return r.stdout + r.stderr


def hostfile(layout):
    hosts, slots = layout.split("x")
    path = f"/tmp/zrt_slow_network_{layout}.hosts"
    sh(CLUSTER, "hostfile", path, slots, *[f"zrt-h{i + 1}" for i in range(int(hosts))])
    return path


def collectives(link, layout):
    out = launch(hostfile(layout), [os.path.join(ARGS.build, "bench", "comm_bench"), "--json",
                                    "--sizes", "16K:16M",
                                    "--ops", "reduce_scatter,all_gather,all_reduce"])
    data = json.loads(out[out.index("{"):out.rindex("}") + 1])
    for row in data["rows"]:
        busbw = row["zrt_busbw"]  # GB/s; time = bytes * factor / busbw
        yield {"kind": "collective", "link": link, "layout": layout, "ranks": data["ranks"],
               "op": row["op"], "bytes": row["bytes"], "busbw_gbps": busbw}


def train(link, layout, stage, rep):
    out_dir = f"/tmp/zrt_slow_network_run"
    subprocess.run(["rm", "-rf", out_dir])
    before = link_bytes()
    out = launch(hostfile(layout), [
        os.path.join(ARGS.build, "bin", "zrt-train"), "--deepspeed",
        os.path.join(ROOT, "examples", "configs", f"zero{stage}.json"), "--output_dir", out_dir,
        "--max_steps", str(ARGS.steps), "--save_steps", "100000", "--logging_steps", "100000",
        "--seed", "1"] + shlex.split(ARGS.model))
    crossed = link_bytes() - before
    m = re.search(r"train: (\d+) steps \(.*?\) in ([\d.]+) s", out)
    c = re.search(r"train: communication ([\d.]+) s in (\d+) collectives, ([\d.]+) s of it "
                  r"waited for \((\d+)% hidden", out)
    if not m or not c:
        raise RuntimeError("no training summary in:\n" + out[-2000:])
    steps = int(m.group(1))
    runtime = float(m.group(2))
    return {"kind": "step", "link": link, "layout": layout, "stage": stage, "rep": rep,
            "steps": steps, "step_s": runtime / steps,
            "comm_busy_s": float(c.group(1)) / steps, "collectives": int(c.group(2)) / steps,
            "comm_exposed_s": float(c.group(3)) / steps,
            "hidden": 1 - float(c.group(3)) / max(float(c.group(1)), 1e-12),
            "link_bytes": crossed / steps}


def emit(row, out):
    line = json.dumps(row)
    print(line, flush=True)
    out.write(line + "\n")
    out.flush()


def table(rows):
    steps = [r for r in rows if r["kind"] == "step"]
    keys = sorted({(r["link"], r["layout"], r["stage"]) for r in steps},
                  key=lambda k: (LINKS.index(k[0]), k[1], k[2]))
    print("| link | hosts x ranks | stage | step ms (median, min-max) | comm ms | hidden | "
          "link MB/step |", file=sys.stderr)
    print("|---|---|---|---|---|---|---|", file=sys.stderr)
    for k in keys:
        rs = [r for r in steps if (r["link"], r["layout"], r["stage"]) == k]
        t = [1e3 * r["step_s"] for r in rs]
        print(f"| {k[0]} | {k[1]} | {k[2]} | {statistics.median(t):.0f} ({min(t):.0f}-{max(t):.0f})"
              f" | {1e3 * statistics.median(r['comm_busy_s'] for r in rs):.0f}"
              f" | {100 * statistics.median(r['hidden'] for r in rs):.0f}%"
              f" | {statistics.median(r['link_bytes'] for r in rs) / 1e6:.1f} |", file=sys.stderr)


def main():
    global ARGS, LINKS
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--links", default="none/0,10gbit/0.2ms,10gbit/2ms,1gbit/0.2ms,1gbit/2ms")
    p.add_argument("--layouts", default="2x1,2x2")
    p.add_argument("--stages", default="1,2,3")
    p.add_argument("--model", default="--width 256 --layers 4 --heads 4 --context 64 "
                                      "--per_device_train_batch_size 4 --corpus_bytes 200000")
    p.add_argument("--out", default="slow_network.jsonl")
    ARGS = p.parse_args()
    LINKS = ARGS.links.split(",")
    layouts = ARGS.layouts.split(",")
    stages = [int(s) for s in ARGS.stages.split(",")]
    if os.geteuid() != 0:
        sys.exit("slow_network: needs root (network namespaces)")
    sh(CLUSTER, "up", "2")
    rows = []
    try:
        with open(ARGS.out, "w") as out:
            for link in LINKS:
                rate, delay = link.split("/")
                for h in ("zrt-h1", "zrt-h2"):
                    sh(CLUSTER, "shape", h, rate, delay)
                for layout in layouts:
                    for row in collectives(link, layout):
                        rows.append(row)
                        emit(row, out)
                combos = [(l, s) for l in layouts for s in stages]
                for rep in range(ARGS.reps):  # rotated order: each rep starts one later
                    k = rep % len(combos)
                    for layout, stage in combos[k:] + combos[:k]:
                        row = train(link, layout, stage, rep)
                        rows.append(row)
                        emit(row, out)
    finally:
        subprocess.run([CLUSTER, "down"], env=ENV)
    table(rows)


if __name__ == "__main__":
    main()
