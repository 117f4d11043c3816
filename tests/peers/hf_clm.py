"""zrt-train run as HF's run_clm.py is run, against transformers' Trainer + DeepSpeed ZeRO-3 on the
same folder, data, block size and seed (issue 39 section 4; label `peer`).

The inputs, all made here: a LLaMA-3-style tokenizer.json (byte-level BPE behind LLaMA-3's split
regex, `ignore_merges`, <|begin_of_text|> added by a TemplateProcessing post-processor) trained by
the `tokenizers` package on a seeded corpus; a LlamaForCausalLM with LLaMA-3's rope scaling made by
transformers with that tokenizer's vocabulary; a data.jsonl of RUN's `docs` short documents (some empty,
some non-ASCII) in a "text" field.

The Trainer side is run_clm.py's pipeline: AutoTokenizer.from_pretrained on the folder, every
document tokenized with its special tokens, the first `val_pct` percent of the documents held out
for validation (datasets' "train[:P%]", round(P * N / 100) with Python's rounding; `datasets` is not
in the venv, so the split and run_clm's group_texts, concatenation and cut of 1000 documents at a
time, are written out here), default_data_collator, and the Trainer's own sampling (accelerate's
seeded sampler and batch sharding) at 2 ranks, DeepSpeed ZeRO-3 on gloo.

zrt-train gets the same flags run_clm.py would: --model_name_or_path DIR --train_file data.jsonl
--validation_split_percentage P --block_size N --deepspeed ds.json --do_train --do_eval.

Checks: the SHA-1 of every training and validation block in order equals what zrt-train logs;
the loss and learning rate of every logged step agree (fp32 tolerance of training_parity.py);
eval_loss and perplexity agree; zrt-train's output folder loads in from_pretrained with its
tokenizer, and its logits equal those of the Trainer's saved model. The llama3 run also saves
every 4 steps: its last checkpoint-N is an HF model folder too (from_pretrained, the same logits)
and its zero_to_fp32.py writes the weights model.safetensors holds.

    python tests/peers/hf_clm.py --bin build/bin [--keep DIR]
"""
import argparse
import hashlib
import json
import math
import os
import random
import re
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples"))
import ckpt_common as cc  # noqa: E402
import make_tiny_llama  # noqa: E402
from peer_launch import run_ranks  # noqa: E402

# The run: both sides read it from run.json in the work folder (bench/peers/clm.py sizes it up).
RUN = dict(family="llama3", world=2, micro=2, eval_micro=4, steps=8, save_steps=4, block=24,
           lr=2e-3, seed=42,
           val_pct=7, docs=1310, vocab=300, doc_words=18,
           model=dict(hidden_size=32, intermediate_size=56, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))
# The second run: a Qwen2 folder (NFC tokenizer without BOS, q/k/v biases, tied embeddings) on
# CRLF .txt files with a validation file, at world size 3, without --block_size: run_clm's
# default, the tokenizer's model_max_length (an odd 19 here), with --label_smoothing_factor 0.1
# (transformers' LabelSmoother on the training and evaluation losses).
QWEN2_RUN = dict(RUN, family="qwen2", world=3, block=None, model_max_length=19, docs=700,
                 vocab=280, steps=6, save_steps=None, label_smoothing=0.1)
# The third run: a Qwen2-MoE folder (models/moe.h) on run 1's tokenizer and data: 6 experts, top-2,
# a shared expert, layer 1 dense between two sparse ones, and output_router_logits, so both sides
# add router_aux_loss_coef x the load-balancing loss to every training and evaluation loss, with
# the Trainer's weights (Note [The auxiliary loss in HF's Trainer] in tools/moe_loss.cpp; 2
# accumulation steps), and activation checkpointing on both sides. DeepSpeed gathers each sparse
# block whole (its default leaf modules), ZeroRT each decoder layer.
MOE_RUN = dict(RUN, name="qwen2_moe", model_type="qwen2_moe", steps=6, save_steps=None, accumulation=2,
               checkpointing=True,
               model=dict(hidden_size=32, intermediate_size=40, moe_intermediate_size=20,
                          shared_expert_intermediate_size=28, num_hidden_layers=3,
                          num_attention_heads=4, num_key_value_heads=2, num_experts=6,
                          num_experts_per_tok=2, mlp_only_layers=[1], output_router_logits=True,
                          router_aux_loss_coef=0.05, use_sliding_window=False,
                          max_position_embeddings=64))
