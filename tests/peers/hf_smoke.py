"""Smoke test of transformers + accelerate + DeepSpeed on this CPU machine (label `peer`).

1. HfTrainerDeepSpeedConfig, made by TrainingArguments(deepspeed=...) itself, fills the "auto"
   values of a config (trainer_config_process, then trainer_config_finalize with a model that has
   config.hidden_size) and raises on a mismatch; TrainingArguments refuses the logging/save step
   values that zrt-train refuses, and accepts the others.
2. transformers' Trainer trains a tiny model for a few steps through its DeepSpeed integration
   (ZeRO-2, DeepSpeed's CPU accelerator and gloo), and the loss falls.

One process (world size 1); the env:// rendezvous variables are set here.

    python tests/peers/hf_smoke.py
"""
import argparse
import dataclasses
import json
import os
import socket
import subprocess
import sys
import tempfile


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


os.environ.update(DS_ACCELERATOR="cpu", RANK="0", LOCAL_RANK="0", WORLD_SIZE="1",
                  LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
                  HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import PretrainedConfig, PreTrainedModel, Trainer, TrainingArguments  # noqa: E402
from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig  # noqa: E402


class TinyConfig(PretrainedConfig):
    model_type = "zrt_tiny"

    def __init__(self, hidden_size=16, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size


class TinyRegressor(PreTrainedModel):
    config_class = TinyConfig

    def __init__(self, config):
        super().__init__(config)
        h = config.hidden_size
        self.net = torch.nn.Sequential(torch.nn.Linear(8, h), torch.nn.Tanh(), torch.nn.Linear(h, 1))
        self.post_init()

    def forward(self, x, labels=None):
        out = self.net(x)
        loss = None if labels is None else torch.nn.functional.mse_loss(out, labels)
        return {"loss": loss, "logits": out}


class Data(torch.utils.data.Dataset):
    def __init__(self, n=64):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 8, generator=g)
        self.y = self.x[:, :2].sum(dim=1, keepdim=True)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"x": self.x[i], "labels": self.y[i]}


