"""A ZeRO-3 checkpoint whose optimizer state is larger than one rank's memory cap loads under the
cap, to resume at another world size and for inference (issue 37; labels `peer`, `memory`).

A LLaMA configuration made by transformers (105M parameters: fp32 masters and Adam moments, 1.2
GiB in the optimizer files) trains one step with zrt-train on 2 ranks (ZeRO-3, fp32, uncapped)
and saves checkpoint-1. Then every rank runs in a memory cgroup (cgroup v1) capped at 5/6 of the
checkpoint's optimizer-state bytes, so no rank could hold the whole state, let alone read every
file whole as the loader once did:
  * zrt-train on 4 ranks resumes from the 2-rank files (each rank reads only its new partitions'
    byte ranges) and trains a second step: exit 0, each rank's peak RSS below the cap;
  * ZeRO-3 inference (--do_predict) on 4 ranks takes its weights from the checkpoint (each rank
    its partitions' ranges of the fp32 flats): exit 0, peak RSS below the cap.
Needs root and a writable cgroup v1 memory controller; exits 77 (skipped) without them.

    python tests/peers/ckpt_memory.py --bin build/bin
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

CONFIG = dict(vocab_size=1024, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
              num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=256,
              tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None)
# Small live sets, so that a rank holds its partitions and one unit at a time.
ZERO = {"stage": 3, "reduce_bucket_size": 1e7, "stage3_prefetch_bucket_size": 1.2e7,
        "stage3_param_persistence_threshold": 1e4, "stage3_max_live_parameters": 1.2e7,
        "stage3_max_reuse_distance": 0}
DS_CONFIG = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
             "train_batch_size": "auto", "zero_optimization": ZERO}
RANKS = 4


def run(args, tmp, ranks, extra, groups=None):
    """zrt-train --model llama on `ranks` ranks; (exit code, per-rank peak MiB, output)."""
    argv = [sys.executable, "-c", PEAK_WRAPPER, os.path.join(args.bin, "zrt-train"),
            "--model", "llama", "--config_name", os.path.join(tmp, "config", "config.json"),
            "--deepspeed", os.path.join(tmp, "ds.json"), "--context", "32", "--seed", "3",
            "--max_shard_size", str(100 * 10**6)] + extra
    rc, out = launch(args, capped(groups, argv) if groups else argv, timeout=600, ranks=ranks)
    peaks = {int(r): int(kb) / 1024 for r, kb in re.findall(r"peak_rss rank (\d+) (\d+) KiB", out)}
    return rc, [peaks.get(r) for r in range(ranks)], out


def capped_run(args, tmp, what, cap, extra):
    """One run on RANKS capped ranks; True when it succeeded with every peak below the cap."""
    groups = RankCgroups(cap, ranks=RANKS)
    try:
        rc, peaks, out = run(args, tmp, RANKS, extra, groups)
        ok = rc == 0 and None not in peaks and max(peaks) < cap / 2**20
        if not ok:
            print(out[-4000:])
        print(f"ckpt_memory: {what} on {RANKS} ranks capped at {cap >> 20} MiB each: exit {rc}, "
              f"peak RSS {[round(p) if p else p for p in peaks]} MiB "
              f"({'ok' if ok else 'FAILED'})")
        return ok
    finally:
        groups.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    args = parser.parse_args()
    if not cgroups_usable():
        print("ckpt_memory: SKIPPED: needs root and a writable cgroup v1 memory controller")
        return 77
    from transformers import LlamaConfig
    tmp = tempfile.mkdtemp(prefix="zrt_ckpt_memory_")
    try:
        LlamaConfig(**CONFIG).save_pretrained(os.path.join(tmp, "config"))
        with open(os.path.join(tmp, "ds.json"), "w") as f:
            json.dump(DS_CONFIG, f)
        saved = os.path.join(tmp, "run2")
        rc, _, out = run(args, tmp, 2, ["--output_dir", saved, "--max_steps", "1", "--save_steps",
                                        "1", "--per_device_train_batch_size", "1",
                                        "--learning_rate", "1e-3"])
        ckpt = os.path.join(saved, "checkpoint-1")
        tag = os.path.join(ckpt, "global_step1")
        if rc != 0 or not os.path.isdir(tag):
            print(out[-4000:])
            print("ckpt_memory: the uncapped 2-rank run FAILED")
            return 1
        state = sum(os.path.getsize(os.path.join(tag, n)) for n in os.listdir(tag)
                    if n.endswith("_optim_states.pt"))
        cap = state * 5 // 6
        print(f"ckpt_memory: checkpoint-1 holds {state >> 20} MiB of optimizer state; cap "
              f"{cap >> 20} MiB per rank")
        ok = capped_run(args, tmp, "resume 2 -> 4 ranks and train a step", cap,
                        ["--output_dir", os.path.join(tmp, "resumed"), "--max_steps", "2",
                         "--save_strategy", "no", "--per_device_train_batch_size", "1",
                         "--learning_rate", "1e-3", "--resume_from_checkpoint", ckpt])
        ok &= capped_run(args, tmp, "ZeRO-3 inference from the checkpoint", cap,
                         ["--output_dir", os.path.join(tmp, "inference"), "--do_predict",
                          "--per_device_eval_batch_size", "1", "--model_name_or_path", ckpt])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("ckpt_memory: " + ("OK" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
