"""Resuming across ZeroRT and DeepSpeed checkpoints (issue 14 section 3; label `peer`).

 - zrt2ds: zrt-train trains the MLP of ckpt_common 6 steps on 2 ranks (ZeRO 0, 1, 2, 3; fp32 and
   bf16; in fp32 also GA 2 and CPU offload), saving checkpoint-3 and checkpoint-6. The real
   DeepSpeed loads checkpoint-3 with its own engine.load_checkpoint (module, optimizer and
   scheduler state) and trains steps 4-6 on the same batches. Its losses and learning rates must
   equal zrt-train's log of steps 4-6, and DeepSpeed's weights after step 6 (its zero_to_fp32 of
   its own checkpoint; at stage 0, which zero_to_fp32 does not read, its engine's fp32 weights)
   zrt-train's checkpoint-6 (the same consolidation of it; at stage 0 zrt-ckpt to-fp32).
 - ds2zrt: the mirror image on the checkpoints DeepSpeed wrote (tests/data/deepspeed, made by
   make_ds_fixtures.py: stages 1-3 on 1-4 ranks in fp32, stages 0-3 on 2 ranks in fp32 and bf16):
   zrt-train --resume_from_checkpoint CASE/checkpoint-3 at the case's world size against what
   DeepSpeed itself did after its step 3 (expected.json, final.safetensors). A negative control
   resumes ds_s2_w2_bf16 with its fp32 masters rounded to bf16 (a broken restore) and must fail
   the weight comparison.

Tolerances, |zrt - ds| <= atol + rtol |ds|: the two sides run the same maths with their own
kernels and summation orders, so fp32 agrees to rounding (loss and lr rtol 1e-5, weights rtol
1e-4 atol 1e-6, those of training_parity.py). bf16 is held to the same weight bounds, as the
weights compared are the fp32 masters: a resume that rebuilt the masters from the bf16 weights
would be off by bf16's rounding (~4e-3 relative) and must fail, which every bf16 case checks on
its own data (the masters rounded to bf16 must be outside the bounds); bf16 losses rtol 1e-3.
The measured worst differences are printed.

    python tests/peers/ckpt_resume.py --bin build/bin [--part zrt2ds|ds2zrt] [--dtype fp32|bf16]
"""
import argparse
import json
import os
import sys
import tempfile

import ckpt_common as cc
from peer_launch import run_ranks

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "data", "deepspeed")
TOL = {False: (1e-5, 1e-4, 1e-6), True: (1e-3, 1e-4, 1e-6)}  # bf16 -> (loss, weights rtol, atol)


def rank_main(args):
    """DeepSpeed loads ZeroRT's checkpoint-3 and trains steps 4-6 (one rank of it)."""
    import torch
    engine = cc.ds_engine(args.stage, args.bf16, args.ga, args.offload)
    path, _ = engine.load_checkpoint(args.ckpt)
    if path is None or engine.global_steps != cc.SAVE_AT:
        raise SystemExit(f"DeepSpeed did not load {args.ckpt} (path {path}, "
                         f"global_steps {engine.global_steps})")
    losses, lrs = cc.ds_train(engine, cc.TOTAL_STEPS - cc.SAVE_AT)
    engine.save_checkpoint(args.out)
    weights = cc.stage0_fp32(engine) if args.stage == 0 else None
    if torch.distributed.get_rank() == 0:
        if weights is not None:
            from safetensors.torch import save_file
            save_file(weights, os.path.join(args.out, "stage0_fp32.safetensors"))
        with open(os.path.join(args.out, "continued.json"), "w") as f:
            json.dump({"losses": losses, "learning_rates": lrs}, f)


