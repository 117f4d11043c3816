"""Universal checkpoints both ways against DeepSpeed's own (issue 37; label `peer`).

For ZeRO stages 1-3 in fp32 and bf16, zrt-train saves checkpoint-3 on 2 ranks, and:
 - DeepSpeed's ds_to_universal and `zrt-ckpt to-universal` convert it (each on its own copy);
   the two universal folders must hold bit-identical tensors (fp32, exp_avg, exp_avg_sq per
   parameter) and steps;
 - ZeroRT on 3 ranks loads DeepSpeed's conversion ("checkpoint": {"load_universal": true}) and
   trains steps 4-6: losses, learning rates and final weights bit-identical to ZeroRT resuming
   the original 2-rank files;
 - DeepSpeed on 3 ranks loads ZeroRT's conversion with load_universal and trains steps 4-6:
   bit-identical to DeepSpeed loading its own conversion;
 - and ZeroRT vs DeepSpeed from the same universal folder agree: fp32 within ckpt_resume.py's
   tolerances; bf16 within training_parity.py's bf16 bound (losses rtol 2^-8, weights rtol 1e-5
   atol 2 * 2^-8 * the steps' summed learning rate), since at 3 ranks each side sums the bf16
   gradients of the reduction in its own order (2 ranks' sums are exact, so ckpt_resume.py's
   same-world bf16 bounds are tighter).
With --fixtures, also DeepSpeed-written checkpoints (tests/data/deepspeed ds_s{1,2,3}_w2[_bf16]):
both conversions bit-identical.

    python tests/peers/ckpt_universal.py --bin build/bin [--stages 1 2 3] [--dtype fp32|bf16]
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
TAG = f"global_step{cc.SAVE_AT}"


def rank_main(args):
    """DeepSpeed loads a universal checkpoint-3 and trains steps 4-6 (one rank of it)."""
    import torch
    engine = cc.ds_engine(args.stage, args.bf16, universal=True)
    path, _ = engine.load_checkpoint(args.ckpt)
    if path is None or engine.global_steps != cc.SAVE_AT:
        raise SystemExit(f"DeepSpeed did not load {args.ckpt} (global_steps {engine.global_steps})")
    losses, lrs = cc.ds_train(engine, cc.TOTAL_STEPS - cc.SAVE_AT)
    engine.save_checkpoint(args.out)
    if torch.distributed.get_rank() == 0:
        with open(os.path.join(args.out, "continued.json"), "w") as f:
            json.dump({"losses": losses, "learning_rates": lrs}, f)


def universal_tensors(folder):
    """{param/state: tensor} and {param: step} of a universal folder (either writer's form)."""
    import torch
    zero = os.path.join(folder, "zero")
    tensors, steps = {}, {}
    for name in sorted(os.listdir(zero)):
        if not os.path.isdir(os.path.join(zero, name)):
            continue
        for state in ("fp32", "exp_avg", "exp_avg_sq"):
            v = torch.load(os.path.join(zero, name, f"{state}.pt"), weights_only=False)
            tensors[f"{name}/{state}"] = (v["param"] if isinstance(v, dict) else v).reshape(-1)
        step = os.path.join(zero, name, "step.pt")
        if os.path.exists(step):
            steps[name] = torch.load(step, weights_only=False)
    return tensors, steps


def same_universal(what, ours, theirs):
    """Failures unless ZeroRT's universal folder holds DeepSpeed's tensors and steps bit for bit
    (DeepSpeed writes no step.pt from stage 3; ZeroRT's are then checked against the source)."""
    a, a_steps = universal_tensors(ours)
    b, b_steps = universal_tensors(theirs)
    fails = []
    diff = cc.bitwise_diff(a, b, what)
    if diff:
        fails.append(diff)
    for name, step in b_steps.items():
        if a_steps.get(name) != step:
            fails.append(f"{what}: {name}: step {a_steps.get(name)} vs DeepSpeed's {step}")
    if not a_steps or set(a_steps.values()) != {cc.SAVE_AT}:
        fails.append(f"{what}: ZeroRT's steps {sorted(set(a_steps.values()))}, expected "
                     f"[{cc.SAVE_AT}]")
    print(f"ckpt_universal: {what}: {len(a)} tensors "
          f"{'bit-identical' if not fails else 'DIFFER'}")
    return fails


def ds_convert(tag):
    """DeepSpeed's ds_to_universal of tag folder `tag` into tag + "_universal"."""
    conv = subprocess.run([sys.executable, "-m", "deepspeed.checkpoint.ds_to_universal",
                           "--input_folder", tag, "--output_folder", tag + "_universal",
                           "--inject_missing_state", "--num_extract_workers", "1",
                           "--num_merge_workers", "1"], capture_output=True, text=True,
                          timeout=300)
    if conv.returncode != 0:
        raise RuntimeError(f"ds_to_universal failed:\n{conv.stdout[-2000:]}{conv.stderr[-3000:]}")


def convert_both(args, checkpoint, tmp, key):
    """Copies of save_dir `checkpoint`, converted by DeepSpeed and by ZeroRT: (ds copy, zrt copy)."""
    ds_copy, zrt_copy = os.path.join(tmp, f"{key}_dsconv"), os.path.join(tmp, f"{key}_zrtconv")
    shutil.copytree(checkpoint, ds_copy)
    shutil.copytree(checkpoint, zrt_copy)
    ds_convert(os.path.join(ds_copy, TAG))
    cmd = [os.path.join(args.bin, "zrt-ckpt"), "to-universal", os.path.join(zrt_copy, TAG),
           os.path.join(zrt_copy, TAG + "_universal")]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if run.returncode != 0:
        raise RuntimeError(f"zrt-ckpt to-universal failed:\n{run.stdout}{run.stderr}")
    return ds_copy, zrt_copy


def ds_continue(args, tmp, checkpoint, stage, bf16, key):
    """DeepSpeed on NEW_WORLD ranks loads the universal checkpoint of save_dir `checkpoint` and
    trains steps 4-6: ((losses, learning rates), its final fp32 weights)."""
    out = os.path.join(tmp, key)
    argv = [os.path.abspath(__file__), "--rank-main", "--stage", str(stage), "--ckpt", checkpoint,
            "--out", out] + (["--bf16"] if bf16 else [])
    if run_ranks(argv, NEW_WORLD, args.timeout, "ckpt_universal"):
        raise RuntimeError(f"DeepSpeed's load_universal of {checkpoint} failed (output above)")
    with open(os.path.join(out, "continued.json")) as f:
        ds = json.load(f)
    return (ds["losses"], ds["learning_rates"]), cc.ds_to_fp32(out)


def zrt_continue(args, tmp, checkpoint, stage, bf16, universal, key):
    config = os.path.join(tmp, key + ".json")
    with open(config, "w") as f:
        json.dump(cc.ds_config(stage, NEW_WORLD, bf16, universal=universal), f)
    out = os.path.join(tmp, key)
    cc.run_zrt(args.bin, NEW_WORLD, cc.zrt_train_args(config, out, bf16)
               + ["--resume_from_checkpoint", checkpoint])
    return (cc.logged(os.path.join(out, "trainer_state.json"), cc.SAVE_AT + 1),
            cc.ds_to_fp32(os.path.join(out, f"checkpoint-{cc.TOTAL_STEPS}")))


def identical(what, a, b):
    """Failures unless two continued runs ((losses, lrs), weights) are bit-identical."""
    fails = [] if a[0] == b[0] else [f"{what}: losses/lrs {a[0]} vs {b[0]}"]
    diff = cc.bitwise_diff(a[1], b[1], what)
    fails += [diff] if diff else []
    print(f"ckpt_universal: {what}: {'bit-identical' if not fails else 'DIFFER'}")
    return fails


def one_case(args, tmp, stage, bf16):
    name = f"stage {stage} {'bf16' if bf16 else 'fp32'}"
    key = f"s{stage}{'b' if bf16 else 'f'}"
    config = os.path.join(tmp, key + ".json")
    with open(config, "w") as f:
        json.dump(cc.ds_config(stage, 2, bf16), f)
    src = os.path.join(tmp, key + "_src")
    cc.run_zrt(args.bin, 2, cc.zrt_train_args(config, src, bf16))
    checkpoint = os.path.join(src, f"checkpoint-{cc.SAVE_AT}")
    ds_copy, zrt_copy = convert_both(args, checkpoint, tmp, key)
    fails = same_universal(f"{name}: ZeroRT's checkpoint converted", os.path.join(
        zrt_copy, TAG + "_universal"), os.path.join(ds_copy, TAG + "_universal"))
    zrt_uni = zrt_continue(args, tmp, ds_copy, stage, bf16, True, key + "_zrt_uni")
    zrt_direct = zrt_continue(args, tmp, checkpoint, stage, bf16, False, key + "_zrt_direct")
    fails += identical(f"{name}: ZeroRT x{NEW_WORLD} from DeepSpeed's universal vs from the "
                       "2-rank files", zrt_uni, zrt_direct)
    ds_ours = ds_continue(args, tmp, zrt_copy, stage, bf16, key + "_ds_ours")
    ds_own = ds_continue(args, tmp, ds_copy, stage, bf16, key + "_ds_own")
    fails += identical(f"{name}: DeepSpeed x{NEW_WORLD} from ZeroRT's universal vs from its own",
                       ds_ours, ds_own)
    fails += cc.peers_agree(f"{name}: ZeroRT vs DeepSpeed from DeepSpeed's universal", bf16,
                         zrt_uni, ds_own)
    return fails


def fixture_cases(args, tmp):
    fails = []
    for stage in args.stages:
        for bf16 in args.dtypes:
            name = f"ds_s{stage}_w2" + ("_bf16" if bf16 else "")
            ds_copy, zrt_copy = convert_both(
                args, os.path.join(FIXTURES, name, f"checkpoint-{cc.SAVE_AT}"), tmp, name)
            fails += same_universal(f"{name} (DeepSpeed-written) converted",
                                    os.path.join(zrt_copy, TAG + "_universal"),
                                    os.path.join(ds_copy, TAG + "_universal"))
    return fails


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", help="ZeroRT's build/bin (required)")
    parser.add_argument("--timeout", type=float, default=240)
    parser.add_argument("--stages", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--dtype", choices=["fp32", "bf16"])
    parser.add_argument("--fixtures", action="store_true",
                        help="also convert the DeepSpeed-written fixtures both ways")
    parser.add_argument("--rank-main", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--stage", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--bf16", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--ckpt", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_main:
        rank_main(args)
        return 0
    if not args.bin:
        parser.error("--bin is required")
    args.dtypes = {"fp32": (False,), "bf16": (True,), None: (False, True)}[args.dtype]
    fails = []
    with tempfile.TemporaryDirectory(prefix="zrt_universal_") as tmp:
        for stage in args.stages:
            for bf16 in args.dtypes:
                try:
                    fails += one_case(args, tmp, stage, bf16)
                except RuntimeError as e:
                    fails.append(f"stage {stage} {'bf16' if bf16 else 'fp32'}: {e}")
        if args.fixtures:
            fails += fixture_cases(args, tmp)
    for f in fails:
        print("ckpt_universal: " + f)
    print("ckpt_universal: " + ("OK" if not fails else f"FAILED ({len(fails)})"))
    return 0 if not fails else 1


if __name__ == "__main__":
    sys.exit(main())
