"""Makes tests/data/deepspeed: small checkpoints written by the real DeepSpeed (issue 14 section 3).

For each case, DeepSpeed (gloo ranks, CPU accelerator) trains the MLP twin of zrt-train's
`--model mlp --width 8 --layers 1` with ckpt_common's config and zrt-train's batches for 3 steps
and saves `checkpoint-3` as the transformers Trainer lays it out (engine.save_checkpoint into
checkpoint-3/, plus trainer_state.json written by transformers' own TrainerState). It then
trains on to step 6, as a run that was never interrupted; what a resume must reproduce is kept:

    <case>/checkpoint-3/          latest, global_step3/*.pt, trainer_state.json
    <case>/fp32.safetensors       deepspeed.utils.zero_to_fp32 of checkpoint-3 (stage 0, which
                                  zero_to_fp32 does not read: the engine's own fp32 weights,
                                  FP16_Optimizer's fp32_groups_flat in bf16)
    <case>/final.safetensors      the same of DeepSpeed's checkpoint at step 6 (not kept)
    <case>/expected.json          losses (mean over ranks) and learning rates of steps 4-6

The recovery script DeepSpeed copies into every save_dir (zero_to_torch.py in 0.19.8) is deleted:
it is the installed package's file. Cases: ds_s{1,2,3}_w{1,2,3,4} (fp32), ds_s{1,2,3}_w2_bf16,
ds_s0_w2 and ds_s0_w2_bf16 (no ZeRO: the optimizer in the model states, Note [Stage 0 layouts] in
runtime/checkpoint_state.h).

    .venv/bin/python tests/peers/make_ds_fixtures.py [--out tests/data/deepspeed] [--only NAME]
"""
import argparse
import json
import os
import shutil
import sys

import ckpt_common as cc
from peer_launch import run_ranks

HERE = os.path.dirname(os.path.abspath(__file__))


def cases():
    out = [(f"ds_s{s}_w{w}", s, w, False) for s in (1, 2, 3) for w in (1, 2, 3, 4)]
    out += [(f"ds_s{s}_w2_bf16", s, 2, True) for s in (1, 2, 3)]
    return out + [("ds_s0_w2", 0, 2, False), ("ds_s0_w2_bf16", 0, 2, True)]



def trainer_state(losses, lrs, world):
    """transformers' TrainerState at step SAVE_AT, as the Trainer would have saved it."""
    from transformers.trainer_callback import TrainerState
    per_epoch = 4096 // (world * cc.MICRO) + (4096 % (world * cc.MICRO) > 0)
    history = [{"epoch": (i + 1) / per_epoch, "learning_rate": lr, "loss": loss, "step": i + 1}
               for i, (loss, lr) in enumerate(zip(losses, lrs))]
    return TrainerState(epoch=cc.SAVE_AT / per_epoch, global_step=cc.SAVE_AT,
                        max_steps=cc.TOTAL_STEPS, logging_steps=1, save_steps=cc.SAVE_AT,
                        train_batch_size=cc.MICRO, num_train_epochs=1, log_history=history)


def rank_main(args):
    import torch
    from safetensors.torch import save_file
    import deepspeed

    engine = cc.ds_engine(args.stage, args.bf16)
    rank = torch.distributed.get_rank()
    first = cc.ds_train(engine, cc.SAVE_AT)
    ckpt = os.path.join(args.case_dir, f"checkpoint-{cc.SAVE_AT}")
    engine.save_checkpoint(ckpt)
    at_save = cc.stage0_fp32(engine) if args.stage == 0 else None
    if rank == 0:
        trainer_state(*first, torch.distributed.get_world_size()).save_to_json(
            os.path.join(ckpt, "trainer_state.json"))
    losses, lrs = cc.ds_train(engine, cc.TOTAL_STEPS - cc.SAVE_AT)
    final = os.path.join(args.case_dir, "_final")
    engine.save_checkpoint(final)
    torch.distributed.barrier()
    at_end = cc.stage0_fp32(engine) if args.stage == 0 else None
    if rank == 0:
        save_file(at_save or cc.ds_to_fp32(ckpt), os.path.join(args.case_dir, "fp32.safetensors"))
        save_file(at_end or cc.ds_to_fp32(final), os.path.join(args.case_dir, "final.safetensors"))
        shutil.rmtree(final)
        for script in [n for n in os.listdir(ckpt) if n.endswith(".py")]:
            os.remove(os.path.join(ckpt, script))  # the package's recovery script
        with open(os.path.join(args.case_dir, "expected.json"), "w") as f:
            json.dump({"stage": args.stage, "world_size": torch.distributed.get_world_size(),
                       "bf16": args.bf16, "first_step": cc.SAVE_AT + 1, "losses": losses,
                       "learning_rates": lrs, "deepspeed": deepspeed.__version__,
                       "torch": torch.__version__}, f, indent=1)
    torch.distributed.barrier()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.path.join(HERE, "..", "data", "deepspeed"))
    parser.add_argument("--only", help="make this case only")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--rank-main", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--stage", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--bf16", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--case-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_main:
        rank_main(args)
        return 0
    for name, stage, world, bf16 in cases():
        if args.only and name != args.only:
            continue
        case_dir = os.path.abspath(os.path.join(args.out, name))
        shutil.rmtree(case_dir, ignore_errors=True)
        os.makedirs(case_dir)
        argv = [os.path.abspath(__file__), "--rank-main", "--stage", str(stage),
                "--case-dir", case_dir] + (["--bf16"] if bf16 else [])
        if run_ranks(argv, world, args.timeout, f"make_ds_fixtures {name}"):
            return 1
        print(f"make_ds_fixtures: {name} written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
