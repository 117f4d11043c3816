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
  * the same sampled tokens at every world size for one seed;
and a model fine-tuned by zrt-train and saved in HF format loads in transformers'
from_pretrained with the logits zrt-generate computes from the same folder.

    python tests/peers/hf_llama.py --bin build/bin [--keep DIR]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

PROMPTS = [[3, 17, 42, 5, 88, 9, 61], [70, 2, 2, 33, 14, 50, 7]]
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


def make_model(folder, overrides, save_args, seed):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    cfg = LlamaConfig(max_position_embeddings=64, bos_token_id=None, eos_token_id=None,
                      pad_token_id=None, **overrides)
    model = LlamaForCausalLM(cfg).eval()
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


def reference(model):
    """transformers' logits of the prompts and greedy tokens, with the top-2 margin per step."""
    import torch
    ids = torch.tensor(PROMPTS)
    with torch.no_grad():
        logits = model(ids).logits
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=NEW_TOKENS,
                             output_scores=True, return_dict_in_generate=True)
    tokens = out.sequences[:, ids.shape[1]:].tolist()
    margins = []
    for scores in out.scores:  # (batch, vocab) per step
        top = scores.topk(2, dim=-1).values
        margins.append((top[:, 0] - top[:, 1]).tolist())
    return logits, tokens, margins


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
    from safetensors.torch import load_file
    folder = os.path.join(tmp, name)
    model = make_model(folder, overrides, save_args, seed)
    logits, tokens, margins = reference(model)
    files = describe_files(folder)
    ok = True
    sampled = {}
    for np in (1, 2, 3):
        rows, logits_file, metrics = zrt_generate(args, folder, np, os.path.join(tmp, f"{name}_{np}"))
        got = load_file(logits_file)["logits"]
        diff = (got - logits).abs().max().item()
        same_tokens = True
        for b, row in enumerate(rows):
            assert row["prompt"] == PROMPTS[b], row
            for step, (ours, theirs) in enumerate(zip(row["generated"], tokens[b])):
                if margins[step][b] <= MARGIN:
                    print(f"  {name}: prompt {b} step {step}: transformers' top-2 margin "
                          f"{margins[step][b]:.2g} is within rounding; compared up to here")
                    break
                same_tokens &= ours == theirs
            same_tokens &= len(row["generated"]) == NEW_TOKENS
        ok &= diff <= LOGITS_ATOL and same_tokens
        print(f"hf_llama: {name} ({', '.join(files)}), ZeRO-3 on {np} rank(s): logits max |diff| "
              f"{diff:.3g} ({'ok' if diff <= LOGITS_ATOL else 'TOO LARGE'}, tolerance "
              f"{LOGITS_ATOL}); greedy tokens {'equal' if same_tokens else 'DIFFER'}; "
              f"{metrics['tokens_per_second']:.1f} tokens/s; peak RSS per rank "
              f"{[round(m) for m in metrics['peak_rss_mib_per_rank']]} MiB")
        rows, _, _ = zrt_generate(args, folder, np, os.path.join(tmp, f"{name}_{np}_sample"),
                                  ["--do_sample", "--seed", "7", "--top_k", "20", "--top_p", "0.9",
                                   "--temperature", "0.8"])
        sampled[np] = [r["generated"] for r in rows]
    same_samples = all(sampled[n] == sampled[1] for n in sampled)
    ok &= same_samples
    print(f"hf_llama: {name}: sampling with seed 7 gives "
          f"{'the same tokens' if same_samples else 'DIFFERENT tokens'} at 1, 2 and 3 ranks")
    return ok


def check_finetune(args, tmp):
    """zrt-train fine-tunes the sharded model for 3 steps on 2 ranks (ZeRO-3, built partitioned)
    and saves it in HF format, sharded; transformers' from_pretrained loads it with no missing or
    unexpected keys and its logits equal zrt-generate's of the same folder."""
    import torch
    from safetensors.torch import load_file
    from transformers import LlamaForCausalLM
    name, overrides, save_args = VARIANTS[0]
    folder = os.path.join(tmp, name)
    original = make_model(folder, overrides, save_args, 0)
    out = os.path.join(tmp, "finetuned")
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
    ids = torch.tensor(PROMPTS)
    with torch.no_grad():
        before, after = original(ids).logits, tuned(ids).logits
    moved = (after - before).abs().max().item()
    _, logits_file, _ = zrt_generate(args, out, 2, os.path.join(tmp, "finetuned_gen"))
    diff = (load_file(logits_file)["logits"] - after).abs().max().item()
    ok = clean and moved > 1e-4 and diff <= LOGITS_ATOL and sum("-of-" in f for f in names) >= 2 and "config.json" in names
    print(f"hf_llama: fine-tuned by zrt-train (ZeRO-3, 2 ranks, 3 steps) and saved as {files}; "
          f"transformers loads it {'cleanly' if clean else f'with problems {info}'}; its logits "
          f"moved by {moved:.3g} from the original and equal zrt-generate's within {diff:.3g} "
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
        ok &= check_finetune(args, base)
    print("hf_llama: " + ("OK" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
