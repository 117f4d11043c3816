"""Activation checkpointing lets a model train under a memory cap it does not fit without it
(issue 34; labels `peer`, `memory`).

A LLaMA configuration made by transformers (8 narrow decoder layers, 8 heads, context 1024, eager
attention: its saved scores and probabilities, batch x heads x 1024 x 1024 floats each per layer,
are many times the parameters) is trained by zrt-train --model llama --config_name
--attn_implementation eager on 2 ranks (ZeRO-3, fp32, 2 steps) with and without
--gradient_checkpointing:
  * uncapped, both runs log bitwise the same losses, and each rank's peak RSS (getrusage) with
    checkpointing is below 0.7 of the peak without;
  * each rank then runs in a memory cgroup (cgroup v1) capped halfway between the two peaks: the
    run without checkpointing fails (the cgroup refuses memory: its failcnt grows, the job ends
    non-zero), the run with checkpointing trains and logs the same losses.
Needs root and a writable cgroup v1 memory controller; exits 77 (skipped) without them.

    python tests/peers/activation_memory.py --bin build/bin
"""
import argparse
import json
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_llama_memory import PEAK_WRAPPER, RankCgroups, capped, cgroups_usable, launch  # noqa: E402

RANKS = 2
CONFIG = dict(vocab_size=512, hidden_size=128, intermediate_size=344, num_hidden_layers=8,
              num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=1024,
              tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None)
CONTEXT = 1024
DS_CONFIG = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
             "train_batch_size": "auto", "zero_optimization": {"stage": 3}}


def train(args, tmp, name, checkpointing, groups=None):
    """zrt-train on RANKS ranks; returns (exit code, per-rank peak MiB, losses, output)."""
    out_dir = os.path.join(tmp, name)
    argv = [sys.executable, "-c", PEAK_WRAPPER, os.path.join(args.bin, "zrt-train"),
            "--model", "llama", "--config_name", os.path.join(tmp, "config", "config.json"),
            "--deepspeed", os.path.join(tmp, "ds.json"), "--output_dir", out_dir,
            "--max_steps", "2", "--per_device_train_batch_size", "2", "--context", str(CONTEXT),
            "--learning_rate", "1e-3", "--save_strategy", "no", "--logging_steps", "1",
            "--seed", "3", "--attn_implementation", "eager"]
    if checkpointing:
        argv.append("--gradient_checkpointing")
    rc, out = launch(args, capped(groups, argv) if groups else argv, timeout=900, ranks=RANKS)
    # Anywhere in the output: two ranks' lines may reach mpirun's output interleaved.
    peaks = {int(r): int(kb) / 1024 for r, kb in re.findall(r"peak_rss rank (\d+) (\d+) KiB", out)}
    losses = None
    state = os.path.join(out_dir, "trainer_state.json")
    if rc == 0 and os.path.exists(state):
        with open(state) as f:
            losses = [e["loss"] for e in json.load(f)["log_history"] if "loss" in e]
    return rc, [peaks.get(r) for r in range(RANKS)], losses, out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    args = parser.parse_args()
    if not cgroups_usable():
        print("activation_memory: SKIPPED: needs root and a writable cgroup v1 memory controller")
        return 77
    from transformers import LlamaConfig
    tmp = tempfile.mkdtemp(prefix="zrt_activation_memory_")
    groups = None
    ok = True
    try:
        LlamaConfig(**CONFIG).save_pretrained(os.path.join(tmp, "config"))
        with open(os.path.join(tmp, "ds.json"), "w") as f:
            json.dump(DS_CONFIG, f)
        rc_p, peak_p, loss_p, out_p = train(args, tmp, "plain", False)
        rc_c, peak_c, loss_c, out_c = train(args, tmp, "ckpt", True)
        if rc_p != 0 or rc_c != 0 or None in peak_p + peak_c:
            print(out_p[-3000:] + out_c[-3000:])
            print(f"activation_memory: uncapped runs FAILED (exit {rc_p}, {rc_c})")
            return 1
        ratio = max(peak_c) / max(peak_p)
        same = loss_p == loss_c and loss_p is not None and len(loss_p) == 2
        print(f"activation_memory: uncapped peak RSS per rank {[round(p) for p in peak_p]} MiB "
              f"without checkpointing, {[round(p) for p in peak_c]} MiB with ({ratio:.2f}); "
              f"losses {loss_p} and {loss_c} ({'bitwise equal' if same else 'DIFFERENT'})")
        ok &= same and ratio < 0.7
        cap = int((max(peak_c) + min(peak_p)) / 2 * 2**20)
        groups = RankCgroups(cap, ranks=RANKS)
        rc, _, _, out = train(args, tmp, "plain_capped", False, groups)
        refused = rc != 0 and max(groups.failcnt()) > 0
        print(f"activation_memory: capped at {cap >> 20} MiB per rank, without checkpointing: "
              f"exit {rc}, cgroup failcnt {groups.failcnt()} "
              f"({'refused, as expected' if refused else 'NOT refused'})")
        ok &= refused
        groups.close()
        groups = RankCgroups(cap, ranks=RANKS)
        rc, peak, loss, out = train(args, tmp, "ckpt_capped", True, groups)
        trained = rc == 0 and loss == loss_c
        if not trained:
            print(out[-3000:])
        print(f"activation_memory: capped at {cap >> 20} MiB per rank, with checkpointing: exit "
              f"{rc}, peak {[round(p) if p else p for p in peak]} MiB, losses {loss} "
              f"({'trained' if trained else 'FAILED'})")
        ok &= trained
    finally:
        if groups:
            groups.close()
        shutil.rmtree(tmp, ignore_errors=True)
    print("activation_memory: " + ("OK" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
