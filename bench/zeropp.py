#!/usr/bin/env python3
"""ZeRO++ on emulated hosts (2 hosts x 2 ranks, scripts/netns_cluster.sh): cross-host bytes per
step counted where they enter MPI, step time with the inter-host link shaped, and convergence
over 300 steps, for plain ZeRO-3 and each of hpZ, qwZ, qgZ and all three (docs/SCALING.md,
"ZeRO++").

  sudo bench/zeropp.py [--build build] [--reps 7] [--out bench/results/zeropp.jsonl]
  sudo bench/zeropp.py --phases bytes,converge          (a subset; results are appended)
  bench/zeropp.py --phases tables                       (the tables of the results file)

Phases (each writes JSON lines, one per run, and a markdown table on stderr):
  bytes     zrt-train for STEPS_A and STEPS_B steps under the PMPI counter
            (bench/pmpi/libzrt_pmpi_count.so, ZRT_MPI_ALGO=ring so that every collective is
            point-to-point and attributed to its peer); the difference over the extra steps is
            one step's bytes, start-up and saving cancelled out. Point-to-point bytes to a peer
            on another host, summed over ranks, and the kernel's count of bytes through zrt-h2's
            link.
  time      per link setting (rate/delay shaped out of both hosts), each of --variants (plain
            ZeRO-3 and all three of ZeRO++ by default) REPS times in rotated order: step time (train_runtime / steps), communication time and the share
            the step waited for (the engine's comm timers).
  converge  the example GPT (2 layers of width 128) and a LLaMA from a config (2 layers, hidden
            128), 300 steps, loss logged every 25:
            the final losses of each variant against plain ZeRO-3 (hpZ: every logged loss equal).
"""
import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys

from slow_network import emit, link_bytes  # bench/, the script's folder

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLUSTER = os.path.join(ROOT, "scripts", "netns_cluster.sh")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMP_NUM_THREADS="1", ZRT_LOG_LEVEL="warn")
VARIANTS = {
    "plain": {},
    "hpZ": {"zero_hpz_partition_size": 2},
    "qwZ": {"zero_quantized_weights": True},
    "qgZ": {"zero_quantized_gradients": True},
    "all": {"zero_hpz_partition_size": 2, "zero_quantized_weights": True,
            "zero_quantized_gradients": True},
}
GPT = "--width 256 --layers 4 --heads 4 --context 64 --per_device_train_batch_size 4"
# The convergence runs: 300 steps of the smallest models that learn something in them.
GPT_SMALL = "--width 128 --layers 2 --heads 4 --context 64 --per_device_train_batch_size 4"
LLAMA_CONFIG = dict(model_type="llama", vocab_size=256, hidden_size=128, intermediate_size=344,
                    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                    max_position_embeddings=128, rms_norm_eps=1e-6, tie_word_embeddings=False,
                    bos_token_id=None, eos_token_id=None, pad_token_id=None)
TMP = "/tmp/zrt_zeropp"


def sh(*args):
    return subprocess.run(args, check=True, text=True, capture_output=True, env=ENV).stdout


def ds_config(variant):
    with open(os.path.join(ROOT, "examples", "configs", "zero3.json")) as f:
        cfg = json.load(f)
    # ZeRO-3's three passes per step, as the paper's model and docs/SCALING.md count them: no
    # unit kept gathered from its forward to its backward (the example's reuse distance would
    # keep every unit of this small model, and leave hpZ nothing to do).
    cfg["zero_optimization"]["stage3_max_reuse_distance"] = 0
    cfg["zero_optimization"].update(VARIANTS[variant])
    path = os.path.join(TMP, f"zero3_{variant}.json")
    with open(path, "w") as f:
        json.dump(cfg, f, indent=1)
    return path


def launch(program, env=None, timeout=1200):
    """zrt-launch on zrt-h1 over both hosts (2 ranks each); returns stdout+stderr."""
    hosts = os.path.join(TMP, "hosts")
    sh(CLUSTER, "hostfile", hosts, "2", "zrt-h1", "zrt-h2")
    # Only the ranks get the variables (mpirun -x): zrt-launch and mpirun themselves must not
    # preload the PMPI counter.
    exports = " ".join(f"-x {k}={v}" for k, v in (env or {}).items())
    cmd = [os.path.join(ARGS.build, "bin", "zrt-launch"), "-H", hosts, "--timeout", str(timeout),
           "--launcher_args", (sh(CLUSTER, "mpirun-args").strip() + " " + exports).strip(),
           "--"] + program
    r = subprocess.run([CLUSTER, "exec", "zrt-h1", shlex.join(cmd)], text=True, env=ENV,
                       capture_output=True, timeout=timeout + 60)
    if r.returncode != 0:
        raise RuntimeError(f"{shlex.join(program[:4])} failed ({r.returncode}):\n"
                           + (r.stdout + r.stderr)[-3000:])
    return r.stdout + r.stderr