def config(stage):
    return {
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "train_batch_size": "auto",
        "gradient_clipping": "auto",
        "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                                  "weight_decay": "auto"}},
        "scheduler": {"type": "WarmupDecayLR",
                      "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                                 "warmup_num_steps": "auto", "total_num_steps": "auto"}},
        "zero_optimization": {"stage": stage, "reduce_bucket_size": "auto"},
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--zrt_config", required=True, help="ZeroRT's zrt-config binary")
    cli = parser.parse_args()
    failures = []
    with tempfile.TemporaryDirectory(prefix="zrt_hf_smoke_") as out:
        # 1. The auto rules, run by transformers itself.
        args = TrainingArguments(output_dir=out, deepspeed=config(2), per_device_train_batch_size=4,
                                 gradient_accumulation_steps=2, learning_rate=3e-3,
                                 max_steps=12, warmup_steps=3, logging_steps=4, save_strategy="no",
                                 report_to=[], use_cpu=True)
        ds = args.hf_deepspeed_config
        assert isinstance(ds, HfTrainerDeepSpeedConfig), type(ds)
        model = TinyRegressor(TinyConfig(hidden_size=16))
        ds.trainer_config_finalize(args, model, num_training_steps=12)
        got = {
            "train_batch_size": ds.get_value("train_batch_size"),
            "train_micro_batch_size_per_gpu": ds.get_value("train_micro_batch_size_per_gpu"),
            "optimizer.params.lr": ds.get_value("optimizer.params.lr"),
            "zero_optimization.reduce_bucket_size": ds.get_value("zero_optimization.reduce_bucket_size"),
            "scheduler.params.total_num_steps": ds.get_value("scheduler.params.total_num_steps"),
            "scheduler.params.warmup_num_steps": ds.get_value("scheduler.params.warmup_num_steps"),
        }
        want = {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 4,
                "optimizer.params.lr": 3e-3, "zero_optimization.reduce_bucket_size": 256,
                "scheduler.params.total_num_steps": 12, "scheduler.params.warmup_num_steps": 3}
        for k, v in want.items():
            if got[k] != v:
                failures.append(f"{k}: {got[k]} != {v}")
        mismatch = HfTrainerDeepSpeedConfig(dict(config(2), train_micro_batch_size_per_gpu=5))
        try:
            mismatch.trainer_config_process(args)
            mismatch.trainer_config_finalize(args, model, 12)
            failures.append("a mismatching train_micro_batch_size_per_gpu was not rejected")
        except ValueError as e:
            if "train_micro_batch_size_per_gpu" not in str(e):
                failures.append(f"mismatch error does not name the key: {e}")
        print(f"hf_smoke: auto rules: {got}")

        # The TrainingArguments checks, differentially: transformers' TrainingArguments and
        # ZeroRT's parser (zrt-config resolve, which every ZeroRT tool shares) on the same
        # arguments must refuse the same ones and agree on what the accepted ones mean.
        cfg_path = os.path.join(out, "ds.json")
        with open(cfg_path, "w") as f:
            json.dump(config(2), f)
        cases = [
            {"logging_steps": 0}, {"logging_steps": 2.5}, {"save_steps": 7.5}, {"save_steps": 0},
            {"logging_steps": 0.25}, {"logging_strategy": "no", "logging_steps": 0},
            {"eval_strategy": "steps", "logging_steps": 0},
            {"eval_strategy": "steps"}, {"eval_strategy": "sometimes"},
            {"eval_strategy": "steps", "eval_steps": 2.5},
            {"load_best_model_at_end": True, "eval_strategy": "epoch", "save_strategy": "steps"},
            {"load_best_model_at_end": True, "eval_strategy": "steps", "eval_steps": 30,
             "save_steps": 50},
            {"load_best_model_at_end": True, "eval_strategy": "steps", "eval_steps": 25,
             "save_steps": 50},
            {"load_best_model_at_end": True, "eval_strategy": "epoch", "save_strategy": "best"},
            {"save_strategy": "best", "eval_strategy": "steps"},
            {"save_strategy": "sometimes"}, {"metric_for_best_model": "accuracy"},
            {"report_to": "tensorboard"}, {"logging_first_step": True, "run_name": "r1"},
        ]
        for kw in cases:
            try:
                hf = TrainingArguments(output_dir=out, use_cpu=True, **kw)
                hf_refused = False
            except ValueError:
                hf_refused = True
            flags = []
            for k, v in kw.items():
                flags += [f"--{k}", str(v).lower() if isinstance(v, bool) else str(v)]
            run = subprocess.run([cli.zrt_config, "resolve", "--deepspeed", cfg_path,
                                  "--hidden_size", "16", "--max_steps", "12"] + flags,
                                 capture_output=True, text=True)
            zrt_refused = run.returncode == 1
            if run.returncode not in (0, 1):
                failures.append(f"zrt-config resolve {flags}: exit {run.returncode}: "
                                f"{run.stderr.strip()[-300:]}")
            elif hf_refused != zrt_refused:
                failures.append(f"{kw}: transformers refused={hf_refused}, ZeroRT "
                                f"refused={zrt_refused} ({run.stderr.strip()[-200:]})")
        print(f"hf_smoke: {len(cases)} TrainingArguments cases refused or accepted alike")
        # Every TrainingArguments field is a ZeroRT flag (supported, or accepted with a warning).
        helptext = subprocess.run([cli.zrt_config, "resolve", "--help"], capture_output=True,
                                  text=True).stdout
        fields = [f.name for f in dataclasses.fields(TrainingArguments) if f.init]
        missing = [n for n in fields if f"--{n} " not in helptext and f"--{n}\n" not in helptext]
        if missing:
            failures.append(f"TrainingArguments fields that ZeroRT does not accept: {missing}")
        print(f"hf_smoke: all {len(fields)} TrainingArguments fields of transformers "
              f"{transformers.__version__} are ZeroRT flags" if not missing else
              f"hf_smoke: {len(missing)} fields missing")

        # 2. The Trainer trains through DeepSpeed (its own TrainingArguments: one set per process
        # is how the Trainer is used, and it owns the DeepSpeed config object it made). Per-batch
        # losses are noisy on this tiny problem: judge by the loss on the whole data set.
        data = Data()

        def full_loss(m):
            with torch.no_grad():
                return torch.nn.functional.mse_loss(m(data.x)["logits"], data.y).item()

        before = full_loss(model)
        train_args = TrainingArguments(output_dir=out, deepspeed=config(2),
                                       per_device_train_batch_size=4, learning_rate=1e-2,
                                       max_steps=48, warmup_steps=2, logging_steps=12,
                                       save_strategy="no", report_to=[], use_cpu=True,
                                       disable_tqdm=True)
        trainer = Trainer(model=model, args=train_args, train_dataset=data)
        trainer.train()
        after = full_loss(trainer.model)
        print(f"hf_smoke: Trainer + DeepSpeed ZeRO-2 ({type(trainer.deepspeed).__name__}): "
              f"loss on the data {before:.4f} -> {after:.4f}")
        if type(trainer.deepspeed).__name__ != "DeepSpeedEngine":
            failures.append(f"the Trainer did not use DeepSpeed ({type(trainer.deepspeed)})")
        if not after < 0.5 * before:
            failures.append(f"loss did not fall: {before} -> {after}")
    print(f"hf_smoke: transformers {transformers.__version__}: "
          + ("OK" if not failures else "FAILED:\n  " + "\n  ".join(failures)))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