# And a Mixtral folder (renormalised top-2 of 4 experts, fp32 routing weights, every layer sparse),
# with average_tokens_across_devices off on both sides (the auxiliary term weighted coef x GA).
MIXTRAL_RUN = dict(MOE_RUN, name="mixtral", model_type="mixtral", accumulation=1, checkpointing=False,
                   average_tokens=False,
                   model=dict(hidden_size=32, intermediate_size=20, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                              num_experts_per_tok=2, output_router_logits=True,
                              router_aux_loss_coef=0.05, max_position_embeddings=64))
# And run 1 with packed documents (Note [run_clm's data] 5 in hf/text_data.h): the same blocks,
# each token's position_ids counted from its document's start (or the block's), a document's first
# token labelled -100, as transformers' DataCollatorWithFlattening labels; transformers masks
# attention across documents from the position_ids (with use_cache off, find_packed_sequence_indices)
# and ZeroRT from the same rule. Activation checkpointing on both sides; average_tokens_across_devices
# off on both (the micro-batches' label counts differ: zrt-train averages the ranks' means).
# zrt-train also computes its loss 7 tokens at a time and its MLPs 5 positions at a time
# (--tiled_loss_tokens, --tiled_mlp_tokens: models/tiled_loss.h, tiled_mlp.h), inside the
# checkpointed layers, which must not move the losses.
PACKED_RUN = dict(RUN, name="packed", packed=True, steps=6, save_steps=None, checkpointing=True,
                  average_tokens=False, tiled_loss=7, tiled_mlp=5)
# The sixth run: Ulysses sequence parallelism, the 24-token blocks split over the 2 ranks of one
# group (zrt-train --sequence_parallel_size 2; the Trainer with accelerate's ParallelismConfig and
# DeepSpeed's Ulysses backend, which needs position_ids in every batch), one sample per step,
# activation checkpointing on both sides.
ULYSSES_RUN = dict(RUN, name="ulysses", sp=2, micro=1, steps=6, save_steps=3, checkpointing=True,
                   average_tokens=False)
LOSS_RTOL, EVAL_RTOL, LOGITS_ATOL = 1e-5, 1e-5, 1e-4
DS_CONFIG = {
    "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
    "train_batch_size": "auto", "gradient_clipping": "auto",
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                              "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupDecayLR",
                  "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                             "warmup_num_steps": "auto", "total_num_steps": "auto"}},
    "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
                          "reduce_bucket_size": 2048, "stage3_prefetch_bucket_size": 2048,
                          "stage3_gather_16bit_weights_on_model_save": True},
    "steps_per_print": 1000,
}
WORDS = ("the cat sat on a warm mat while rain fell over the quiet harbour and gulls cried "
         "ZeRO shards optimizer states across ranks naïve café résumé Zürich 東京 タワー "
         "данные модели 42 1999 3.14159 don't we'll it's I'm they've").split()


def documents(run):
    rng = random.Random(11)
    docs = []
    for i in range(run["docs"]):
        if i % 97 == 5:
            docs.append("")
            continue
        words = [rng.choice(WORDS) for _ in range(rng.randint(2, run["doc_words"]))]
        docs.append(" ".join(words) + rng.choice([".", "!", "?", ",", "\n", "  "]))
    return docs