def train(variant, steps, model_args, env=None, logging_steps=100000, name="run"):
    out_dir = os.path.join(TMP, name)
    subprocess.run(["rm", "-rf", out_dir])
    out = launch([os.path.join(ARGS.build, "bin", "zrt-train"), "--deepspeed", ds_config(variant),
                  "--output_dir", out_dir, "--max_steps", str(steps), "--save_strategy", "no",
                  "--logging_steps", str(logging_steps), "--seed", "1"] + model_args, env)
    m = re.search(r"train: (\d+) steps \(.*?\) in ([\d.]+) s", out)
    c = re.search(r"train: communication ([\d.]+) s in (\d+) collectives, ([\d.]+) s of it "
                  r"waited for", out)
    if not m or not c:
        raise RuntimeError("no training summary in:\n" + out[-2000:])
    losses = []
    state = os.path.join(out_dir, "trainer_state.json")
    if os.path.exists(state):
        with open(state) as f:
            losses = [e["loss"] for e in json.load(f)["log_history"] if "loss" in e]
    n = int(m.group(1))
    return {"steps": n, "step_s": float(m.group(2)) / n, "comm_busy_s": float(c.group(1)) / n,
            "comm_exposed_s": float(c.group(3)) / n, "collectives": int(c.group(2)) / n,
            "losses": losses}


def pmpi_totals(path):
    """Summed over ranks: the finalize line of every rank in the PMPI counter's output."""
    total = {}
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            if row.get("label") != "finalize":
                continue
            for k, v in row.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "rank":
                    total[k] = total.get(k, 0) + v
    return total


def measure_bytes(variant, steps):
    out_file = os.path.join(TMP, f"pmpi_{variant}_{steps}.jsonl")
    subprocess.run(["rm", "-f", out_file])
    env = {"LD_PRELOAD": os.path.join(ARGS.build, "bench", "pmpi", "libzrt_pmpi_count.so"),
           "ZRT_PMPI_OUT": out_file, "ZRT_MPI_ALGO": "ring"}
    before = link_bytes()
    train(variant, steps, shlex.split(GPT), env)
    return pmpi_totals(out_file), link_bytes() - before


def phase_bytes(out):
    a, b = ARGS.steps_a, ARGS.steps_b
    for variant in VARIANTS:
        (ta, la), (tb, lb) = measure_bytes(variant, a), measure_bytes(variant, b)
        per_step = {k: (tb.get(k, 0) - ta.get(k, 0)) / (b - a) for k in tb}
        emit({"kind": "zeropp_bytes", "variant": variant,
              "other_host_bytes": per_step.get("p2p_send_bytes_other_host", 0),
              "same_host_bytes": per_step.get("p2p_send_bytes_same_host", 0),
              "cross_host_coll_bytes": per_step.get("coll_bytes_cross_host", 0),
              "link_bytes": (lb - la) / (b - a)}, out)


def phase_time(out):
    variants = ARGS.variants.split(",")
    for link in ARGS.links.split(","):
        rate, delay = link.split("/")
        for h in ("zrt-h1", "zrt-h2"):
            sh(CLUSTER, "shape", h, rate, delay)
        for rep in range(ARGS.reps):  # rotated order: each rep starts one later
            k = rep % len(variants)
            for variant in variants[k:] + variants[:k]:
                r = train(variant, ARGS.steps, shlex.split(GPT))
                del r["losses"]
                emit(dict(kind="zeropp_step", link=link, variant=variant, rep=rep, **r), out)
    for h in ("zrt-h1", "zrt-h2"):
        sh(CLUSTER, "shape", h, "none", "0")


def phase_converge(out):
    config_dir = os.path.join(TMP, "llama")
    os.makedirs(config_dir, exist_ok=True)
    with open(os.path.join(config_dir, "config.json"), "w") as f:
        json.dump(LLAMA_CONFIG, f)
    models = {"gpt": shlex.split(GPT_SMALL + " --corpus_bytes 400000 --learning_rate 1e-3"),
              "llama": ["--model", "llama", "--config_name", config_dir, "--context", "64",
                        "--per_device_train_batch_size", "4", "--corpus_bytes", "400000",
                        "--learning_rate", "1e-3"]}
    for model, args in models.items():
        for variant in VARIANTS:
            r = train(variant, ARGS.converge, args, logging_steps=25, name=f"{model}_{variant}")
            emit({"kind": "zeropp_converge", "model": model, "variant": variant,
                  "losses": r["losses"], "step_s": r["step_s"]}, out)


def rate_bytes_per_s(rate):
    units = {"gbit": 1e9, "mbit": 1e6, "kbit": 1e3}
    for unit, scale in units.items():
        if rate.endswith(unit):
            return float(rate[:-len(unit)]) * scale / 8
    return None  # "none": unshaped


