"""The transformers Trainer and zrt-train resume from each other's checkpoint-N (issue 14
section 3, the HF level; label `peer`).

Two cases: one process with ZeRO-2 in fp32, and 2 ranks with ZeRO-3 in bf16 (the Trainer's ranks
through peer_launch, zrt-train's through zrt-launch); the MLP and config of ckpt_common. The
Trainer (with its DeepSpeed integration, the twin model returning HF's {"loss": ...}) and
zrt-train each train 6 steps, saving checkpoint-3 and checkpoint-6. Then
 - the Trainer resumes (train(resume_from_checkpoint=...)) from zrt-train's checkpoint-3, and
 - zrt-train --resume_from_checkpoint from the Trainer's checkpoint-3;
each resumed run must log the same step and learning rate and the losses of steps 4-6 of the
writer's own uninterrupted run, and end with its weights (the fp32 masters): in fp32 within
ckpt_resume.py's tolerances (loss rtol 1e-5, weights rtol 1e-4 atol 1e-6: the two sides run the
same maths with their own kernels); in bf16 within training_parity.py's bf16 bound
(ckpt_common.peers_agree), since there the two sides' bf16 runs are apart by themselves (the
uninterrupted runs' distance is printed: 1.8e-4 in the weights after 6 steps, against 9.2e-5
after the 3 resumed steps). The Trainer draws zrt-train's batches: its sampler is torch's
DistributedSampler(shuffle, seed 42), as zrt-train's.

    python tests/peers/hf_ckpt_resume.py --bin build/bin [--case z2x1|z3x2bf16]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import ckpt_common as cc
from peer_launch import free_port, run_ranks

# name -> (ZeRO stage, world size, bf16)
CASES = {"z2x1": (2, 1, False), "z3x2bf16": (3, 2, True)}

HERE = os.path.dirname(os.path.abspath(__file__))


def hf_run(args):
    """One Trainer rank in this process (world size 1 unless peer_launch set the rank's
    environment): output_dir args.out, resuming from args.resume if set."""
    if "WORLD_SIZE" not in os.environ:
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1",
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    os.environ["DS_ACCELERATOR"] = "cpu"
    stage, world, bf16 = CASES[args.case]
    import torch
    from transformers import Trainer, TrainingArguments
    from twins import Mlp, regression_data

    class HfMlp(Mlp):
        def forward(self, x, labels=None):
            out = super().forward(x)
            return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}

    class Data(torch.utils.data.Dataset):
        def __init__(self):
            self.x, self.y = regression_data(4096, 1)

        def __len__(self):
            return 4096

        def __getitem__(self, i):
            return {"x": self.x[i], "labels": self.y[i]}

    class SamplerTrainer(Trainer):
        def _get_train_sampler(self, train_dataset=None):
            if world == 1:
                return torch.utils.data.DistributedSampler(self.train_dataset, num_replicas=1,
                                                           rank=0, shuffle=True, seed=cc.SEED)
            # accelerate shards the batches of the sampler it is given (rank r takes batches r,
            # r + world, ...): interleave the ranks' DistributedSampler micro-batches so that
            # rank r's b-th batch is its own sampler's b-th, as in zrt-train.
            orders = [list(torch.utils.data.DistributedSampler(
                self.train_dataset, num_replicas=world, rank=r, shuffle=True, seed=cc.SEED))
                for r in range(world)]
            return [i for b in range(len(orders[0]) // cc.MICRO) for r in range(world)
                    for i in orders[r][b * cc.MICRO:(b + 1) * cc.MICRO]]

    torch.manual_seed(cc.SEED)
    targs = TrainingArguments(
        output_dir=args.out, deepspeed=cc.ds_config(stage, world, bf16), use_cpu=True, bf16=bf16,
        per_device_train_batch_size=cc.MICRO, max_steps=cc.TOTAL_STEPS, learning_rate=cc.LR,
        weight_decay=0.01, warmup_steps=2, save_steps=cc.SAVE_AT, logging_steps=1,
        seed=cc.SEED, report_to="none", save_only_model=False)
    trainer = SamplerTrainer(model=HfMlp(cc.WIDTH, cc.LAYERS), args=targs, train_dataset=Data())
    trainer.train(resume_from_checkpoint=args.resume)


def run_hf(case, out, resume=None, timeout=300):
    argv = [os.path.abspath(__file__), "--hf-run", "--case", case, "--out", out]
    argv += ["--resume", resume] if resume else []
    world = CASES[case][1]
    if world > 1:
        if run_ranks(argv, world, timeout, "hf_ckpt_resume"):
            raise RuntimeError(f"the Trainer failed on {world} ranks (its output above)")
        return
    run = subprocess.run([sys.executable] + argv, capture_output=True, text=True,
                         timeout=timeout, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if run.returncode != 0:
        raise RuntimeError(f"the Trainer failed ({run.returncode}): {' '.join(argv)}\n"
                           + run.stdout[-3000:] + run.stderr[-5000:])


def one_case(args, case, tmp):
    stage, world, bf16 = CASES[case]
    fails = []
    config = os.path.join(tmp, f"{case}.json")
    with open(config, "w") as f:
        json.dump(cc.ds_config(stage, world, bf16), f)
    zrt, hf = os.path.join(tmp, f"{case}_zrt"), os.path.join(tmp, f"{case}_hf")
    cc.run_zrt(args.bin, world, cc.zrt_train_args(config, zrt, bf16))
    run_hf(case, hf)
    hf_from_zrt = os.path.join(tmp, f"{case}_hf_from_zrt")
    run_hf(case, hf_from_zrt, os.path.join(zrt, f"checkpoint-{cc.SAVE_AT}"))
    zrt_from_hf = os.path.join(tmp, f"{case}_zrt_from_hf")
    cc.run_zrt(args.bin, world, cc.zrt_train_args(config, zrt_from_hf, bf16) + [
        "--resume_from_checkpoint", os.path.join(hf, f"checkpoint-{cc.SAVE_AT}")])
    last = f"checkpoint-{cc.TOTAL_STEPS}"
    # For scale: how far the two writers' own uninterrupted runs (steps 1-6) are apart.
    a, b = (cc.logged(os.path.join(d, last, "trainer_state.json"), 1)[0] for d in (zrt, hf))
    wa, wb = (cc.ds_to_fp32(os.path.join(d, last)) for d in (zrt, hf))
    print(f"hf_ckpt_resume: {case}: zrt-train vs the Trainer, both uninterrupted: losses rel. "
          f"diff <= {max(abs(x - y) / abs(y) for x, y in zip(a, b)):.2g}, weights |diff| <= "
          f"{max((wa[k].double() - wb[k].double()).abs().max().item() for k in wb):.2g}")
    for what, resumed, writer in (("zrt-train checkpoint -> transformers Trainer",
                                   hf_from_zrt, zrt),
                                  ("transformers Trainer checkpoint -> zrt-train",
                                   zrt_from_hf, hf)):
        what = f"{case}: {what}"
        state = os.path.join(resumed, last, "trainer_state.json")
        fails += cc.peers_agree(what, bf16, (cc.logged(state, cc.SAVE_AT + 1),
                                             cc.ds_to_fp32(os.path.join(resumed, last))),
                                (cc.logged(os.path.join(writer, last, "trainer_state.json"),
                                           cc.SAVE_AT + 1),
                                 cc.ds_to_fp32(os.path.join(writer, last))))
        with open(state) as f:
            step = json.load(f)["global_step"]
        if step != cc.TOTAL_STEPS:
            fails.append(f"{what}: ended at step {step}, not {cc.TOTAL_STEPS}")
    return fails


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", help="ZeroRT's build/bin (required)")
    parser.add_argument("--case", choices=sorted(CASES), help="one case (default: all)")
    parser.add_argument("--hf-run", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--resume", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.hf_run:
        hf_run(args)
        return 0
    if not args.bin:
        parser.error("--bin is required")
    fails = []
    with tempfile.TemporaryDirectory(prefix="zrt_hf_resume_") as tmp:
        for case in [args.case] if args.case else sorted(CASES):
            try:
                fails += one_case(args, case, tmp)
            except RuntimeError as e:
                fails.append(f"{case}: {e}")
    for f in fails:
        print("hf_ckpt_resume: " + f)
    print("hf_ckpt_resume: " + ("OK" if not fails else f"FAILED ({len(fails)})"))
    return 0 if not fails else 1


if __name__ == "__main__":
    sys.exit(main())
