"""The transformers Trainer and zrt-train resume from each other's checkpoint-N (issue 14
section 3, the HF level; label `peer`).

One process (world size 1), ZeRO-2, the MLP and config of ckpt_common: the Trainer (with its
DeepSpeed integration, the twin model returning HF's {"loss": ...}) and zrt-train each train 6
steps, saving checkpoint-3 and checkpoint-6. Then
 - the Trainer resumes (train(resume_from_checkpoint=...)) from zrt-train's checkpoint-3, and
 - zrt-train --resume_from_checkpoint from the Trainer's checkpoint-3;
each resumed run must log the same step and learning rate and the losses of steps 4-6 of the
writer's own uninterrupted run, and end with its weights, within the fp32 tolerances of
ckpt_resume.py (loss rtol 1e-5; weights rtol 1e-4, atol 1e-6: the two sides run the same maths
with their own kernels). The Trainer draws zrt-train's batches: its sampler is torch's
DistributedSampler(shuffle, seed 42), as zrt-train's.

    python tests/peers/hf_ckpt_resume.py --bin build/bin
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import ckpt_common as cc
from peer_launch import free_port

HERE = os.path.dirname(os.path.abspath(__file__))


def hf_run(args):
    """One Trainer run in this process: output_dir args.out, resuming from args.resume if set."""
    os.environ.update(DS_ACCELERATOR="cpu", RANK="0", LOCAL_RANK="0", WORLD_SIZE="1",
                      LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
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
            return torch.utils.data.DistributedSampler(self.train_dataset, num_replicas=1, rank=0,
                                                       shuffle=True, seed=cc.SEED)

    torch.manual_seed(cc.SEED)
    targs = TrainingArguments(
        output_dir=args.out, deepspeed=cc.ds_config(2, 1), use_cpu=True,
        per_device_train_batch_size=cc.MICRO, max_steps=cc.TOTAL_STEPS, learning_rate=cc.LR,
        weight_decay=0.01, warmup_steps=2, save_steps=cc.SAVE_AT, logging_steps=1,
        seed=cc.SEED, report_to="none", save_only_model=False)
    trainer = SamplerTrainer(model=HfMlp(cc.WIDTH, cc.LAYERS), args=targs, train_dataset=Data())
    trainer.train(resume_from_checkpoint=args.resume)


def run_hf(out, resume=None, timeout=300):
    cmd = [sys.executable, os.path.abspath(__file__), "--hf-run", "--out", out]
    run = subprocess.run(cmd + (["--resume", resume] if resume else []), capture_output=True,
                         text=True, timeout=timeout, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if run.returncode != 0:
        raise RuntimeError(f"the Trainer failed ({run.returncode}): {' '.join(cmd)}\n"
                           + run.stdout[-3000:] + run.stderr[-5000:])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", help="ZeroRT's build/bin (required)")
    parser.add_argument("--hf-run", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--resume", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.hf_run:
        hf_run(args)
        return 0
    if not args.bin:
        parser.error("--bin is required")
    from ckpt_resume import compare
    fails = []
    with tempfile.TemporaryDirectory(prefix="zrt_hf_resume_") as tmp:
        config = os.path.join(tmp, "ds.json")
        with open(config, "w") as f:
            json.dump(cc.ds_config(2, 1), f)
        zrt, hf = os.path.join(tmp, "zrt"), os.path.join(tmp, "hf")
        cc.run_zrt(args.bin, 1, cc.zrt_train_args(config, zrt))
        run_hf(hf)
        hf_from_zrt = os.path.join(tmp, "hf_from_zrt")
        run_hf(hf_from_zrt, os.path.join(zrt, f"checkpoint-{cc.SAVE_AT}"))
        zrt_from_hf = os.path.join(tmp, "zrt_from_hf")
        cc.run_zrt(args.bin, 1, cc.zrt_train_args(config, zrt_from_hf) + [
            "--resume_from_checkpoint", os.path.join(hf, f"checkpoint-{cc.SAVE_AT}")])
        last = f"checkpoint-{cc.TOTAL_STEPS}"
        for what, resumed, writer in (("zrt-train checkpoint -> transformers Trainer",
                                       hf_from_zrt, zrt),
                                      ("transformers Trainer checkpoint -> zrt-train",
                                       zrt_from_hf, hf)):
            state = os.path.join(resumed, last, "trainer_state.json")
            fails += compare(what, False, cc.logged(state, cc.SAVE_AT + 1),
                             cc.logged(os.path.join(writer, last, "trainer_state.json"),
                                       cc.SAVE_AT + 1),
                             cc.ds_to_fp32(os.path.join(resumed, last)),
                             cc.ds_to_fp32(os.path.join(writer, last)))
            with open(state) as f:
                step = json.load(f)["global_step"]
            if step != cc.TOTAL_STEPS:
                fails.append(f"{what}: ended at step {step}, not {cc.TOTAL_STEPS}")
    for f in fails:
        print("hf_ckpt_resume: " + f)
    print("hf_ckpt_resume: " + ("OK" if not fails else f"FAILED ({len(fails)})"))
    return 0 if not fails else 1


if __name__ == "__main__":
    sys.exit(main())
