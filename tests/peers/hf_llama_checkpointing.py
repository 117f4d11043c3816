"""Activation checkpointing on a transformers-made LLaMA: zrt-train --gradient_checkpointing
against transformers' Trainer + DeepSpeed with gradient_checkpointing=True (issue 34 section 3;
label `peer`).

One tiny LlamaForCausalLM (grouped-query attention, untied, odd sizes) is made by transformers
and saved; both sides fine-tune that folder at ZeRO-3 on 2 ranks for STEPS optimizer steps
(micro-batch 2, gradient accumulation 2, AdamW + WarmupDecayLR from a DeepSpeed config whose
values are "auto", filled by each side's HF rules from the same arguments):
  * zrt-train --model llama --model_name_or_path DIR --gradient_checkpointing (every decoder layer
    recomputed in backward, ZeRO-3 regathering its parameters), and the same run without the flag;
  * the Trainer (its DeepSpeed integration, gloo, DeepSpeed's CPU accelerator) with
    gradient_checkpointing=True, {"use_reentrant": false}: torch.utils.checkpoint around every
    decoder layer.
The data is zrt-train's for --train_file: the file's first 90% of bytes, example i the bytes
[i*16, i*16+17) taken modulo the vocabulary; the Trainer gets each as input_ids = labels (its
causal-LM loss shifts them, so both sides score the 16 logits against the next 16 bytes), drawn
by torch's DistributedSampler(shuffle, seed 42) on each rank, as zrt-train's sampler draws them.

Checks: the logged loss and learning rate of every step equal the Trainer's within the fp32
tolerance of training_parity.py (loss rtol 1e-5, lr exact); zrt-train's losses with and without
checkpointing are bitwise equal (the recompute replays the same fp32 maths); and the trained
weights of both zrt-train runs are bitwise equal (HF folders saved at the end).

    python tests/peers/hf_llama_checkpointing.py --bin build/bin [--keep DIR]
"""
import argparse
import json
import os
import random
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ckpt_common as cc  # noqa: E402
from peer_launch import run_ranks  # noqa: E402

STEPS, MICRO, GA, CONTEXT, LR, SEED, WORLD = 6, 2, 2, 16, 1e-3, 42, 2
LOSS_RTOL = 1e-5
MODEL = dict(vocab_size=103, hidden_size=40, intermediate_size=58, num_hidden_layers=3,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
             rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=None,
             eos_token_id=None, pad_token_id=None)
DS_CONFIG = {
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
    "train_batch_size": "auto",
    "gradient_clipping": "auto",
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                              "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupDecayLR",
                  "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                             "warmup_num_steps": "auto", "total_num_steps": "auto"}},
    "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
                          "reduce_bucket_size": 2048, "stage3_prefetch_bucket_size": 2048},
    "steps_per_print": 1000,
}


