"""Mixture-of-experts models made by transformers, served and fine-tuned by ZeroRT (issue 53 section
3; label `peer`).

transformers builds tiny random Mixtral, Qwen2-MoE and Qwen3-MoE models and saves them with
save_pretrained (one tensor per expert and projection, as transformers writes them):
  * Mixtral: 5 experts, top-2, renormalised fp32 routing weights, a sliding window of 5;
  * Qwen2-MoE: 6 experts, top-2 without renormalisation, a shared expert with its sigmoid gate,
    q/k/v biases, and layer 1 dense (mlp_only_layers) between two sparse ones;
  * Qwen3-MoE: 6 experts, top-3 renormalised (norm_topk_prob), q/k norms, head_dim not
    hidden/heads, decoder_sparse_step 2 (layers 1 and 3 sparse).
zrt-generate loads each folder into ZeRO-3 partitions over 1, 2 and 3 ranks (every decoder layer
gathered and released: all of a sparse layer's experts in its unit, as DeepSpeed's default leaf
modules keep them; sdpa attention on both sides, their default) and must give transformers' logits
within 2e-5 and its greedy tokens (where transformers' own top-2 margin is wide enough for the order
of additions not to matter), as hf_llama.py checks the dense families; the prompts route their
tokens to every expert of every sparse layer (checked). A folder in transformers' fused in-memory
layout (save_original_format=False) is refused naming the key.

    python tests/peers/hf_moe.py --bin build/bin [--keep DIR]
"""
import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_llama as hl  # noqa: E402

COMMON = dict(max_position_embeddings=64, bos_token_id=None, eos_token_id=None, pad_token_id=None,
              initializer_range=0.2, tie_word_embeddings=False)
# name (model_type), config overrides
VARIANTS = [
    ("mixtral", dict(vocab_size=101, hidden_size=40, intermediate_size=28, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, num_local_experts=5,
                     num_experts_per_tok=2, sliding_window=5)),
    ("qwen2_moe", dict(vocab_size=97, hidden_size=36, intermediate_size=44, moe_intermediate_size=20,
                       shared_expert_intermediate_size=30, num_hidden_layers=3,
                       num_attention_heads=3, num_key_value_heads=1, num_experts=6,
                       num_experts_per_tok=2, norm_topk_prob=False, mlp_only_layers=[1],
                       use_sliding_window=False)),
    ("qwen3_moe", dict(vocab_size=89, hidden_size=32, intermediate_size=40, moe_intermediate_size=20,
                       num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                       head_dim=12, num_experts=6, num_experts_per_tok=3, norm_topk_prob=True,
                       decoder_sparse_step=2, use_sliding_window=False)),
]


def experts_used(model):
    """For each sparse layer, how many of its experts transformers routes the prompts' tokens to."""
    import torch
    used = []
    for prompt in hl.PROMPTS:
        with torch.no_grad():
            out = model(torch.tensor([prompt]), output_router_logits=True)
        k = model.config.num_experts_per_tok
        for layer, logits in enumerate(out.router_logits):
            chosen = set(logits.softmax(-1).topk(k, -1).indices.flatten().tolist())
            if layer == len(used):
                used.append(set())
            used[layer] |= chosen
    return [len(u) for u in used]


def check_variant(args, tmp, seed, model_type, overrides):
    folder = os.path.join(tmp, model_type)
    model = hl.make_model(folder, dict(COMMON, **overrides), {}, 300 + seed, model_type)
    model.set_attn_implementation("sdpa")  # both sides' default
    logits, tokens, margins = hl.reference(model)
    used = experts_used(model)
    experts = overrides.get("num_local_experts", overrides.get("num_experts"))
    ok = all(n == experts for n in used)
    print(f"hf_moe: {model_type} ({hl.describe_files(folder)}): the prompts reach {used} of "
          f"{experts} experts in its {len(used)} sparse layers")
    for np in (1, 2, 3):
        diff, same = hl.agrees(args, folder, os.path.join(tmp, f"{model_type}_{np}"), logits,
                               tokens, margins, np=np)
        good = diff <= hl.LOGITS_ATOL and same
        ok &= good
        print(f"hf_moe: {model_type}, ZeRO-3 on {np} rank(s): logits max |diff| {diff:.3g} "
              f"(tolerance {hl.LOGITS_ATOL}); greedy tokens {'equal' if same else 'DIFFER'} "
              f"({'ok' if good else 'FAILED'})")
    return ok


def check_fused_refused(args, tmp):
    """transformers' fused layout (experts.gate_up_proj, [E, 2I, H]) is refused naming the key."""
    model_type, overrides = VARIANTS[0]
    folder = os.path.join(tmp, "fused")
    hl.make_model(folder, dict(COMMON, **overrides), dict(save_original_format=False), 7, model_type)
    run = subprocess.run([os.path.join(args.bin, "zrt-generate"), "--model_name_or_path", folder,
                          "--prompt_ids", "1,2,3", "--max_new_tokens", "1"],
                         capture_output=True, text=True, timeout=120)
    refused = run.returncode != 0 and "experts.gate_up_proj" in run.stderr
    named = [line for line in run.stderr.splitlines() if "experts.gate_up_proj" in line]
    last = named[0].strip() if named else run.stderr.strip()[-300:] or run.returncode
    print(f"hf_moe: a fused-layout folder {'is refused naming the key' if refused else 'NOT REFUSED'}: "
          f"{last}")
    return refused


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True, help="ZeroRT's build/bin")
    parser.add_argument("--keep", help="keep the models and outputs in this folder")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    ok = True
    with tempfile.TemporaryDirectory(prefix="zrt_hf_moe_") as scratch:
        tmp = args.keep or scratch
        for seed, (model_type, overrides) in enumerate(VARIANTS):
            ok &= check_variant(args, tmp, seed, model_type, overrides)
        ok &= check_fused_refused(args, tmp)
    print("hf_moe: " + ("OK" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
