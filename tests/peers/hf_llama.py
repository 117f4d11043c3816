"""LLaMA models made by transformers, served by ZeroRT's ZeRO-3 inference (issue 16; label `peer`).

transformers builds tiny random LlamaForCausalLM models (odd sizes, grouped-query attention, tied
and untied embeddings) and saves them: save_pretrained's sharded safetensors with a small
max_shard_size and its single safetensors file, and a pytorch_model.bin written by torch.save
(which, for a tied model, also holds lm_head.weight). zrt-generate (examples/) loads each
folder into ZeRO-3 partitions over 1, 2 and 3 ranks, each rank reading only its own elements, and
must give
  * the prompts' logits of transformers' forward, within 2e-5 absolute (fp32; the maths are the
    same up to the order of float additions: measured about 3e-7 at these sizes),
  * the tokens of transformers' greedy generate(), exactly, where transformers' own top-2 margin
    is wide enough (> 1e-3) for the order of additions not to matter (it is checked, not assumed),
  * the same sampled tokens at every world size for one seed (each prompt draws from its own
    generator),
  * with --replicate_prompts (every rank runs every prompt in one batch) the same logits at 2 and
    3 ranks, bit for bit;
the prompts are split over the ranks (prompt i on rank i mod N) and have two lengths, so a rank
runs batches one after the other while another one idles;
above one rank no rank holds a whole embedding, tied or not (only the norms stay whole);
models fine-tuned by zrt-train (untied, and tied: the embedding used twice per forward) and saved
in HF format load in transformers' from_pretrained with the logits zrt-generate computes from the
same folder; a model trained from its
config.json alone (--config_name) starts from the same values at every world size; and models
with LLaMA-3's, linear and dynamic rotary scaling (one with transformers 4's config form) give
transformers' logits and greedy tokens; and so do Qwen2 and Mistral models, which zrt-train also
fine-tunes into folders transformers loads as the same class; and with attention computed by sdpa
(zrt-generate's default) or eager on both sides, the logits are transformers' own.

    python tests/peers/hf_llama.py --bin build/bin [--keep DIR]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

# Two of one length (one batch) and one shorter: at 2 ranks rank 0 runs prompts 0 and 2 one
# after the other while rank 1 runs prompt 1, at 3 ranks each runs one.
PROMPTS = [[3, 17, 42, 5, 88, 9, 61], [70, 2, 2, 33, 14, 50, 7], [11, 23, 5, 8]]
NEW_TOKENS = 8
LOGITS_ATOL = 2e-5
MARGIN = 1e-3

# name, config overrides, save_pretrained arguments
VARIANTS = [
    ("untied_gqa_sharded",
     dict(vocab_size=101, hidden_size=48, intermediate_size=70, num_hidden_layers=3,
          num_attention_heads=4, num_key_value_heads=2, rope_theta=5000.0,
          tie_word_embeddings=False),
     dict(max_shard_size="20KB")),
    ("tied_mha_single",
     dict(vocab_size=97, hidden_size=40, intermediate_size=56, num_hidden_layers=2,
          num_attention_heads=5, num_key_value_heads=5, rope_theta=10000.0,
          tie_word_embeddings=True),
     dict()),
    ("tied_gqa_bin",
     dict(vocab_size=89, hidden_size=36, intermediate_size=50, num_hidden_layers=2,
          num_attention_heads=6, num_key_value_heads=3, rope_theta=20000.0,
          tie_word_embeddings=True),
     dict(bin=True)),
]


def describe_files(folder):
    """"17 safetensors shards + index, config.json" rather than every name."""
    names = sorted(os.listdir(folder))
    shards = [n for n in names if "-of-" in n]
    rest = [n for n in names if n not in shards and n != "generation_config.json"]
    return ", ".join(([f"{len(shards)} shards"] if shards else []) + rest)


def make_model(folder, overrides, save_args, seed, model_type="llama"):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    torch.manual_seed(seed)
    cfg = AutoConfig.for_model(model_type, **dict(dict(
        max_position_embeddings=64, bos_token_id=None, eos_token_id=None, pad_token_id=None),
        **overrides))
    model = AutoModelForCausalLM.from_config(cfg).eval()
    model.config._attn_implementation = "eager"
    if save_args.get("bin"):
        # transformers 5 writes only safetensors: the legacy file as torch.save writes it, with
        # the tied lm_head.weight too when the embeddings are tied (what old checkpoints hold).
        model.config.save_pretrained(folder)
        torch.save(model.state_dict(), os.path.join(folder, "pytorch_model.bin"))
        assert not os.path.exists(os.path.join(folder, "model.safetensors"))
    else:
        model.save_pretrained(folder, **save_args)
    return model


def reference(model, fresh_rope=False):
    """transformers' logits and greedy tokens of each prompt (alone), with the top-2 margin of
    every step. With `fresh_rope`, each call starts from the unscaled dynamic rope state (a
    one-token forward resets it), as ZeroRT's per-generation state does."""
    import torch
    logits, tokens, margins = [], [], []
    for prompt in PROMPTS:
        ids = torch.tensor([prompt])
        with torch.no_grad():
            if fresh_rope:
                model(torch.tensor([[0]]))
            logits.append(model(ids).logits[0])
            if fresh_rope:
                model(torch.tensor([[0]]))
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=NEW_TOKENS,
                                 output_scores=True, return_dict_in_generate=True)
        tokens.append(out.sequences[0, ids.shape[1]:].tolist())
        margins.append([(s.topk(2, dim=-1).values[0, 0] - s.topk(2, dim=-1).values[0, 1]).item()
                        for s in out.scores])
    return logits, tokens, margins


