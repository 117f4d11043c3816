"""zero_to_fp32 both ways, bit for bit (issue 14 section 3; label `peer`).

 - ZeroRT-written: zrt-train trains the MLP (ckpt_common) at ZeRO stages 2 and 3 on 1-4 ranks;
   DeepSpeed's own consolidation of each checkpoint (deepspeed.utils.zero_to_fp32, from the
   installed package) must equal `zrt-ckpt to-fp32` of it: the same keys, dtypes, shapes and
   bytes.
 - DeepSpeed-written: the same comparison on the 15 ZeRO checkpoints DeepSpeed wrote (stages
   1-3 on 1-4 ranks in fp32, on 2 ranks in bf16; tests/data/deepspeed, made by
   tests/peers/make_ds_fixtures.py), and against the consolidation the fixture script stored
   (what the C++ test ZrtCkpt.DeepSpeedWrittenCheckpoint compares against). zero_to_fp32 does
   not read DeepSpeed's two stage-0 checkpoints; there `zrt-ckpt to-fp32` must equal the fp32
   weights DeepSpeed's engine held when it saved (the fixture's fp32.safetensors).

    python tests/peers/ckpt_to_fp32.py --bin build/bin
"""
import argparse
import json
import os
import sys
import tempfile

import ckpt_common as cc

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "data", "deepspeed")


def zrt_written(args, tmp):
    fails = []
    for stage in (2, 3):
        for np in (1, 2, 3, 4):
            config = os.path.join(tmp, f"c{stage}_{np}.json")
            with open(config, "w") as f:
                json.dump(cc.ds_config(stage, np), f)
            out = os.path.join(tmp, f"z{stage}_{np}")
            cc.run_zrt(args.bin, np, cc.zrt_train_args(config, out))
            for step in (cc.SAVE_AT, cc.TOTAL_STEPS):
                ckpt = os.path.join(out, f"checkpoint-{step}")
                why = cc.bitwise_diff(cc.zrt_to_fp32(args.bin, ckpt, ckpt + ".safetensors"),
                                      cc.ds_to_fp32(ckpt),
                                      f"ZeroRT stage {stage}, {np} rank(s), step {step}")
                print(f"ckpt_to_fp32: ZeroRT-written, stage {stage}, {np} rank(s), step {step}: "
                      f"zrt-ckpt to-fp32 "
                      f"{'== DeepSpeed zero_to_fp32, bit for bit' if why is None else why}")
                if why:
                    fails.append(why)
    return fails


def ds_written(args, tmp):
    from safetensors.torch import load_file
    fails = []
    names = sorted(n for n in os.listdir(FIXTURES) if n.startswith("ds_"))
    if len(names) != 17:
        return [f"expected 17 fixtures in {FIXTURES}, found {names}"]
    for name in names:
        ckpt = os.path.join(FIXTURES, name, f"checkpoint-{cc.SAVE_AT}")
        if name.startswith("ds_s0_"):
            why = cc.bitwise_diff(
                cc.zrt_to_fp32(args.bin, ckpt, os.path.join(tmp, name + ".safetensors")),
                load_file(os.path.join(FIXTURES, name, "fp32.safetensors")), f"DeepSpeed {name}")
            fails += [why] if why else []
            verdict = "== the fp32 weights of DeepSpeed's engine, bit for bit" if not why else why
            print(f"ckpt_to_fp32: DeepSpeed-written {name} (no ZeRO): zrt-ckpt to-fp32 {verdict}")
            continue
        ds = cc.ds_to_fp32(ckpt)
        whys = [w for w in (
            cc.bitwise_diff(cc.zrt_to_fp32(args.bin, ckpt, os.path.join(tmp, name + ".safetensors")), ds,
                            f"DeepSpeed {name}"),
            cc.bitwise_diff(load_file(os.path.join(FIXTURES, name, "fp32.safetensors")), ds,
                            f"{name}/fp32.safetensors (stale fixture?)")) if w]
        fails += whys
        print(f"ckpt_to_fp32: DeepSpeed-written {name}: zrt-ckpt to-fp32 "
              f"{'== DeepSpeed zero_to_fp32, bit for bit' if not whys else whys[0]}")
    return fails


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True, help="ZeroRT's build/bin")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="zrt_to_fp32_") as tmp:
        fails = ds_written(args, tmp) + zrt_written(args, tmp)
    for f in fails:
        print("ckpt_to_fp32: MISMATCH: " + f)
    print("ckpt_to_fp32: " + ("OK" if not fails else f"FAILED ({len(fails)})"))
    return 0 if not fails else 1


if __name__ == "__main__":
    sys.exit(main())
