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
import sys
import tempfile

import ckpt_common as cc
import ckpt_universal as cu

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "data", "deepspeed")
NEW_WORLD = cu.NEW_WORLD


def one_case(args, tmp, name, stage):
    from ckpt_resume import compare
    ckpt = os.path.join(tmp, name)
    shutil.copytree(os.path.join(FIXTURES, name, f"checkpoint-{cc.SAVE_AT}"), ckpt)
    try:
        cu.ds_convert(os.path.join(ckpt, f"global_step{cc.SAVE_AT}"))
        ds, ds_weights = cu.ds_continue(args, tmp, ckpt, stage, False, name + "_ds")
    except RuntimeError as e:
        return [f"{name}: {e}"]
    config = os.path.join(tmp, name + ".json")
    with open(config, "w") as f:
        json.dump(cc.ds_config(stage, NEW_WORLD), f)
    out = os.path.join(tmp, name + "_zrt")
    cc.run_zrt(args.bin, NEW_WORLD, cc.zrt_train_args(config, out) + [
        "--resume_from_checkpoint", os.path.join(FIXTURES, name, f"checkpoint-{cc.SAVE_AT}")])
    return compare(f"{name} resumed on {NEW_WORLD} ranks: ZeroRT reshard vs DeepSpeed "
                   f"universal", False, cc.logged(os.path.join(out, "trainer_state.json"),
                                                  cc.SAVE_AT + 1),
                   ds, cc.ds_to_fp32(os.path.join(out, f"checkpoint-{cc.TOTAL_STEPS}")),
                   ds_weights)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", help="ZeroRT's build/bin (required)")
    parser.add_argument("--timeout", type=float, default=240)
    args = parser.parse_args()
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
