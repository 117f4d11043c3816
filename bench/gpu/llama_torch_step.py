#!/usr/bin/env python3
"""The torch side of the GPU check's LLaMA step (scripts/gpu_check.py): transformers'
LlamaForCausalLM from the same config.json, in bf16, trained by torch's AdamW (fused on CUDA) on
random token blocks of the same shape; prints the median step time after two warm-up steps.

    llama_torch_step.py CONFIG_DIR BATCH CONTEXT STEPS ATTENTION(eager|sdpa) DEVICE(cuda|cpu)
"""
import statistics
import sys
import time


def main():
    folder, batch, ctx, steps, attn, device = sys.argv[1:7]
    batch, ctx, steps = int(batch), int(ctx), int(steps)
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    config = LlamaConfig.from_pretrained(folder)
    model = LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16)
    model.config._attn_implementation = attn
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")
    ids = torch.randint(0, config.vocab_size, (steps, batch, ctx + 1), device=device)

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    times = []
    for s in range(steps):
        sync()
        t0 = time.perf_counter()
        loss = model(input_ids=ids[s, :, :-1], labels=ids[s, :, :-1]).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    print(f"median_step_ms {statistics.median(times[2:]):.3f} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