def make_inputs(tmp):
    """The LLaMA folder, the DeepSpeed config and a corpus of seeded random bytes."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(5)
    folder = os.path.join(tmp, "llama")
    LlamaForCausalLM(LlamaConfig(**MODEL)).save_pretrained(folder)
    with open(os.path.join(tmp, "ds.json"), "w") as f:
        json.dump(DS_CONFIG, f)
    rng = random.Random(9)
    with open(os.path.join(tmp, "corpus.bin"), "wb") as f:
        f.write(bytes(rng.randrange(256) for _ in range(4000)))
    return folder


def trainer_worker(tmp):
    """One rank of the Trainer run (started by run_ranks)."""
    import torch
    from transformers import LlamaForCausalLM, Trainer, TrainingArguments
    torch.set_num_threads(1)
    with open(os.path.join(tmp, "corpus.bin"), "rb") as f:
        data = f.read()
    train = torch.tensor(list(data[:len(data) * 9 // 10]), dtype=torch.long)
    vocab = MODEL["vocab_size"]

    class Blocks(torch.utils.data.Dataset):
        def __len__(self):
            return (train.numel() - 1) // CONTEXT

        def __getitem__(self, i):
            ids = train[i * CONTEXT:i * CONTEXT + CONTEXT + 1].remainder(vocab)
            return {"input_ids": ids, "labels": ids.clone()}

    class SamplerTrainer(Trainer):
        def get_train_dataloader(self):  # zrt-train's draw: DistributedSampler(shuffle, seed)
            sampler = torch.utils.data.DistributedSampler(
                self.train_dataset, num_replicas=WORLD, rank=int(os.environ["RANK"]),
                shuffle=True, seed=SEED)
            return torch.utils.data.DataLoader(self.train_dataset, batch_size=MICRO,
                                               sampler=sampler, drop_last=False)

    model = LlamaForCausalLM.from_pretrained(os.path.join(tmp, "llama"),
                                             attn_implementation="sdpa")
    args = TrainingArguments(
        output_dir=os.path.join(tmp, "hf"), deepspeed=os.path.join(tmp, "ds.json"),
        per_device_train_batch_size=MICRO, gradient_accumulation_steps=GA, max_steps=STEPS,
        learning_rate=LR, warmup_steps=2, weight_decay=0.0, max_grad_norm=1.0, seed=SEED,
        logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True,
        gradient_checkpointing=True, gradient_checkpointing_kwargs={"use_reentrant": False})
    trainer = SamplerTrainer(model=model, args=args, train_dataset=Blocks())
    trainer.train()
    if not model.is_gradient_checkpointing:
        raise SystemExit("the Trainer's model did not have gradient checkpointing on")
    if int(os.environ["RANK"]) == 0:
        with open(os.path.join(tmp, "hf_log.json"), "w") as f:
            json.dump(trainer.state.log_history, f)


def zrt_train(args, tmp, name, checkpointing):
    out = os.path.join(tmp, name)
    argv = ["--model", "llama", "--model_name_or_path", os.path.join(tmp, "llama"),
            "--train_file", os.path.join(tmp, "corpus.bin"),
            "--deepspeed", os.path.join(tmp, "ds.json"), "--output_dir", out,
            "--max_steps", str(STEPS), "--per_device_train_batch_size", str(MICRO),
            "--gradient_accumulation_steps", str(GA), "--learning_rate", str(LR),
            "--warmup_steps", "2", "--weight_decay", "0", "--max_grad_norm", "1.0",
            "--context", str(CONTEXT), "--seed", str(SEED), "--logging_steps", "1",
            "--save_strategy", "no", "--report_to", "none"]
    cc.run_zrt(args.bin, WORLD, argv + (["--gradient_checkpointing"] if checkpointing else []))
    with open(os.path.join(out, "trainer_state.json")) as f:
        return out, json.load(f)["log_history"]


def steps(history):
    """{step: (loss, learning_rate)} of the training log entries."""
    return {e["step"]: (e["loss"], e["learning_rate"]) for e in history if "loss" in e}


def weights(folder):
    from safetensors.torch import load_file
    state = {}
    for f in sorted(os.listdir(folder)):
        if f.endswith(".safetensors"):
            state.update(load_file(os.path.join(folder, f)))
    return state


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", help="ZeroRT's build/bin")
    parser.add_argument("--keep", help="keep the model, data and outputs in this folder")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return trainer_worker(args.worker)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory(prefix="zrt_hf_llama_ckpt_") as scratch:
        tmp = args.keep or scratch
        os.makedirs(tmp, exist_ok=True)
        make_inputs(tmp)
        ckpt_out, ckpt_log = zrt_train(args, tmp, "zrt_ckpt", True)
        plain_out, plain_log = zrt_train(args, tmp, "zrt_plain", False)
        if run_ranks([os.path.abspath(__file__), "--worker", tmp], WORLD, 600,
                     "hf_llama_checkpointing"):
            return 1
        with open(os.path.join(tmp, "hf_log.json")) as f:
            hf = steps(json.load(f))
        zrt, plain = steps(ckpt_log), steps(plain_log)
        ok = sorted(zrt) == sorted(hf) == list(range(1, STEPS + 1))
        worst = 0.0
        for step in sorted(hf):
            (zl, zlr), (hl, hlr) = zrt.get(step, (float("nan"),) * 2), hf[step]
            rel = abs(zl - hl) / abs(hl)
            worst = max(worst, rel)
            print(f"step {step}: loss zrt-train {zl:.8f}  Trainer {hl:.8f}  (rel {rel:.2e}); "
                  f"lr {zlr:.6g} / {hlr:.6g}")
            ok &= rel <= LOSS_RTOL and zlr == hlr
        same_loss = zrt == plain
        w_ckpt, w_plain = weights(ckpt_out), weights(plain_out)
        same_weights = (sorted(w_ckpt) == sorted(w_plain) and len(w_ckpt) > 0
                        and all(w_ckpt[k].equal(w_plain[k]) for k in w_ckpt))
        ok &= same_loss and same_weights
        print(f"hf_llama_checkpointing: losses against the Trainer's within {worst:.2e} relative "
              f"(tolerance {LOSS_RTOL:g}); zrt-train with and without checkpointing: losses "
              f"{'bitwise equal' if same_loss else 'DIFFERENT'}, weights "
              f"{'bitwise equal' if same_weights else 'DIFFERENT'}")
    print("hf_llama_checkpointing: " + ("OK" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
