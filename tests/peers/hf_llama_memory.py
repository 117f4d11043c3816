"""No rank holds the whole model (issue 16, section 5; labels `peer`, `memory`).

transformers makes a LLaMA model of about 2.3 GB (fp32, 48 narrow decoder layers, so that a unit is
small next to the model and a rank's fixed ~250 MiB of libraries and buffers small next to its
share) and saves it sharded. Each of 4 ranks then runs in its own memory cgroup
(cgroup v1 `memory.limit_in_bytes`) capped at 80% of the model's size, and must still
  * load it and generate with zrt-generate (ZeRO-3 inference, built partitioned), and
  * load it and train one step with zrt-train --model llama (ZeRO-3, SGD: parameters and gradients
    are 8 bytes per parameter over 4 ranks, half the model; Adam's 16 bytes per parameter over 4
    ranks would be the whole model's size by construction),
and the greedy tokens must equal transformers'. The training step runs with what a user whose model
does not fit would set: stage3_max_reuse_distance 0 (DeepSpeed's default, 1e9, keeps every layer
gathered from its forward to its backward: the whole model, for models under a billion
parameters), stage3_max_live_parameters, the prefetch bucket and reduce_bucket_size at about one
decoder layer (Note [Bounded gradient reduction] in zero/param_coordinator.cpp), and
--max_shard_size 200MB for the HF-format save at the end (rank 0 gathers one shard at a time).
Every rank's peak RSS (getrusage) is printed next to the bound "its partitions + the units
gathered + what a rank holds before loading".
Needs root and a writable cgroup v1 memory controller; exits 77 (skipped) without them.

    python tests/peers/hf_llama_memory.py --bin build/bin
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

CGROUP_ROOT = "/sys/fs/cgroup/memory"
RANKS = 4
CONFIG = dict(vocab_size=8000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=48,
              num_attention_heads=16, num_key_value_heads=8, tie_word_embeddings=False,
              max_position_embeddings=64, bos_token_id=None, eos_token_id=None, pad_token_id=None)
PROMPT = [5, 77, 901, 13, 4000, 62]
NEW_TOKENS = 3


def cgroups_usable():
    if os.geteuid() != 0 or not os.path.isdir(CGROUP_ROOT):
        return False
    probe = os.path.join(CGROUP_ROOT, f"zrt_probe_{os.getpid()}")
    try:
        os.mkdir(probe)
        os.rmdir(probe)
        return True
    except OSError:
        return False


class RankCgroups:
    """One memory cgroup per rank, capped; removed on exit even when the test fails."""

    def __init__(self, cap_bytes, ranks=RANKS):
        self.base = f"zrt_cap_{os.getpid()}"
        self.paths = [os.path.join(CGROUP_ROOT, f"{self.base}_{r}") for r in range(ranks)]
        for p in self.paths:
            os.mkdir(p)
            with open(os.path.join(p, "memory.limit_in_bytes"), "w") as f:
                f.write(str(cap_bytes))

    def failcnt(self):
        out = []
        for p in self.paths:
            with open(os.path.join(p, "memory.failcnt")) as f:
                out.append(int(f.read()))
        return out

    def close(self):
        for p in self.paths:
            try:
                with open(os.path.join(p, "cgroup.procs")) as f:
                    for pid in f.read().split():
                        os.kill(int(pid), 9)
            except OSError:
                pass
            try:
                os.rmdir(p)
            except OSError:
                pass


def capped(groups, argv):
    """argv wrapped so that each rank moves itself into its cgroup before exec'ing the program."""
    script = (f'echo $$ > {CGROUP_ROOT}/{groups.base}_$OMPI_COMM_WORLD_RANK/cgroup.procs '
              '&& exec "$@"')
    return ["/bin/sh", "-c", script, "sh"] + argv


def launch(args, argv, timeout=600, ranks=RANKS):
    cmd = [os.path.join(args.bin, "zrt-launch"), "--np", str(ranks), "--timeout", str(timeout),
           "--"] + argv
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 60)
    return run.returncode, run.stdout + run.stderr


PEAK_WRAPPER = ("import os, resource, subprocess, sys\n"
                "rc = subprocess.call(sys.argv[1:])\n"
                "kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
                "os.write(2, f\"peak_rss rank {os.environ['OMPI_COMM_WORLD_RANK']} {kb} KiB\\n\""
                ".encode())\n"
                "sys.exit(rc)\n")
TRAIN_CONFIG = {
    "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
    "train_batch_size": "auto",
    "zero_optimization": {"stage": 3, "reduce_bucket_size": 1e7,
                          "stage3_prefetch_bucket_size": 1.2e7,
                          "stage3_param_persistence_threshold": 1e4,
                          "stage3_max_live_parameters": 1.2e7, "stage3_max_reuse_distance": 0},
}


