"""LoRA under ZeRO-3 against PEFT + transformers' Trainer + DeepSpeed (issue 50 section 3; label
`peer`).

The inputs are hf_clm.py's run 1 (its LLaMA-3 folder, tokenizer and data.jsonl), and a starting
adapter made here by PEFT itself: get_peft_model on that folder (r 4, alpha 8, q_proj v_proj
o_proj down_proj, no dropout: the two sides' dropout masks could not agree), its lora_B drawn
non-zero so that both factors train from step 1, saved with save_pretrained.

The Trainer side: PeftModel.from_pretrained(base, adapter0, is_trainable=True), run_clm's blocks,
transformers' Trainer with DeepSpeed ZeRO-3 (the frozen base partitioned by DeepSpeed) on 2 gloo
ranks, then trainer.save_model: PEFT's adapter folder. zrt-train gets run_clm's flags and
--adapter_name_or_path adapter0: the same adapters on its ZeRO-3 partitioned frozen base.

Checks, per run (plain, and with gradient checkpointing on both sides):
 - the loss and learning rate of every step agree (hf_clm.py's fp32 tolerance);
 - the saved adapters hold the same tensors under the same names, within 1e-4 (PEFT's key names;
   adapter_config.json read back by PEFT's LoraConfig);
 - PEFT reads ZeroRT's folder: PeftModel.from_pretrained(base, zrt's output) gives the logits of
   PeftModel.from_pretrained(base, the Trainer's), within hf_clm's logits tolerance;
 - (plain run) resumes, the frozen base coming back from DeepSpeed's frozen_param_fragments:
   zrt-train resumed from its own checkpoint-3 ends with an adapter bitwise equal to the run that
   went straight; zrt-train resumed from the Trainer's checkpoint-3 (DeepSpeed's files of a
   PeftModel, which the Trainer saves without its frozen parameters) ends within the adapter
   tolerance of the Trainer's straight run, with the same losses for steps 4-6; and the Trainer
   resumed from zrt-train's checkpoint-3 (its files named as DeepSpeed names a PeftModel's) does
   the same;
 - (plain run) the resumed run ends with --merge_adapter: its output folder, read by
   from_pretrained, holds the tensors of PEFT's merge_and_unload() of its adapter (saved in
   output/adapter) and gives its logits; zrt-generate serves the base folder with that adapter on
   2 ranks (ZeRO-3, every layer gathered and released) with PeftModel's logits.

    python tests/peers/hf_lora.py --bin build/bin [--keep DIR]
"""
import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ckpt_common as cc  # noqa: E402
import hf_clm  # noqa: E402
from peer_launch import run_ranks  # noqa: E402

LORA = dict(r=4, lora_alpha=8, lora_dropout=0.0,
            target_modules=["q_proj", "v_proj", "o_proj", "down_proj"])
RUN = dict(hf_clm.RUN, name="lora", steps=6, save_steps=None, lr=5e-3)
CHECKPOINTING_RUN = dict(RUN, name="lora_checkpointing", checkpointing=True)
ADAPTER_ATOL = 1e-4


