"""Resuming at another world size: ZeroRT's online reshard against DeepSpeed's universal
checkpoint (issue 14 section 3; label `peer`).

DeepSpeed wrote checkpoint-3 on 2 ranks (fixtures ds_s1_w2, ds_s2_w2 and ds_s3_w2,
tests/data/deepspeed).
 - DeepSpeed: deepspeed.checkpoint.ds_to_universal converts it (its own tool, on a copy), and
   3 gloo ranks load it with "checkpoint": {"load_universal": true} and train steps 4-6.
 - ZeroRT: zrt-train --resume_from_checkpoint on 3 ranks reads the 2-rank files directly (no
   conversion) and trains steps 4-6.
Both take the 3-rank batches of zrt-train's sampler at steps 4-6 (transformers' rule for the
position: the global step). The losses, learning rates and final weights must agree within
ckpt_resume.py's fp32 tolerances, at ZeRO stages 1, 2 and 3.

    python tests/peers/ckpt_reshard.py --bin build/bin
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import ckpt_common as cc
from peer_launch import run_ranks

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "data", "deepspeed")
NEW_WORLD = 3


def rank_main(args):
    import torch
    import deepspeed
    from twins import Mlp
    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(cc.SEED)
    model = Mlp(cc.WIDTH, cc.LAYERS)
    config = dict(cc.ds_config(args.stage, NEW_WORLD), checkpoint={"load_universal": True})
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=config)
    path, _ = engine.load_checkpoint(args.ckpt)
    if path is None or engine.global_steps != cc.SAVE_AT:
        raise SystemExit(f"DeepSpeed did not load {args.ckpt} (global_steps {engine.global_steps})")
    losses, lrs = cc.ds_train(engine, cc.TOTAL_STEPS - cc.SAVE_AT)
    engine.save_checkpoint(args.out)
    if torch.distributed.get_rank() == 0:
        with open(os.path.join(args.out, "continued.json"), "w") as f:
            json.dump({"losses": losses, "learning_rates": lrs}, f)


def one_case(args, tmp, name, stage):
    from ckpt_resume import compare
    ckpt = os.path.join(tmp, name)
    shutil.copytree(os.path.join(FIXTURES, name, f"checkpoint-{cc.SAVE_AT}"), ckpt)
    tag = os.path.join(ckpt, f"global_step{cc.SAVE_AT}")
    conv = subprocess.run([sys.executable, "-m", "deepspeed.checkpoint.ds_to_universal",
                           "--input_folder", tag, "--output_folder", tag + "_universal",
                           "--inject_missing_state", "--num_extract_workers", "1",
                           "--num_merge_workers", "1"], capture_output=True, text=True,
                          timeout=300)
    if conv.returncode != 0:
        return [f"{name}: ds_to_universal failed:\n{conv.stdout[-2000:]}{conv.stderr[-3000:]}"]
    ds_out = os.path.join(tmp, name + "_ds")
    argv = [os.path.abspath(__file__), "--rank-main", "--stage", str(stage), "--ckpt", ckpt,
            "--out", ds_out]
    if run_ranks(argv, NEW_WORLD, args.timeout, "ckpt_reshard"):
        return [f"{name}: DeepSpeed's universal-checkpoint load on {NEW_WORLD} ranks failed"]
    with open(os.path.join(ds_out, "continued.json")) as f:
        ds = json.load(f)
    config = os.path.join(tmp, name + ".json")
    with open(config, "w") as f:
        json.dump(cc.ds_config(stage, NEW_WORLD), f)
    out = os.path.join(tmp, name + "_zrt")
    cc.run_zrt(args.bin, NEW_WORLD, cc.zrt_train_args(config, out) + [
        "--resume_from_checkpoint", os.path.join(FIXTURES, name, f"checkpoint-{cc.SAVE_AT}")])
    return compare(f"{name} resumed on {NEW_WORLD} ranks: ZeroRT reshard vs DeepSpeed "
                   f"universal", False, cc.logged(os.path.join(out, "trainer_state.json"),
                                                  cc.SAVE_AT + 1),
                   (ds["losses"], ds["learning_rates"]),
                   cc.ds_to_fp32(os.path.join(out, f"checkpoint-{cc.TOTAL_STEPS}")),
                   cc.ds_to_fp32(ds_out))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", help="ZeroRT's build/bin (required)")
    parser.add_argument("--timeout", type=float, default=240)
    parser.add_argument("--rank-main", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--stage", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--ckpt", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_main:
        rank_main(args)
        return 0
    if not args.bin:
        parser.error("--bin is required")
    fails = []
    with tempfile.TemporaryDirectory(prefix="zrt_reshard_") as tmp:
        for name, stage in (("ds_s1_w2", 1), ("ds_s2_w2", 2), ("ds_s3_w2", 3)):
            fails += one_case(args, tmp, name, stage)
    for f in fails:
        print("ckpt_reshard: " + f)
    print("ckpt_reshard: " + ("OK" if not fails else f"FAILED ({len(fails)})"))
    return 0 if not fails else 1


if __name__ == "__main__":
    sys.exit(main())