def check_generate(args, groups, folder, tmp, cap, ref):
    metrics = os.path.join(tmp, "metrics.json")
    rc, out = launch(args, capped(groups, [
        os.path.join(args.bin, "zrt-generate"), "--model_name_or_path", folder,
        "--prompt_ids", ",".join(map(str, PROMPT)), "--max_new_tokens", str(NEW_TOKENS),
        "--output", os.path.join(tmp, "ids.jsonl"), "--metrics_out", metrics,
        "--persistence_threshold", "10000"]))
    if rc != 0:
        print(out)
        print(f"hf_llama_memory: zrt-generate FAILED under the cap (exit {rc}; cgroup "
              f"failcnt per rank {groups.failcnt()})")
        return False
    with open(metrics) as f:
        m = json.load(f)
    with open(os.path.join(tmp, "ids.jsonl")) as f:
        got = json.loads(f.readline())["generated"]
    same = got == ref
    peak = m["peak_rss_mib_per_rank"]
    print(f"hf_llama_memory: generate under the cap: peak RSS per rank {[round(p) for p in peak]}"
          f" MiB (cap {cap >> 20}); {m['tokens_per_second']:.2f} tokens/s; greedy tokens "
          f"{'equal transformers' if same else f'DIFFER {got} vs {ref}'}")
    return same and max(peak) < cap / 2**20


def check_train(args, groups, folder, tmp, cap):
    """One SGD step of ZeRO-3 training, then the HF-format save; every rank's peak RSS from a
    wrapper that waits for the program (getrusage of its children)."""
    config = os.path.join(tmp, "zero3_small_live.json")
    with open(config, "w") as f:
        json.dump(TRAIN_CONFIG, f)
    out_dir = os.path.join(tmp, "trained")
    rc, out = launch(args, capped(groups, [sys.executable, "-c", PEAK_WRAPPER,
        os.path.join(args.bin, "zrt-train"), "--model", "llama", "--model_name_or_path", folder,
        "--deepspeed", config, "--output_dir", out_dir, "--max_steps", "1",
        "--per_device_train_batch_size", "1", "--context", "16", "--optim", "sgd",
        "--learning_rate", "1e-3", "--save_strategy", "no", "--logging_steps", "1",
        "--max_shard_size", str(200 * 10**6)]))
    peaks = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 5 and parts[0] == "peak_rss" and parts[1] == "rank":
            peaks[int(parts[2])] = int(parts[3]) / 1024
    if rc != 0 or len(peaks) != RANKS:
        print(out)
        print(f"hf_llama_memory: zrt-train FAILED under the cap (exit {rc}; cgroup failcnt per "
              f"rank {groups.failcnt()}; peaks reported by {sorted(peaks)})")
        return False
    saved = sorted(n for n in os.listdir(out_dir) if n.endswith(".safetensors"))
    peak = [peaks[r] for r in range(RANKS)]
    ok = max(peak) < cap / 2**20 and len(saved) >= 2
    print(f"hf_llama_memory: one training step + HF save ({len(saved)} shards) under the cap: "
          f"peak RSS per rank {[round(p) for p in peak]} MiB (cap {cap >> 20}) "
          f"{'ok' if ok else 'FAILED'}")
    return ok


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("--src", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    args = parser.parse_args()
    if not cgroups_usable():
        print("hf_llama_memory: SKIPPED: needs root and a writable cgroup v1 memory controller")
        return 77
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    ok = True
    tmp = tempfile.mkdtemp(prefix="zrt_hf_llama_memory_")
    groups = None
    try:
        torch.manual_seed(0)
        model = LlamaForCausalLM(LlamaConfig(**CONFIG)).eval()
        model.config._attn_implementation = "eager"
        folder = os.path.join(tmp, "model")
        model.save_pretrained(folder, max_shard_size="200MB")
        n_params = sum(p.numel() for p in model.parameters())
        model_bytes = 4 * n_params
        with torch.no_grad():
            ref = model.generate(torch.tensor([PROMPT]), do_sample=False,
                                 max_new_tokens=NEW_TOKENS).tolist()[0][len(PROMPT):]
        del model
        cap = int(0.8 * model_bytes)
        largest_unit = 4 * (3 * CONFIG["hidden_size"] * CONFIG["intermediate_size"] +
                            2 * CONFIG["hidden_size"] ** 2 + 2 * CONFIG["hidden_size"] * 512)
        print(f"hf_llama_memory: model {n_params / 1e6:.0f}M parameters, {model_bytes >> 20} MiB "
              f"fp32; {RANKS} ranks, each capped at {cap >> 20} MiB (80%); a decoder layer is "
              f"{largest_unit >> 20} MiB, a rank's partitions {model_bytes // RANKS >> 20} MiB")
        groups = RankCgroups(cap)
        ok &= check_generate(args, groups, folder, tmp, cap, ref)
        ok &= check_train(args, groups, folder, tmp, cap)
    finally:
        if groups:
            groups.close()
        shutil.rmtree(tmp, ignore_errors=True)
    print("hf_llama_memory: " + ("OK" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
