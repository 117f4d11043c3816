"""One rank of the HF Trainer + DeepSpeed side of bench/peers/checkpointing.py: transformers'
LlamaForCausalLM (eager attention, as ZeroRT's LLaMA) from a config, trained by the Trainer with
a DeepSpeed ZeRO-3 config on the CPU (gloo), with or without gradient_checkpointing; writes its
train_runtime, steps and peak RSS to OUT/rank{r}.json.

    python checkpointing_hf_worker.py CONFIG_DIR DS_JSON OUT CONTEXT STEPS CKPT(0|1)
"""
import json
import os
import resource
import sys


def main():
    config_dir, ds_json, out, context, steps, ckpt = sys.argv[1:7]
    context, steps, ckpt = int(context), int(steps), ckpt == "1"
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments
    torch.set_num_threads(1)
    torch.manual_seed(3)
    config = LlamaConfig.from_pretrained(config_dir)
    model = LlamaForCausalLM(config)
    model.config._attn_implementation = "eager"

    class Blocks(torch.utils.data.Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            ids = torch.randint(0, config.vocab_size, (context,), generator=g)
            return {"input_ids": ids, "labels": ids}

    args = TrainingArguments(output_dir=out, deepspeed=ds_json, per_device_train_batch_size=1,
                             max_steps=steps, learning_rate=1e-3, logging_steps=1,
                             save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True,
                             gradient_checkpointing=ckpt,
                             gradient_checkpointing_kwargs={"use_reentrant": False})
    result = Trainer(model=model, args=args, train_dataset=Blocks()).train()
    rank = int(os.environ["RANK"])
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"train_runtime": result.metrics["train_runtime"], "steps": steps,
                   "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}, f)


if __name__ == "__main__":
    main()