def make_qwen2_tokenizer(folder, texts, vocab, model_max_length):
    """A Qwen2-style tokenizer.json (NFC, Qwen2's split regex, no BOS) trained by `tokenizers`."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, \
        processors, trainers
    os.makedirs(folder, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(make_tiny_llama.LLAMA3_SPLIT.replace(r"\p{N}{1,3}", r"\p{N}")),
                             behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": None,
                   "eos_token": "<|endoftext|>", "model_max_length": model_max_length}, f)
    eos = tok.token_to_id("<|endoftext|>")
    return tok.get_vocab_size(), None, eos


def make_inputs(tmp, run):
    """The model folder (tokenizer, config, weights), the data, the DeepSpeed config and
    run.json. family "llama3": data.jsonl, split by percentage; "qwen2": train.txt and
    validation.txt (the documents as lines)."""
    import torch
    from transformers import (AutoConfig, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM,
                              Qwen2Config, Qwen2ForCausalLM)
    folder = os.path.join(tmp, "model")
    docs = documents(run)
    torch.manual_seed(3)
    if run["family"] == "llama3" and run.get("model_type"):
        vocab, bos, eos = make_tiny_llama.train_llama3_tokenizer(folder, docs, run["vocab"])
        AutoModelForCausalLM.from_config(AutoConfig.for_model(
            run["model_type"], vocab_size=vocab, **run["model"], tie_word_embeddings=False,
            bos_token_id=bos, eos_token_id=eos, initializer_range=0.2)).save_pretrained(folder)
    if run["family"] == "llama3" and not run.get("model_type"):
        vocab, bos, eos = make_tiny_llama.train_llama3_tokenizer(folder, docs, run["vocab"])
        LlamaForCausalLM(LlamaConfig(
            vocab_size=vocab, **run["model"], tie_word_embeddings=False, bos_token_id=bos,
            eos_token_id=eos, initializer_range=0.2,
            rope_parameters=dict(make_tiny_llama.LLAMA3_ROPE, original_max_position_embeddings=16),
        )).save_pretrained(folder)
    if run["family"] == "llama3":
        with open(os.path.join(tmp, "data.jsonl"), "w", encoding="utf-8") as f:
            for d in docs:
                f.write(json.dumps({"id": len(d), "text": d}, ensure_ascii=False) + "\n")
    else:
        vocab, bos, eos = make_qwen2_tokenizer(folder, docs, run["vocab"], run["model_max_length"])
        Qwen2ForCausalLM(Qwen2Config(
            vocab_size=vocab, **run["model"], tie_word_embeddings=True, bos_token_id=bos,
            eos_token_id=eos, initializer_range=0.2, use_sliding_window=False,
        )).save_pretrained(folder)
        cut = len(docs) // 10
        for name, part in (("validation.txt", docs[:cut]), ("train.txt", docs[cut:])):
            with open(os.path.join(tmp, name), "w", encoding="utf-8", newline="") as f:
                f.write("\r\n".join(part))  # CRLF files: run_clm reads them in text mode
    with open(os.path.join(tmp, "ds.json"), "w") as f:
        json.dump(DS_CONFIG, f)
    with open(os.path.join(tmp, "run.json"), "w") as f:
        json.dump(run, f)
    return folder


def run_clm_documents(tmp, run):
    """(train, validation) documents as run_clm's load_dataset gives them: the "json" loader's
    records, or the "text" loader's lines (text mode, str.splitlines, line breaks kept); without a
    validation file the first `val_pct` percent (datasets' "train[:P%]": round(P * N / 100))."""
    if run["family"] == "llama3":
        with open(os.path.join(tmp, "data.jsonl"), encoding="utf-8") as f:
            docs = [json.loads(line)["text"] for line in f if line.strip()]
        cut = int(round(run["val_pct"] * len(docs) / 100.0))
        return docs[cut:], docs[:cut]
    lines = []
    for name in ("train.txt", "validation.txt"):
        with open(os.path.join(tmp, name), encoding="utf-8") as f:
            lines.append(f.read().splitlines(keepends=True))
    return lines[0], lines[1]


def run_clm_blocks(tokenizer, docs, block, packed=False):
    """run_clm.py's tokenize_function and group_texts (datasets' map, batches of 1000). With
    `packed`, (blocks, positions): each token's position in its document, counted from the block's
    start for the document a block starts inside."""
    blocks, positions = [], []
    for lo in range(0, len(docs), 1000):
        encoded = tokenizer(docs[lo:lo + 1000])["input_ids"]
        ids = [t for d in encoded for t in d]
        starts = [k for d in encoded for k in range(len(d))]  # position in the document
        total = len(ids) // block * block
        blocks += [ids[i:i + block] for i in range(0, total, block)]
        positions += [[min(starts[k], k - i) for k in range(i, i + block)]
                      for i in range(0, total, block)]
    return (blocks, positions) if packed else blocks


def labelled_blocks(blocks, positions=None):
    """run_clm's blocks as the Trainer's dataset: input_ids, and the same ids as labels; with
    `positions`, position_ids too and -100 for each document's first token."""
    import torch

    class Blocks(torch.utils.data.Dataset):
        def __len__(self):
            return len(blocks)

        def __getitem__(self, i):
            if positions is None:
                return {"input_ids": blocks[i], "labels": list(blocks[i])}
            return {"input_ids": blocks[i], "position_ids": positions[i],
                    "labels": [-100 if p == 0 else t for t, p in zip(blocks[i], positions[i])]}

    return Blocks()


def digest(blocks):
    sha = hashlib.sha1()
    for b in blocks:
        sha.update(struct.pack(f"<{len(b)}i", *b))
    return sha.hexdigest()


def sequence_parallel_arguments(run):
    """The Trainer's Ulysses arguments for a run with `sp` (accelerate's ParallelismConfig with
    DeepSpeed's backend), none without."""
    if run.get("sp", 1) == 1:
        return {}
    from accelerate.parallelism_config import ParallelismConfig
    from accelerate.utils import DeepSpeedSequenceParallelConfig
    import deepspeed
    # On CPU nothing initialises deepspeed.comm before accelerate registers Ulysses, whose
    # initialize_sequence_parallel asserts that it is (parallel_state_sp.py:28).
    deepspeed.init_distributed(dist_backend="gloo")
    handler = DeepSpeedSequenceParallelConfig(sp_seq_length=run["block"], sp_seq_length_is_variable=False,
                                              sp_attn_implementation="sdpa")
    return {"parallelism_config": ParallelismConfig(sp_backend="deepspeed", sp_size=run["sp"],
                                                    sp_handler=handler)}


def trainer_worker(tmp):
    """One rank of run_clm.py's Trainer run (started by run_ranks)."""
    import torch
    from transformers import (AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments,
                              default_data_collator)
    torch.set_num_threads(1)
    with open(os.path.join(tmp, "run.json")) as f:
        run = json.load(f)
    folder = os.path.join(tmp, "model")
    # Built before the arguments (whose DeepSpeed config would make from_pretrained construct it
    # under zero.Init before the process group exists), as the other Trainer peers do.
    model = AutoModelForCausalLM.from_pretrained(folder,
                                                 attn_implementation=run.get("attn", "sdpa"))
    args = TrainingArguments(
        output_dir=os.path.join(tmp, "hf"), deepspeed=os.path.join(tmp, "ds.json"),
        per_device_train_batch_size=run["micro"], per_device_eval_batch_size=run["eval_micro"],
        max_steps=run["steps"], learning_rate=run["lr"], warmup_steps=2, weight_decay=0.0,
        max_grad_norm=1.0, seed=run["seed"], logging_steps=1,
        gradient_accumulation_steps=run.get("accumulation", 1), save_strategy="no", report_to=[],
        gradient_checkpointing=run.get("checkpointing", False),
        average_tokens_across_devices=run.get("average_tokens", True),
        use_cpu=True, disable_tqdm=True, label_smoothing_factor=run.get("label_smoothing", 0.0),
        **sequence_parallel_arguments(run))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    train_docs, val_docs = run_clm_documents(tmp, run)
    block = run["block"]
    if block is None:  # run_clm's default
        block = tokenizer.model_max_length
        if block > model.config.max_position_embeddings:
            block = min(1024, model.config.max_position_embeddings)
    packed = run.get("packed", False)
    train, train_pos = run_clm_blocks(tokenizer, train_docs, block, True)
    val, val_pos = run_clm_blocks(tokenizer, val_docs, block, True)
    if packed:
        model.config.use_cache = False  # else transformers masks causally only (a cache is made)

    if not packed and run.get("sp", 1) > 1:  # DeepSpeed's Ulysses wants position_ids in every batch
        train_pos, val_pos, packed = [[list(range(len(b))) for b in x] for x in (train, val)] + [True]
    trainer = Trainer(model=model, args=args,
                      train_dataset=labelled_blocks(train, train_pos if packed else None),
                      eval_dataset=labelled_blocks(val, val_pos if packed else None),
                      data_collator=default_data_collator)
    train_metrics = trainer.train().metrics
    trainer.save_model(os.path.join(tmp, "hf_model"))
    metrics = trainer.evaluate()
    metrics["perplexity"] = math.exp(metrics["eval_loss"])
    if int(os.environ["RANK"]) == 0:
        with open(os.path.join(tmp, "hf_result.json"), "w") as f:
            json.dump({"log": trainer.state.log_history, "eval": metrics, "train": train_metrics,
                       "train_digest": digest(train), "val_digest": digest(val),
                       "blocks": [len(train), len(val)]}, f)


def zrt_argv(tmp, run, out):
    """zrt-train's flags: the ones run_clm.py would get."""
    data = (["--train_file", os.path.join(tmp, "data.jsonl"),
             "--validation_split_percentage", str(run["val_pct"])] if run["family"] == "llama3" else
            ["--train_file", os.path.join(tmp, "train.txt"),
             "--validation_file", os.path.join(tmp, "validation.txt")])
    block = ["--block_size", str(run["block"])] if run["block"] else []
    return ["--model_name_or_path", os.path.join(tmp, "model")] + data + block + [
            "--deepspeed", os.path.join(tmp, "ds.json"), "--output_dir", out,
            "--do_train", "--do_eval", "--max_steps", str(run["steps"]),
            "--per_device_train_batch_size", str(run["micro"]),
            "--gradient_accumulation_steps", str(run.get("accumulation", 1)),
            "--gradient_checkpointing", str(run.get("checkpointing", False)).lower(),
            "--attn_implementation", run.get("attn", "sdpa"),
            "--average_tokens_across_devices", str(run.get("average_tokens", True)).lower(),
            "--per_device_eval_batch_size", str(run["eval_micro"]), "--learning_rate", str(run["lr"]),
            "--warmup_steps", "2", "--weight_decay", "0", "--max_grad_norm", "1.0",
            "--seed", str(run["seed"]), "--logging_steps", "1", "--report_to", "none",
            "--save_strategy", "steps" if run.get("save_steps") else "no",
            "--save_steps", str(run.get("save_steps") or 500),
            "--label_smoothing_factor", str(run.get("label_smoothing", 0.0))] + (
            ["--packed_documents"] if run.get("packed") else []) + (
            ["--tiled_loss_tokens", str(run["tiled_loss"])] if run.get("tiled_loss") else []) + (
            ["--tiled_mlp_tokens", str(run["tiled_mlp"])] if run.get("tiled_mlp") else []) + (
            ["--sequence_parallel_size", str(run["sp"])] if run.get("sp", 1) > 1 else [])


def compare_models(zrt_dir, hf_dir):
    """Both saved folders through from_pretrained: max |logits difference| on the same input."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(zrt_dir)
    ids = torch.tensor([tok("the cat sat on Zürich's 東京 tower, 1999 times.")["input_ids"]])
    logits = []
    for d in (zrt_dir, hf_dir):
        m = AutoModelForCausalLM.from_pretrained(d).eval()  # transformers' default: sdpa
        with torch.no_grad():
            logits.append(m(ids).logits)
    return (logits[0] - logits[1]).abs().max().item()


def check_checkpoint_folder(tmp, zrt_out, steps):
    """zrt-train's last checkpoint-N is a model folder as the Trainer's (config.json, the gathered
    model.safetensors, the tokenizer files, zero_to_fp32.py next to global_stepN/ and latest):
    from_pretrained gives the Trainer's final logits, and its zero_to_fp32.py writes the same
    fp32 weights as model.safetensors holds."""
    import torch
    from safetensors.torch import load_file
    folder = os.path.join(zrt_out, f"checkpoint-{steps}")
    want = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
            "zero_to_fp32.py", "latest", f"global_step{steps}", "trainer_state.json"]
    missing = [n for n in want if not os.path.exists(os.path.join(folder, n))]
    diff = compare_models(folder, os.path.join(tmp, "hf_model")) if not missing else float("inf")
    fp32 = os.path.join(tmp, "fp32.safetensors")
    run = subprocess.run([sys.executable, os.path.join(folder, "zero_to_fp32.py"), folder, fp32],
                         capture_output=True, text=True)
    same = False
    if run.returncode == 0 and not missing:
        a, b = load_file(fp32), load_file(os.path.join(folder, "model.safetensors"))
        same = set(b) <= set(a) and all(torch.equal(a[k], b[k].to(a[k].dtype)) for k in b)
    print(f"checkpoint-{steps}: missing {missing or 'nothing'}; from_pretrained logits within "
          f"{diff:.2e} of the Trainer's; zero_to_fp32.py exit {run.returncode} "
          f"{run.stderr.strip()[-200:]}, weights {'equal' if same else 'DIFFERENT'}")
    return not missing and diff <= LOGITS_ATOL and same


def compare_steps(zrt_out, trainer_log, steps):
    """Every step's loss and learning rate of zrt-train's trainer_state.json against the
    Trainer's log history, printed: (steps 1..steps all logged and within LOSS_RTOL with equal
    learning rates, the worst relative loss difference)."""
    with open(os.path.join(zrt_out, "trainer_state.json")) as f:
        zrt = {e["step"]: (e["loss"], e["learning_rate"])
               for e in json.load(f)["log_history"] if "loss" in e}
    ref = {e["step"]: (e["loss"], e["learning_rate"]) for e in trainer_log if "loss" in e}
    ok = sorted(zrt) == sorted(ref) == list(range(1, steps + 1))
    worst = 0.0
    for step in sorted(ref):
        (zl, zlr), (hl, hlr) = zrt.get(step, (float("nan"),) * 2), ref[step]
        rel = abs(zl - hl) / abs(hl)
        worst = max(worst, rel)
        print(f"step {step}: loss zrt-train {zl:.8f}  Trainer {hl:.8f}  (rel {rel:.2e}); "
              f"lr {zlr:.6g} / {hlr:.6g}")
        ok &= rel <= LOSS_RTOL and zlr == hlr
    return ok, worst


def check(tmp, run, zrt_out, zrt_log):
    with open(os.path.join(tmp, "hf_result.json")) as f:
        hf = json.load(f)
    ok = True
    logged = re.search(r"data: (\d+) training blocks \(SHA-1 (\w+)\) and (\d+) validation blocks "
                       r"\(SHA-1 (\w+)\)", zrt_log)
    same_blocks = bool(logged) and logged.groups() == (
        str(hf["blocks"][0]), hf["train_digest"], str(hf["blocks"][1]), hf["val_digest"])
    print(f"blocks: Trainer {hf['blocks']} {hf['train_digest'][:12]} {hf['val_digest'][:12]}; "
          f"zrt-train {logged.groups() if logged else 'not logged'}")
    ok &= same_blocks
    steps_ok, worst = compare_steps(zrt_out, hf["log"], run["steps"])
    ok &= steps_ok
    with open(os.path.join(zrt_out, "eval_results.json")) as f:
        zev = json.load(f)
    eval_rel = max(abs(zev[k] - hf["eval"][k]) / abs(hf["eval"][k])
                   for k in ("eval_loss", "perplexity"))
    print(f"eval: zrt-train loss {zev['eval_loss']:.8f} perplexity {zev['perplexity']:.6f}; "
          f"Trainer {hf['eval']['eval_loss']:.8f} {hf['eval']['perplexity']:.6f} (rel {eval_rel:.2e})")
    ok &= eval_rel <= EVAL_RTOL
    diff = compare_models(zrt_out, os.path.join(tmp, "hf_model"))
    print(f"saved models: max |logits difference| {diff:.2e} (tolerance {LOGITS_ATOL:g})")
    ok &= diff <= LOGITS_ATOL
    if run.get("save_steps"):
        ok &= check_checkpoint_folder(tmp, zrt_out, run["steps"])
    print(f"hf_clm {run.get('name', run['family'])}: blocks {'equal' if same_blocks else 'DIFFERENT'}, losses within {worst:.2e} "
          f"(tolerance {LOSS_RTOL:g}), eval within {eval_rel:.2e}, logits within {diff:.2e}")
    return ok


def check_sequence_parallel_moves(bin_dir, tmp, run, zrt_out):
    """Ulysses against ZeroRT itself: K=1 on one rank (the same sample each step) gives the K=2
    run's losses, and its checkpoint-3 resumes at K=1 on one rank, and the K=1 run's at K=2 on
    two, each continuing with the straight run's losses; 4 ranks in 2 groups of K=2 give K=1's
    losses on 2 ranks."""
    def losses(out):
        with open(os.path.join(out, "trainer_state.json")) as f:
            return {e["step"]: e["loss"] for e in json.load(f)["log_history"] if "loss" in e}

    def train(name, world, sp, resume=None):
        out = os.path.join(tmp, name)
        argv = zrt_argv(tmp, dict(run, sp=sp), out)
        cc.run_zrt(bin_dir, world, argv + (["--resume_from_checkpoint", resume] if resume else []))
        return losses(out)

    straight = losses(zrt_out)
    runs = {"K=1 on one rank": (train("k1", 1, 1), range(1, run["steps"] + 1)),
            "K=2 checkpoint resumed at K=1": (
                train("k2_to_k1", 1, 1, os.path.join(zrt_out, "checkpoint-3")), range(4, run["steps"] + 1)),
            "K=1 checkpoint resumed at K=2": (
                train("k1_to_k2", 2, 2, os.path.join(tmp, "k1", "checkpoint-3")), range(4, run["steps"] + 1))}
    # Two data-parallel groups of K=2 on 4 ranks draw what K=1 draws on 2 ranks.
    pairs = [(name, got, straight, steps, "the K=2 run") for name, (got, steps) in runs.items()]
    pairs.append(("2 groups of K=2 on 4 ranks", train("w4k2", 4, 2), train("w2k1", 2, 1),
                  range(1, run["steps"] + 1), "K=1 on 2 ranks"))
    ok = True
    for name, got, want, steps, what in pairs:
        rel = (max(abs(got[s] - want[s]) / abs(want[s]) for s in steps)
               if all(s in got and s in want for s in steps) else float("inf"))
        print(f"ulysses: {name}: steps {steps[0]}-{steps[-1]} within {rel:.2e} of {what}")
        ok &= rel <= LOSS_RTOL
    # --do_predict would give each rank a slice of the logits: refused by name, before training.
    argv = zrt_argv(tmp, dict(run, steps=1), os.path.join(tmp, "predict")) + ["--do_predict"]
    try:
        cc.run_zrt(bin_dir, 2, argv)
        refused = False
    except RuntimeError as e:
        refused = "--do_predict under sequence parallelism" in str(e)
    print(f"ulysses: --do_predict {'refused' if refused else 'NOT refused'}")
    return ok and refused


def check_bad_tiles(bin_dir, tmp):
    """A negative tile size is a usage error naming the flag, nothing written."""
    ok = True
    for flag in ("--tiled_loss_tokens", "--tiled_mlp_tokens"):
        out = os.path.join(tmp, "bad_tile")
        run = subprocess.run([os.path.join(bin_dir, "zrt-train")] + zrt_argv(tmp, RUN, out) +
                             [flag, "-1"], capture_output=True, text=True, timeout=120)
        good = (run.returncode == 1 and f"{flag} must be 0 (off) or more, got -1" in run.stderr
                and not os.path.exists(out))
        print(f"{flag} -1: exit {run.returncode} ({'ok' if good else 'FAILED: ' + run.stderr[-300:]})")
        ok &= good
    return ok


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", help="ZeroRT's build/bin")
    parser.add_argument("--keep", help="keep the model, data and outputs in this folder")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return trainer_worker(args.worker)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    ok = True
    for run in (RUN, QWEN2_RUN, MOE_RUN, MIXTRAL_RUN, PACKED_RUN, ULYSSES_RUN):
        with tempfile.TemporaryDirectory(prefix="zrt_hf_clm_") as scratch:
            tmp = os.path.join(args.keep, run.get("name", run["family"])) if args.keep else scratch
            os.makedirs(tmp, exist_ok=True)
            make_inputs(tmp, run)
            zrt_out = os.path.join(tmp, "zrt")
            zrt_log = cc.run_zrt(args.bin, run["world"], zrt_argv(tmp, run, zrt_out), with_log=True)
            if run_ranks([os.path.abspath(__file__), "--worker", tmp], run["world"], 600, "hf_clm"):
                return 1
            ok &= check(tmp, run, zrt_out, zrt_log)
            if run.get("tiled_loss"):
                ok &= check_bad_tiles(args.bin, tmp)
            if run.get("sp", 1) > 1:
                ok &= check_sequence_parallel_moves(args.bin, tmp, run, zrt_out)
    print("hf_clm: " + ("OK" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