def compare(what, bf16, got, want, got_w, want_w):
    """Failures (strings) of losses, learning rates and weights; prints the measured worst."""
    import torch
    loss_rtol, w_rtol, w_atol = TOL[bf16]
    fails = []
    if not cc.close_list(got[0], want[0], loss_rtol, 0.0):
        fails.append(f"{what}: losses {got[0]} vs {want[0]} (rtol {loss_rtol})")
    if not cc.close_list(got[1], want[1], 1e-6, 0.0):
        fails.append(f"{what}: learning rates {got[1]} vs {want[1]}")
    why = cc.close_diff(got_w, want_w, w_rtol, w_atol, what + ": weights after step 6")
    if why:
        fails.append(why)
    rounded = {k: v.to(torch.bfloat16).to(v.dtype) for k, v in want_w.items()}
    if bf16 and cc.close_diff(rounded, want_w, w_rtol, w_atol, what) is None:
        fails.append(f"{what}: the weight tolerance cannot tell fp32 masters from bf16-rounded ones")
    worst_loss = max(abs(g - w) / abs(w) for g, w in zip(got[0], want[0])) if got[0] else -1
    worst_w = max((got_w[k].double() - want_w[k].double()).abs().max().item() for k in want_w)
    print(f"ckpt_resume: {what}: steps {cc.SAVE_AT + 1}-{cc.TOTAL_STEPS} losses rel. diff "
          f"<= {worst_loss:.2g}, weights |diff| <= {worst_w:.2g}: "
          f"{'OK' if not fails else 'MISMATCH'}")
    return fails


def zrt2ds_cases(args):
    """(stage, bf16, gradient accumulation, optimizer offloaded): each --stages stage plain in
    each dtype of --dtype, and in fp32 also GA 2, CPU offload, and both at ZeRO-3."""
    cases = []
    for bf16 in {"fp32": (False,), "bf16": (True,), None: (False, True)}[args.dtype]:
        cases += [(stage, bf16, 1, False) for stage in args.stages]
        if not bf16 and args.variants:
            cases += [(2, False, 2, False), (2, False, 1, True), (3, False, 2, True)]
    return cases


def zrt2ds(args, tmp):
    fails = []
    for stage, bf16, ga, offload in zrt2ds_cases(args):
        name = (f"stage {stage} {'bf16' if bf16 else 'fp32'}" + (f" GA {ga}" if ga > 1 else "")
                + (" offload" if offload else ""))
        key = f"{stage}{bf16}{ga}{offload}"
        config = os.path.join(tmp, f"c{key}.json")
        with open(config, "w") as f:
            json.dump(cc.ds_config(stage, 2, bf16, ga, offload), f)
        out = os.path.join(tmp, f"z{key}")
        cc.run_zrt(args.bin, 2, cc.zrt_train_args(config, out, bf16, ga))
        ds_out = os.path.join(tmp, f"d{key}")
        argv = [os.path.abspath(__file__), "--rank-main", "--stage", str(stage), "--ga", str(ga),
                "--ckpt", os.path.join(out, f"checkpoint-{cc.SAVE_AT}"), "--out", ds_out]
        argv += (["--bf16"] if bf16 else []) + (["--offload"] if offload else [])
        if run_ranks(argv, 2, args.timeout, "ckpt_resume"):
            fails.append(f"ZeroRT -> DeepSpeed {name}: DeepSpeed failed (its output above)")
            continue
        with open(os.path.join(ds_out, "continued.json")) as f:
            ds = json.load(f)
        zrt = cc.logged(os.path.join(out, "trainer_state.json"), cc.SAVE_AT + 1)
        final = os.path.join(out, f"checkpoint-{cc.TOTAL_STEPS}")
        if stage == 0:
            from safetensors.torch import load_file
            ds_w = load_file(os.path.join(ds_out, "stage0_fp32.safetensors"))
            zrt_w = cc.zrt_to_fp32(args.bin, final, final + ".safetensors")
        else:
            ds_w, zrt_w = cc.ds_to_fp32(ds_out), cc.ds_to_fp32(final)
        fails += compare(f"ZeroRT -> DeepSpeed {name}, 2 ranks", bf16,
                         (ds["losses"], ds["learning_rates"]), zrt, ds_w, zrt_w)
    return fails


BROKEN = "ds_s2_w2_bf16"  # the case the negative control breaks