def make_adapter(tmp):
    """PEFT's own starting adapter for the folder (lora_B non-zero)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    base = AutoModelForCausalLM.from_pretrained(os.path.join(tmp, "model"))
    torch.manual_seed(5)
    model = get_peft_model(base, LoraConfig(task_type="CAUSAL_LM", **LORA))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    model.save_pretrained(os.path.join(tmp, "adapter0"))


def trainer_worker(tmp, resume=None):
    """One rank of the PEFT + Trainer + DeepSpeed run (started by run_ranks); it saves
    checkpoint-3 too. With `resume`, train(resume_from_checkpoint=resume) into hf_resumed."""
    import torch
    from peft import PeftModel
    from transformers import (AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments,
                              default_data_collator)
    torch.set_num_threads(1)
    with open(os.path.join(tmp, "run.json")) as f:
        run = json.load(f)
    folder = os.path.join(tmp, "model")
    base = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="sdpa")
    model = PeftModel.from_pretrained(base, os.path.join(tmp, "adapter0"), is_trainable=True)
    args = TrainingArguments(
        output_dir=os.path.join(tmp, "hf_resumed" if resume else "hf"),
        deepspeed=os.path.join(tmp, "ds.json"),
        per_device_train_batch_size=run["micro"], max_steps=run["steps"], learning_rate=run["lr"],
        warmup_steps=2, weight_decay=0.0, max_grad_norm=1.0, seed=run["seed"], logging_steps=1,
        save_strategy="no" if resume else "steps", save_steps=3, report_to=[], use_cpu=True,
        disable_tqdm=True,
        gradient_checkpointing=run.get("checkpointing", False),
        gradient_checkpointing_kwargs={"use_reentrant": False})
    tokenizer = AutoTokenizer.from_pretrained(folder)
    train_docs, _ = hf_clm.run_clm_documents(tmp, run)
    train = hf_clm.run_clm_blocks(tokenizer, train_docs, run["block"])

    trainer = Trainer(model=model, args=args, train_dataset=hf_clm.labelled_blocks(train),
                      data_collator=default_data_collator)
    trainer.train(resume_from_checkpoint=resume)
    out = os.path.join(tmp, "hf_resumed_adapter" if resume else "hf_adapter")
    trainer.save_model(out)
    if int(os.environ["RANK"]) == 0:
        with open(os.path.join(out, "hf_result.json"), "w") as f:
            json.dump({"log": trainer.state.log_history}, f)


def zrt_argv(tmp, run, out):
    argv = hf_clm.zrt_argv(tmp, run, out)
    do_eval = argv.index("--do_eval")
    return argv[:do_eval] + argv[do_eval + 1:] + [
        "--adapter_name_or_path", os.path.join(tmp, "adapter0")]


def adapters_close(a_dir, b_dir):
    """(same names, max |difference|) of two adapter_model.safetensors."""
    from safetensors.torch import load_file
    a = load_file(os.path.join(a_dir, "adapter_model.safetensors"))
    b = load_file(os.path.join(b_dir, "adapter_model.safetensors"))
    worst = max((a[k].float() - b[k].float()).abs().max().item() for k in a if k in b)
    return sorted(a) == sorted(b), worst


PROMPT = [5, 17, 42, 9, 101, 77, 3, 250, 11, 64]


def peft_model(tmp, adapter):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM
    base = AutoModelForCausalLM.from_pretrained(os.path.join(tmp, "model"))
    return PeftModel.from_pretrained(base, adapter).eval()


def logits_of(model):
    import torch
    with torch.no_grad():
        return model(torch.tensor([PROMPT])).logits


def peft_logits(tmp, adapter):
    return logits_of(peft_model(tmp, adapter))


def check_merged_and_served(bindir, tmp, out):
    """--merge_adapter's folder against PEFT's merge_and_unload, and zrt-generate with the
    adapter against PeftModel."""
    import subprocess
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM
    adapter = os.path.join(out, "adapter")
    peft = peft_model(tmp, adapter)
    want_logits = logits_of(peft)
    merged = peft.merge_and_unload().state_dict()
    loaded = AutoModelForCausalLM.from_pretrained(out).eval()
    mine = loaded.state_dict()
    same_names = sorted(mine) == sorted(merged)
    worst = max((mine[k] - merged[k]).abs().max().item() for k in merged if k in mine)
    merged_logits = (logits_of(loaded) - want_logits).abs().max().item()
    gen = os.path.join(tmp, "generate")
    os.makedirs(gen, exist_ok=True)
    cmd = [os.path.join(bindir, "zrt-launch"), "--np", "2", "--timeout", "300", "--",
           os.path.join(bindir, "zrt-generate"), "--model_name_or_path", os.path.join(tmp, "model"),
           "--adapter_name_or_path", adapter, "--prompt_ids", ",".join(map(str, PROMPT)),
           "--max_new_tokens", "1", "--persistence_threshold", "64",
           "--output", os.path.join(gen, "ids.jsonl"),
           "--logits_out", os.path.join(gen, "logits.safetensors")]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    if run.returncode != 0:
        print(run.stdout + run.stderr)
        raise SystemExit(f"zrt-generate failed ({run.returncode}): {' '.join(cmd)}")
    served = load_file(os.path.join(gen, "logits.safetensors"))["prompt.0"]
    served_diff = (served - want_logits[0]).abs().max().item()
    print(f"--merge_adapter: {'same tensor names' if same_names else 'DIFFERENT NAMES'} as PEFT's "
          f"merge_and_unload, within {worst:.2e}; from_pretrained logits within "
          f"{merged_logits:.2e} of PeftModel's; zrt-generate with the adapter on 2 ranks within "
          f"{served_diff:.2e} (tolerance {hf_clm.LOGITS_ATOL:g})")
    return same_names and worst <= 1e-6 and merged_logits <= hf_clm.LOGITS_ATOL and \
        served_diff <= hf_clm.LOGITS_ATOL


def check_merge_needs_training(bindir, tmp, run):
    """--merge_adapter on a command line that does not train: a usage error naming it."""
    import subprocess
    argv = zrt_argv(tmp, run, os.path.join(tmp, "no_merge"))
    argv.remove("--do_train")
    cmd = [os.path.join(bindir, "zrt-launch"), "--np", "1", "--timeout", "120", "--",
           os.path.join(bindir, "zrt-train")] + argv + ["--do_eval", "--merge_adapter"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=200)
    ok = done.returncode == 1 and "--merge_adapter merges the adapter after training" in (
        done.stdout + done.stderr) and not os.path.exists(os.path.join(tmp, "no_merge", "adapter"))
    print(f"--merge_adapter without training: exit {done.returncode}, "
          f"{'refused by name' if ok else 'NOT REFUSED AS EXPECTED'}")
    if not ok:
        print(done.stdout[-2000:] + done.stderr[-2000:])
    return ok


def check(tmp, run, zrt_out):
    from peft import LoraConfig
    with open(os.path.join(tmp, "hf_adapter", "hf_result.json")) as f:
        ok, worst = hf_clm.compare_steps(zrt_out, json.load(f)["log"], run["steps"])
    config = LoraConfig.from_pretrained(zrt_out)
    config_ok = (config.r, config.lora_alpha, sorted(config.target_modules)) == (
        LORA["r"], LORA["lora_alpha"], sorted(LORA["target_modules"]))
    same_names, diff = adapters_close(zrt_out, os.path.join(tmp, "hf_adapter"))
    logits = (peft_logits(tmp, zrt_out) - peft_logits(tmp, os.path.join(tmp, "hf_adapter")))
    logits_diff = logits.abs().max().item()
    print(f"{run['name']}: losses within {worst:.2e} (tolerance {hf_clm.LOSS_RTOL:g}); adapter "
          f"config {'read back' if config_ok else 'DIFFERENT'} by PEFT; tensors "
          f"{'same names' if same_names else 'DIFFERENT NAMES'}, within {diff:.2e} (tolerance "
          f"{ADAPTER_ATOL:g}); PeftModel logits within {logits_diff:.2e} (tolerance "
          f"{hf_clm.LOGITS_ATOL:g})")
    return ok and config_ok and same_names and diff <= ADAPTER_ATOL and \
        logits_diff <= hf_clm.LOGITS_ATOL


def losses_of(path, key):
    """step -> loss of a trainer_state.json ("log_history") or an hf_result.json ("log")."""
    with open(path) as f:
        return {e["step"]: e["loss"] for e in json.load(f)[key] if "loss" in e}


def check_resume(bindir, tmp, run, straight):
    """Checkpoints both ways (see the file comment)."""
    from safetensors.torch import load_file
    ok = True
    out = os.path.join(tmp, "zrt_resumed")
    argv = zrt_argv(tmp, run, out)
    at = argv.index("--save_strategy")
    argv[at + 1], argv[argv.index("--save_steps") + 1] = "steps", "3"
    cc.run_zrt(bindir, run["world"], argv)
    cc.run_zrt(bindir, run["world"], argv + ["--resume_from_checkpoint",
                                            os.path.join(out, "checkpoint-3"), "--merge_adapter"])
    a = load_file(os.path.join(out, "adapter", "adapter_model.safetensors"))
    b = load_file(os.path.join(straight, "adapter_model.safetensors"))
    same = sorted(a) == sorted(b) and all((a[k] == b[k]).all().item() for k in a)
    print(f"zrt-train from its checkpoint-3: final adapter {'bitwise equal' if same else 'DIFFERENT'}"
          " to the straight run's")
    ok &= same and check_merged_and_served(bindir, tmp, out)
    # The Trainer (DeepSpeed's engine around the PeftModel) from zrt-train's checkpoint-3.
    if run_ranks([os.path.abspath(__file__), "--worker", tmp, "--resume",
                  os.path.join(out, "checkpoint-3")], run["world"], 600, "hf_lora_resume"):
        return False
    resumed = losses_of(os.path.join(tmp, "hf_resumed_adapter", "hf_result.json"), "log")
    want = losses_of(os.path.join(tmp, "hf_adapter", "hf_result.json"), "log")
    same_names, diff = adapters_close(os.path.join(tmp, "hf_resumed_adapter"),
                                      os.path.join(tmp, "hf_adapter"))
    steps = sorted(s for s in resumed if s > 3)
    worst = max(abs(resumed[s] - want[s]) / abs(want[s]) for s in steps) if steps else float("inf")
    print(f"the Trainer from zrt-train's checkpoint-3: steps {steps}, losses within {worst:.2e} of "
          f"its straight run; final adapter within {diff:.2e}")
    ok &= same_names and steps == [4, 5, 6] and worst <= hf_clm.LOSS_RTOL and diff <= ADAPTER_ATOL
    # zrt-train from the Trainer's checkpoint-3.
    ds_out = os.path.join(tmp, "zrt_from_hf")
    argv = zrt_argv(tmp, run, ds_out) + ["--resume_from_checkpoint",
                                         os.path.join(tmp, "hf", "checkpoint-3")]
    log = cc.run_zrt(bindir, run["world"], argv, with_log=True)
    resumed = losses_of(os.path.join(ds_out, "trainer_state.json"), "log_history")
    want = losses_of(os.path.join(tmp, "hf_adapter", "hf_result.json"), "log")
    same_names, diff = adapters_close(ds_out, os.path.join(tmp, "hf_adapter"))
    steps = sorted(s for s in resumed if s > 3)
    worst = max(abs(resumed[s] - want[s]) / abs(want[s]) for s in steps) if steps else float("inf")
    # The Trainer saves a PeftModel with exclude_frozen_parameters: the base is not in its
    # checkpoint, so zrt-train keeps the one --model_name_or_path gave, and says so.
    kept = "no values for the frozen parameters" in log
    print(f"zrt-train from the Trainer's checkpoint-3: steps {steps}, losses within {worst:.2e} of "
          f"the Trainer's straight run; final adapter within {diff:.2e}; the frozen base, which "
          f"the Trainer leaves out, {'kept with a warning' if kept else 'NOT REPORTED'}")
    ok &= same_names and steps == [4, 5, 6] and worst <= hf_clm.LOSS_RTOL and \
        diff <= ADAPTER_ATOL and kept
    return ok


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", help="ZeroRT's build/bin")
    parser.add_argument("--keep", help="keep the model, data and outputs in this folder")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--resume", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return trainer_worker(args.worker, args.resume)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    ok = True
    for run in (RUN, CHECKPOINTING_RUN):
        with tempfile.TemporaryDirectory(prefix="zrt_hf_lora_") as scratch:
            tmp = os.path.join(args.keep, run["name"]) if args.keep else scratch
            os.makedirs(tmp, exist_ok=True)
            hf_clm.make_inputs(tmp, run)
            make_adapter(tmp)
            zrt_out = os.path.join(tmp, "zrt")
            cc.run_zrt(args.bin, run["world"], zrt_argv(tmp, run, zrt_out))
            if run_ranks([os.path.abspath(__file__), "--worker", tmp], run["world"], 600, "hf_lora"):
                return 1
            ok &= check(tmp, run, zrt_out)
            if not run.get("checkpointing"):
                ok &= check_resume(args.bin, tmp, run, zrt_out)
                ok &= check_merge_needs_training(args.bin, tmp, run)
    print("hf_lora: " + ("OK" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