def read_logits(path):
    """zrt-generate's --logits_out: one (length, vocab) tensor per prompt."""
    from safetensors.torch import load_file
    saved = load_file(path)
    assert sorted(saved) == sorted(f"prompt.{i}" for i in range(len(PROMPTS))), sorted(saved)
    return [saved[f"prompt.{i}"] for i in range(len(PROMPTS))]


def zrt_generate(args, folder, np, out_dir, extra=()):
    os.makedirs(out_dir, exist_ok=True)
    cmd = [os.path.join(args.bin, "zrt-launch"), "--np", str(np), "--timeout", "300", "--",
           os.path.join(args.bin, "zrt-generate"), "--model_name_or_path", folder,
           "--prompt_ids", ";".join(",".join(map(str, p)) for p in PROMPTS),
           "--max_new_tokens", str(NEW_TOKENS),
           "--output", os.path.join(out_dir, "ids.jsonl"),
           "--logits_out", os.path.join(out_dir, "logits.safetensors"),
           "--metrics_out", os.path.join(out_dir, "metrics.json"),
           # small enough that every decoder layer is gathered and released
           "--persistence_threshold", "64"] + list(extra)
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    if run.returncode != 0:
        print(run.stdout + run.stderr)
        raise SystemExit(f"zrt-generate failed ({run.returncode}): {' '.join(cmd)}")
    with open(os.path.join(out_dir, "ids.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    with open(os.path.join(out_dir, "metrics.json")) as f:
        metrics = json.load(f)
    return rows, os.path.join(out_dir, "logits.safetensors"), metrics


def check_variant(args, tmp, name, overrides, save_args, seed):
    folder = os.path.join(tmp, name)
    model = make_model(folder, overrides, save_args, seed)
    logits, tokens, margins = reference(model)
    files = describe_files(folder)
    ok = True
    sampled = {}
    for np in (1, 2, 3):
        rows, logits_file, metrics = zrt_generate(args, folder, np, os.path.join(tmp, f"{name}_{np}"))
        diff = max((g - t).abs().max().item() for g, t in zip(read_logits(logits_file), logits))
        same_tokens = True
        for b, row in enumerate(rows):
            assert row["prompt"] == PROMPTS[b], row
            for step, (mine, theirs) in enumerate(zip(row["generated"], tokens[b])):
                if margins[b][step] <= MARGIN:
                    print(f"  {name}: prompt {b} step {step}: transformers' top-2 margin "
                          f"{margins[b][step]:.2g} is within rounding; compared up to here")
                    break
                same_tokens &= mine == theirs
            same_tokens &= len(row["generated"]) == NEW_TOKENS
        # Above one rank only the norms (under the threshold of 64) stay whole: the embedding,
        # tied or not, is partitioned (Note [A unit used several times]).
        resident = metrics["resident_parameter_elements_rank0"]
        whole_embedding = overrides["vocab_size"] * overrides["hidden_size"]
        partitioned = np == 1 or resident < whole_embedding
        ok &= diff <= LOGITS_ATOL and same_tokens and len(rows) == len(PROMPTS) and partitioned
        print(f"hf_llama: {name} ({files}), ZeRO-3 on {np} rank(s): logits max |diff| "
              f"{diff:.3g} ({'ok' if diff <= LOGITS_ATOL else 'TOO LARGE'}, tolerance "
              f"{LOGITS_ATOL}); greedy tokens {'equal' if same_tokens else 'DIFFER'}; "
              f"{resident} parameter elements whole at rest"
              f"{'' if partitioned else ' (the EMBEDDING IS WHOLE)'}; "
              f"{metrics['tokens_per_second']:.1f} tokens/s; peak RSS per rank "
              f"{[round(m) for m in metrics['peak_rss_mib_per_rank']]} MiB")
        rows, _, _ = zrt_generate(args, folder, np, os.path.join(tmp, f"{name}_{np}_sample"),
                                  ["--do_sample", "--seed", "7", "--top_k", "20", "--top_p", "0.9",
                                   "--temperature", "0.8"])
        sampled[np] = [r["generated"] for r in rows]
    # Every rank running every prompt in one batch: the same logits at 2 and 3 ranks, bit for bit
    # (both gather every layer into fresh storage; at 1 rank the parameters are views of the
    # partitions, whose alignment a BLAS may round differently).
    replicated = []
    for np in (2, 3):
        _, logits_file, _ = zrt_generate(args, folder, np,
                                         os.path.join(tmp, f"{name}_{np}_replicated"),
                                         ["--replicate_prompts"])
        replicated.append(read_logits(logits_file))
    same_bits = all(a.equal(b) for a, b in zip(*replicated))
    same_samples = all(sampled[n] == sampled[1] for n in sampled)
    ok &= same_samples and same_bits
    print(f"hf_llama: {name}: sampling with seed 7 gives "
          f"{'the same tokens' if same_samples else 'DIFFERENT tokens'} at 1, 2 and 3 ranks; "
          f"--replicate_prompts gives the same logits at 2 and 3 ranks "
          f"{'bit for bit' if same_bits else 'with DIFFERENCES'}")
    return ok


def agrees(args, folder, out_dir, logits, tokens, margins, np=2, extra=()):
    """zrt-generate on `np` ranks against transformers' reference: the logits' max |diff| and
    whether the greedy tokens are equal (up to a step whose top-2 margin is within rounding)."""
    rows, logits_file, _ = zrt_generate(args, folder, np, out_dir, extra)
    diff = max((g - t).abs().max().item() for g, t in zip(read_logits(logits_file), logits))
    same = len(rows) == len(PROMPTS)
    for b, row in enumerate(rows):
        for step, (mine, theirs) in enumerate(zip(row["generated"], tokens[b])):
            if margins[b][step] <= MARGIN:
                break
            same &= mine == theirs
    return diff, same


# name, config overrides, whether config.json is rewritten in transformers 4's form ("rope_scaling"
# with "type", a top-level rope_theta). head_dim 12 with theta 5e5 puts llama3's frequencies in
# all three bands for original_max_position_embeddings 128 (wavelengths 6.3 < 32, 56 between,
# the rest > 128); dynamic's max_position_embeddings 6 is below the 7-token prompts, so the
# logits and every generated token use scaled frequencies, recomputed as the length grows. Weights
# 10x transformers' default scale make positions matter: unscaled frequencies miss the logits by
# 100x the tolerance or more.
ROPE_VARIANTS = [
    ("rope_llama3",
     dict(vocab_size=103, hidden_size=48, intermediate_size=60, num_hidden_layers=2,
          num_attention_heads=4, num_key_value_heads=2,
          initializer_range=0.2, rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0,
                               low_freq_factor=1.0, high_freq_factor=4.0,
                               original_max_position_embeddings=128)),
     False),
    ("rope_linear_v4_config",
     dict(vocab_size=97, hidden_size=40, intermediate_size=52, num_hidden_layers=2,
          num_attention_heads=5, num_key_value_heads=5,
          initializer_range=0.2, rope_parameters=dict(rope_type="linear", rope_theta=5000.0, factor=2.5)),
     True),
    ("rope_dynamic",
     dict(vocab_size=91, hidden_size=36, intermediate_size=44, num_hidden_layers=2,
          num_attention_heads=3, num_key_value_heads=1, max_position_embeddings=6,
          initializer_range=0.2, rope_parameters=dict(rope_type="dynamic", rope_theta=10000.0, factor=3.0)),
     False),
]


def check_rope_scaling(args, tmp):
    """LLaMA-3's, linear and dynamic (NTK) rotary scaling: zrt-generate on 2 ranks (rank 0 runs two
    prompts one after the other) gives transformers' logits and greedy tokens."""
    ok = True
    for seed, (name, overrides, v4_config) in enumerate(ROPE_VARIANTS):
        folder = os.path.join(tmp, name)
        model = make_model(folder, overrides, {}, 100 + seed)
        rope = overrides["rope_parameters"]
        if v4_config:
            path = os.path.join(folder, "config.json")
            with open(path) as f:
                cfg = json.load(f)
            cfg.pop("rope_parameters")
            cfg["rope_theta"] = rope["rope_theta"]
            cfg["rope_scaling"] = {"type": rope["rope_type"], "factor": rope["factor"]}
            with open(path, "w") as f:
                json.dump(cfg, f)
        logits, tokens, margins = reference(model, fresh_rope=rope["rope_type"] == "dynamic")
        diff, same = agrees(args, folder, os.path.join(tmp, f"{name}_2"), logits, tokens, margins)
        ok &= diff <= LOGITS_ATOL and same
        print(f"hf_llama: {name} ({rope['rope_type']}"
              f"{', transformers 4 config' if v4_config else ''}), ZeRO-3 on 2 ranks: logits max "
              f"|diff| {diff:.3g} ({'ok' if diff <= LOGITS_ATOL else 'TOO LARGE'}); greedy tokens "
              f"{'equal' if same else 'DIFFER'}")
    # Another rope type is refused, naming the key, before anything runs.
    folder = os.path.join(tmp, ROPE_VARIANTS[0][0])
    path = os.path.join(folder, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    cfg["rope_parameters"]["rope_type"] = "yarn"
    with open(path, "w") as f:
        json.dump(cfg, f)
    run = subprocess.run([os.path.join(args.bin, "zrt-generate"), "--model_name_or_path", folder,
                          "--prompt_ids", "1,2,3", "--max_new_tokens", "1"],
                         capture_output=True, text=True, timeout=120)
    refused = run.returncode != 0 and "rope_parameters.rope_type 'yarn' is not supported" in run.stderr
    ok &= refused
    print(f"hf_llama: rope_type 'yarn' {'refused naming the key' if refused else 'NOT REFUSED'}: "
          f"{run.stderr.strip().splitlines()[-1] if run.stderr.strip() else run.returncode}")
    return ok


# LLaMA's relatives (Note [LLaMA families] in models/llama.h): model_type, config overrides.
# Mistral's sliding window of 4 is shorter than the prompts, so most keys fall out of it.
FAMILY_VARIANTS = [
    ("qwen2", dict(vocab_size=107, hidden_size=48, intermediate_size=60, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                   initializer_range=0.2, rope_theta=30000.0)),
    ("mistral", dict(vocab_size=109, hidden_size=40, intermediate_size=52, num_hidden_layers=2,
                     num_attention_heads=5, num_key_value_heads=1, sliding_window=4,
                     initializer_range=0.2, tie_word_embeddings=False)),
]


def check_families(args, tmp):
    """Qwen2 (q/k/v biases) and Mistral (sliding window) made by transformers: zrt-generate on 2
    ranks gives their logits and greedy tokens; zrt-train (no --deepspeed, 2 ranks) fine-tunes
    each and saves a folder that transformers' from_pretrained loads as the same class, with no
    missing or unexpected keys and the logits zrt-generate computes from it."""
    import torch
    from transformers import AutoModelForCausalLM
    ok = True
    for seed, (model_type, overrides) in enumerate(FAMILY_VARIANTS):
        folder = os.path.join(tmp, model_type)
        model = make_model(folder, overrides, {}, 200 + seed, model_type)
        logits, tokens, margins = reference(model)
        diff, same = agrees(args, folder, os.path.join(tmp, f"{model_type}_2"), logits, tokens,
                            margins)
        out = os.path.join(tmp, f"finetuned_{model_type}")
        cmd = [os.path.join(args.bin, "zrt-launch"), "--np", "2", "--timeout", "300", "--",
               os.path.join(args.bin, "zrt-train"), "--model_name_or_path", folder,
               "--output_dir", out, "--max_steps", "2", "--per_device_train_batch_size", "2",
               "--learning_rate", "1e-3", "--block_size", "16", "--save_strategy", "no"]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
        if run.returncode != 0:
            print(run.stdout + run.stderr)
            raise SystemExit(f"zrt-train failed ({run.returncode}): {' '.join(cmd)}")
        tuned, info = AutoModelForCausalLM.from_pretrained(out, output_loading_info=True,
                                                           attn_implementation="eager")
        clean = (type(tuned) is type(model) and
                 not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")))
        with torch.no_grad():
            after = [tuned.eval()(torch.tensor([p])).logits[0] for p in PROMPTS]
        _, tuned_file, _ = zrt_generate(args, out, 2, os.path.join(tmp, f"finetuned_{model_type}_2"))
        tuned_diff = max((g - a).abs().max().item() for g, a in zip(read_logits(tuned_file), after))
        good = diff <= LOGITS_ATOL and same and clean and tuned_diff <= LOGITS_ATOL
        ok &= good
        print(f"hf_llama: {model_type} on 2 ranks: logits max |diff| {diff:.3g}, greedy tokens "
              f"{'equal' if same else 'DIFFER'}; fine-tuned by zrt-train, transformers loads it as "
              f"{type(tuned).__name__} {'cleanly' if clean else f'WITH PROBLEMS {info}'}, logits "
              f"equal zrt-generate's within {tuned_diff:.3g} ({'ok' if good else 'FAILED'})")
    return ok


def check_attention(args, tmp):
    """Note [Attention implementations] in models/llama.h: zrt-generate's default (sdpa) against
    transformers' sdpa, and --attn_implementation eager against its eager, on 2 ranks, for a
    GQA LLaMA, Mistral with a window shorter than the prompts (sdpa with a mask) and Qwen2."""
    ok = True
    cases = [("llama", VARIANTS[0][1]), ("mistral", FAMILY_VARIANTS[1][1]),
             ("qwen2", FAMILY_VARIANTS[0][1])]
    for seed, (model_type, overrides) in enumerate(cases):
        folder = os.path.join(tmp, f"attention_{model_type}")
        model = make_model(folder, overrides, {}, 400 + seed, model_type)
        for impl in ("sdpa", "eager"):
            model.set_attn_implementation(impl)
            logits, tokens, margins = reference(model)
            extra = [] if impl == "sdpa" else ["--attn_implementation", "eager"]
            diff, same = agrees(args, folder, os.path.join(tmp, f"attention_{model_type}_{impl}"),
                                logits, tokens, margins, extra=extra)
            good = diff <= LOGITS_ATOL and same
            ok &= good
            print(f"hf_llama: {model_type}, attention {impl}{' (default)' if not extra else ''} on "
                  f"both sides, 2 ranks: logits max |diff| {diff:.3g}, greedy tokens "
                  f"{'equal' if same else 'DIFFER'} ({'ok' if good else 'FAILED'})")
    return ok


def check_finetune(args, tmp, index):
    """zrt-train fine-tunes a model (untied and sharded, or tied: its embedding then partitioned
    and used twice per forward) for 3 steps on 2 ranks (ZeRO-3, built partitioned) and saves it
    in HF format, sharded; transformers' from_pretrained loads it with no missing or unexpected
    keys and its logits equal zrt-generate's of the same folder."""
    import torch
    from transformers import LlamaForCausalLM
    name, overrides, save_args = VARIANTS[index]
    folder = os.path.join(tmp, name)
    original = make_model(folder, overrides, save_args, index)
    out = os.path.join(tmp, f"finetuned_{name}")
    cmd = [os.path.join(args.bin, "zrt-launch"), "--np", "2", "--timeout", "300", "--",
           os.path.join(args.bin, "zrt-train"), "--model", "llama", "--model_name_or_path", folder,
           "--deepspeed", os.path.join(args.src, "examples", "configs", "zero3.json"),
           "--output_dir", out, "--max_steps", "3", "--per_device_train_batch_size", "2",
           "--learning_rate", "1e-3", "--context", "16", "--max_shard_size", "20000",
           "--save_strategy", "no", "--logging_steps", "1"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    if run.returncode != 0:
        print(run.stdout + run.stderr)
        raise SystemExit(f"zrt-train failed ({run.returncode}): {' '.join(cmd)}")
    names = os.listdir(out)
    files = describe_files(out)
    tuned, info = LlamaForCausalLM.from_pretrained(out, output_loading_info=True,
                                                   attn_implementation="eager")
    tuned.eval()
    clean = not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys"))
    with torch.no_grad():
        before = [original(torch.tensor([p])).logits[0] for p in PROMPTS]
        after = [tuned(torch.tensor([p])).logits[0] for p in PROMPTS]
    moved = max((a - b).abs().max().item() for a, b in zip(after, before))
    _, logits_file, _ = zrt_generate(args, out, 2, os.path.join(tmp, f"finetuned_{name}_gen"))
    diff = max((g - a).abs().max().item() for g, a in zip(read_logits(logits_file), after))
    ok = clean and moved > 1e-4 and diff <= LOGITS_ATOL and sum("-of-" in f for f in names) >= 2 and "config.json" in names
    print(f"hf_llama: {name} fine-tuned by zrt-train (ZeRO-3, 2 ranks, 3 steps), saved as {files}; "
          f"transformers loads it {'cleanly' if clean else f'with problems {info}'}; its logits "
          f"moved by {moved:.3g} from the original and equal zrt-generate's within {diff:.3g} "
          f"({'ok' if ok else 'FAILED'})")
    return ok


def check_from_scratch(args, tmp):
    """zrt-train --config_name: a model trained from a config.json alone, built partitioned and
    initialised by init_deferred, starts from the same values at 1 and 2 ranks (saved after one
    step at learning rate 0), with transformers' initialisation (ones for the norms, normal(0,
    initializer_range) weights, a zero padding row), and loads cleanly in transformers."""
    import torch
    from safetensors.torch import load_file
    from transformers import LlamaConfig, LlamaForCausalLM
    name, overrides, _ = VARIANTS[0]
    config_dir = os.path.join(tmp, "scratch_config")
    LlamaConfig(max_position_embeddings=64, bos_token_id=None, eos_token_id=None, pad_token_id=3,
                initializer_range=0.05, **overrides).save_pretrained(config_dir)
    saved = {}
    for np in (1, 2):
        out = os.path.join(tmp, f"scratch_{np}")
        cmd = [os.path.join(args.bin, "zrt-launch"), "--np", str(np), "--timeout", "300", "--",
               os.path.join(args.bin, "zrt-train"), "--model", "llama", "--config_name",
               os.path.join(config_dir, "config.json"),
               "--deepspeed", os.path.join(args.src, "examples", "configs", "zero3.json"),
               "--output_dir", out, "--max_steps", "1", "--per_device_train_batch_size", "2",
               "--learning_rate", "0", "--context", "16", "--save_strategy", "no", "--seed", "11"]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
        if run.returncode != 0:
            print(run.stdout + run.stderr)
            raise SystemExit(f"zrt-train failed ({run.returncode}): {' '.join(cmd)}")
        saved[np] = {}
        for f in sorted(os.listdir(out)):
            if f.endswith(".safetensors"):
                saved[np].update(load_file(os.path.join(out, f)))
    same = sorted(saved[1]) == sorted(saved[2]) and all(saved[1][k].equal(saved[2][k])
                                                        for k in saved[1])
    w = saved[1]
    norms_one = all(w[k].eq(1).all().item() for k in w if "norm" in k)
    big = [w[k] for k in w if "norm" not in k]
    stds = [t.std().item() for t in big if t.numel() > 1000]
    std_ok = all(abs(s - 0.05) < 0.005 for s in stds)
    pad_zero = w["model.embed_tokens.weight"][3].eq(0).all().item()
    model, info = LlamaForCausalLM.from_pretrained(os.path.join(tmp, "scratch_2"),
                                                   output_loading_info=True)
    clean = not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys"))
    with torch.no_grad():
        finite = torch.isfinite(model(torch.tensor([PROMPTS[0]])).logits).all().item()
    ok = same and norms_one and std_ok and pad_zero and clean and finite
    print(f"hf_llama: trained from config.json alone (--config_name, 1 and 2 ranks): initial "
          f"values {'identical' if same else 'DIFFERENT'} across world sizes; norms "
          f"{'ones' if norms_one else 'NOT ones'}; weight std {min(stds):.4f}-{max(stds):.4f} "
          f"(initializer_range 0.05); padding row {'zero' if pad_zero else 'NOT zero'}; "
          f"transformers loads it {'cleanly' if clean else f'with problems {info}'} "
          f"({'ok' if ok else 'FAILED'})")
    return ok


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True, help="ZeroRT's build/bin")
    parser.add_argument("--src", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    parser.add_argument("--keep", help="keep the models and outputs in this folder")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    ok = True
    with tempfile.TemporaryDirectory(prefix="zrt_hf_llama_") as tmp:
        base = args.keep or tmp
        for seed, (name, overrides, save_args) in enumerate(VARIANTS):
            ok &= check_variant(args, base, name, overrides, save_args, seed)
        ok &= check_finetune(args, base, 0)
        ok &= check_finetune(args, base, 1)
        ok &= check_from_scratch(args, base)
        ok &= check_rope_scaling(args, base)
        ok &= check_families(args, base)
        ok &= check_attention(args, base)
    print("hf_llama: " + ("OK" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