def round_masters_to_bf16(case, out):
    """A copy of case's checkpoint-3 whose fp32 masters are what a resume that rebuilt them from
    the bf16 weights would have: each master rounded to bf16 (the weights are exactly that)."""
    import shutil
    import torch
    shutil.copytree(os.path.join(case, f"checkpoint-{cc.SAVE_AT}"), out)
    tag = os.path.join(out, f"global_step{cc.SAVE_AT}")
    for name in sorted(os.listdir(tag)):
        if name.endswith("_optim_states.pt"):
            path = os.path.join(tag, name)
            sd = torch.load(path, weights_only=False)
            groups = sd["optimizer_state_dict"]["single_partition_of_fp32_groups"]
            for i, g in enumerate(groups):
                groups[i] = g.to(torch.bfloat16).to(torch.float32)
            torch.save(sd, path)
    return out


def ds2zrt(args, tmp):
    from safetensors.torch import load_file
    fails = []
    names = sorted(n for n in os.listdir(FIXTURES) if n.startswith("ds_"))
    if len(names) != 17:
        return [f"expected 17 fixtures in {FIXTURES}, found {names}"]
    for name in names + ["broken"]:
        case = os.path.join(FIXTURES, BROKEN if name == "broken" else name)
        with open(os.path.join(case, "expected.json")) as f:
            want = json.load(f)
        config = os.path.join(tmp, name + ".json")
        with open(config, "w") as f:
            json.dump(cc.ds_config(want["stage"], want["world_size"], want["bf16"]), f)
        out = os.path.join(tmp, name)
        resume = os.path.join(case, f"checkpoint-{cc.SAVE_AT}")
        if name == "broken":
            resume = round_masters_to_bf16(case, os.path.join(tmp, "broken-checkpoint"))
        zrt_args = cc.zrt_train_args(config, out, want["bf16"]) + ["--resume_from_checkpoint", resume]
        try:
            cc.run_zrt(args.bin, want["world_size"], zrt_args)
        except RuntimeError as e:
            fails.append(f"DeepSpeed -> ZeroRT {name}: {e}")
            continue
        got = cc.logged(os.path.join(out, "trainer_state.json"), cc.SAVE_AT + 1)
        weights = cc.zrt_to_fp32(args.bin, os.path.join(out, f"checkpoint-{cc.TOTAL_STEPS}"),
                                 out + ".safetensors")
        found = compare(f"DeepSpeed -> ZeroRT {name}", want["bf16"], got,
                        (want["losses"], want["learning_rates"]), weights,
                        load_file(os.path.join(case, "final.safetensors")))
        if name != "broken":
            fails += found
        else:
            caught = [f for f in found if "weights after step 6" in f]
            if not caught:
                fails.append(f"negative control: {BROKEN} resumed with its fp32 masters rounded to "
                             "bf16 passed the bf16 weight tolerance")
            else:
                print(f"ckpt_resume: negative control ({BROKEN}, masters rounded to bf16) fails "
                      f"as it must: {caught[0]}")
    return fails


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", help="ZeroRT's build/bin (required)")
    parser.add_argument("--part", choices=("zrt2ds", "ds2zrt"), help="one direction only")
    parser.add_argument("--dtype", choices=("fp32", "bf16"), help="zrt2ds in this dtype only")
    parser.add_argument("--timeout", type=float, default=240)
    parser.add_argument("--stages", type=int, nargs="+", default=[0, 1, 2, 3],
                        help="zrt2ds: the ZeRO stages (default 0 1 2 3)")
    parser.add_argument("--no-variants", dest="variants", action="store_false",
                        help="zrt2ds: without the GA and CPU-offload cases")
    parser.add_argument("--ga", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--offload", action="store_true", help=argparse.SUPPRESS)
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
    fails = []
    with tempfile.TemporaryDirectory(prefix="zrt_resume_") as tmp:
        if args.part in (None, "ds2zrt"):
            fails += ds2zrt(args, tmp)
        if args.part in (None, "zrt2ds"):
            fails += zrt2ds(args, tmp)
    for f in fails:
        print("ckpt_resume: " + f)
    print("ckpt_resume: " + ("OK" if not fails else f"FAILED ({len(fails)})"))
    return 0 if not fails else 1


if __name__ == "__main__":
    sys.exit(main())