def predicted_ms(steps, link, variant, one_way_bytes):
    """The scaling model's prediction (docs/SCALING.md, "ZeRO++"): the step on the unshaped link
    plus the bytes one direction of the inter-host link carries per step at the shaped rate, none
    of it hidden (an upper bound: the measured hidden share says how much less)."""
    rate = rate_bytes_per_s(link.split("/")[0])
    base = [r["step_s"] for r in steps if r["link"].startswith("none") and r["variant"] == variant]
    if rate is None or not base or one_way_bytes is None:
        return ""
    return f"{1e3 * (statistics.median(base) + one_way_bytes / rate):.0f}"


def tables(rows):
    by = list({r["variant"]: r for r in rows if r["kind"] == "zeropp_bytes"}.values())  # latest
    if by:
        plain = next(r for r in by if r["variant"] == "plain")
        print("| variant | cross-host MB/step (PMPI, all ranks) | vs plain | same-host MB/step | "
              "zrt-h2 link MB/step |\n|---|---|---|---|---|", file=sys.stderr)
        for r in by:
            print(f"| {r['variant']} | {r['other_host_bytes'] / 1e6:.2f} | "
                  f"{plain['other_host_bytes'] / max(r['other_host_bytes'], 1):.2f}x | "
                  f"{r['same_host_bytes'] / 1e6:.2f} | {r['link_bytes'] / 1e6:.2f} |",
                  file=sys.stderr)
    st = [r for r in rows if r["kind"] == "zeropp_step"]
    link_mb = {r["variant"]: r["link_bytes"] / 2 for r in by}  # one direction of zrt-h2's link
    if st:
        print("\n| link | variant | step ms (median, min-max) | comm ms | waited ms | vs plain | "
              "predicted ms |\n|---|---|---|---|---|---|---|", file=sys.stderr)
        for link in dict.fromkeys(r["link"] for r in st):
            med = {}
            for v in VARIANTS:
                t = [1e3 * r["step_s"] for r in st if r["link"] == link and r["variant"] == v]
                if t:
                    med[v] = statistics.median(t)
            for v in med:
                rs = [r for r in st if r["link"] == link and r["variant"] == v]
                t = [1e3 * r["step_s"] for r in rs]
                pred = predicted_ms(st, link, v, link_mb.get(v))
                print(f"| {link} | {v} | {med[v]:.0f} ({min(t):.0f}-{max(t):.0f}) | "
                      f"{1e3 * statistics.median(r['comm_busy_s'] for r in rs):.0f} | "
                      f"{1e3 * statistics.median(r['comm_exposed_s'] for r in rs):.0f} | "
                      f"{med['plain'] / med[v]:.2f}x | {pred} |", file=sys.stderr)
    cv = [r for r in rows if r["kind"] == "zeropp_converge"]
    if cv:
        print("\n| model | variant | final loss (last 25 steps) | vs plain | every loss equal to "
              "plain |\n|---|---|---|---|---|", file=sys.stderr)
        for model in dict.fromkeys(r["model"] for r in cv):
            plain = next(r for r in cv if r["model"] == model and r["variant"] == "plain")
            for r in (r for r in cv if r["model"] == model):
                final = r["losses"][-1]
                print(f"| {model} | {r['variant']} | {final:.4f} | "
                      f"{final / plain['losses'][-1] - 1:+.2%} | "
                      f"{'yes' if r['losses'] == plain['losses'] else 'no'} |", file=sys.stderr)


def main():
    global ARGS
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--phases", default="bytes,time,converge")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--steps", type=int, default=10, help="steps per timed run")
    p.add_argument("--steps_a", type=int, default=4)
    p.add_argument("--steps_b", type=int, default=12)
    p.add_argument("--converge", type=int, default=300, help="steps of the convergence runs")
    p.add_argument("--links", default="none/0,100gbit/0.1ms,10gbit/0.1ms,1gbit/0.1ms")
    p.add_argument("--variants", default="plain,all", help="the variants timed per link")
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "zeropp.jsonl"))
    ARGS = p.parse_args()
    if os.geteuid() != 0 and ARGS.phases != "tables":
        sys.exit("zeropp: needs root (network namespaces)")
    os.makedirs(TMP, exist_ok=True)
    phases = ARGS.phases.split(",")
    if phases != ["tables"]:
        sh(CLUSTER, "up", "2")
        try:
            with open(ARGS.out, "a") as out:
                for name, fn in (("bytes", phase_bytes), ("time", phase_time),
                                 ("converge", phase_converge)):
                    if name in phases:
                        fn(out)
        finally:
            subprocess.run([CLUSTER, "down"], env=ENV)
    # Every row of the results file: phases run at different times make one set of tables.
    with open(ARGS.out) as f:
        tables([json.loads(line) for line in f if line.strip()])


if __name__ == "__main__":
    main()
