"""Python twins of zrt-train's example models: the same parameter names, shapes and maths as the
C++ modules of tools/zrt_train.cpp, so that one state dict means the same model on both
sides; and the example's data, generated the same way (torch's CPU generator, the library the
main build links)."""
import math

import torch
import torch.utils.checkpoint


class MlpBlock(torch.nn.Module):
    """tools/zrt_train.cpp MlpBlockImpl: x + tanh(fc(x))."""

    def __init__(self, width):
        super().__init__()
        self.fc = torch.nn.Linear(width, width)

    def forward(self, x):
        return x + torch.tanh(self.fc(x))


class Mlp(torch.nn.Module):
    """tools/zrt_train.cpp MlpImpl: input (16 -> width), blocks h0..h{L-1}, output (width -> 2)."""

    def __init__(self, width, layers):
        super().__init__()
        self.input = torch.nn.Linear(16, width)
        for i in range(layers):
            self.add_module(f"h{i}", MlpBlock(width))
        self.layers = layers
        self.output = torch.nn.Linear(width, 2)

    def forward(self, x):
        x = self.input(x)
        for i in range(self.layers):
            x = getattr(self, f"h{i}")(x)
        return self.output(x).float()


def regression_data(n, seed):
    """tools/zrt_train.cpp RegressionDataset(n, seed): y = [sin(2 x.a), 0.5 cos(3 x.b)]."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 16, generator=gen) * 2 - 1
    a = torch.linspace(-1, 1, 16).view(16, 1)
    b = torch.linspace(1, -1, 16).view(16, 1)
    y = torch.cat([torch.sin(x.matmul(a) * 2), 0.5 * torch.cos(x.matmul(b) * 3)], 1)
    return x, y


class CausalSelfAttention(torch.nn.Module):
    """models/gpt.h CausalSelfAttentionImpl: one qkv projection, masked scores (-1e4 above the
    diagonal), softmax in fp32, projection."""

    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.proj = torch.nn.Linear(width, width)

    def forward(self, x):
        b, t, w = x.shape
        hd = w // self.heads
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, hd).permute(2, 0, 3, 1, 4)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(hd)
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(mask, -1e4)
        att = torch.softmax(scores.float(), -1).to(x.dtype)
        return self.proj(torch.matmul(att, v).transpose(1, 2).reshape(b, t, w))


class Norm(torch.nn.Module):
    """models/gpt.h NormImpl: LayerNorm (eps 1e-5) computed in fp32, back to the input's dtype."""

    def __init__(self, width):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(width))
        self.bias = torch.nn.Parameter(torch.zeros(width))

    def forward(self, x):
        y = torch.nn.functional.layer_norm(x.float(), (x.shape[-1],), self.weight.float(),
                                           self.bias.float(), 1e-5)
        return y.to(x.dtype)


class Block(torch.nn.Module):
    """models/gpt.h BlockImpl: pre-norm attention and MLP (gelu, exact), both residual."""

    def __init__(self, width, heads):
        super().__init__()
        self.ln_1 = Norm(width)
        self.attn = CausalSelfAttention(width, heads)
        self.ln_2 = Norm(width)
        self.fc = torch.nn.Linear(width, 4 * width)
        self.fc_proj = torch.nn.Linear(4 * width, width)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.fc_proj(torch.nn.functional.gelu(self.fc(self.ln_2(x))))


class Gpt(torch.nn.Module):
    """models/gpt.h GptImpl: wte, wpe, blocks h0..h{L-1}, ln_f, lm_head (no bias); tokens
    (batch, t) int64 -> fp32 logits (batch, t, vocab). zrt-train's defaults: vocab 256, context
    32, width 64, 4 heads, 2 layers. The initialisation is GPT-2's (N(0, 0.02), residual
    projections N(0, 0.02/sqrt(2 layers)), biases 0, norms 1/0) but not the same random numbers
    as the C++ side: start both from one state dict."""

    def __init__(self, vocab=256, context=32, width=64, heads=4, layers=2, checkpointing=False):
        super().__init__()
        # As HF's gradient_checkpointing_enable(): each block's forward through
        # torch.utils.checkpoint (non-reentrant), as zrt-train --gradient_checkpointing does.
        self.checkpointing = checkpointing
        self.wte = torch.nn.Embedding(vocab, width)
        self.wpe = torch.nn.Embedding(context, width)
        for i in range(layers):
            self.add_module(f"h{i}", Block(width, heads))
        self.layers = layers
        self.ln_f = Norm(width)
        self.lm_head = torch.nn.Linear(width, vocab, bias=False)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if "ln" in name:
                    continue
                if "bias" in name:
                    p.zero_()
                else:
                    residual = "proj.weight" in name
                    p.normal_(0.0, 0.02 / math.sqrt(2.0 * layers) if residual else 0.02)

    def forward(self, tokens):
        t = tokens.shape[1]
        x = self.wte(tokens) + self.wpe(torch.arange(t)).unsqueeze(0)
        for i in range(self.layers):
            block = getattr(self, f"h{i}")
            if self.checkpointing and torch.is_grad_enabled():
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return self.lm_head(self.ln_f(x)).float()


def gpt_loss(logits, targets):
    """zrt-train's GPT loss: cross entropy over every position, mean."""
    return torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def byte_windows(text, context):
    """zrt-train --model gpt --train_file F's training set: tools/zrt_train.cpp ByteDataset
    over the first 9/10 of F's bytes `text`; example i is bytes [i*context, (i+1)*context) and,
    as targets, the bytes one further. (The generated corpus, without --train_file, comes from
    std::mt19937_64 and is not reproduced here: give both sides one file.)"""
    data = torch.tensor(list(text[:len(text) * 9 // 10]), dtype=torch.long)
    n = (data.numel() - 1) // context
    x = torch.stack([data[i * context:(i + 1) * context] for i in range(n)])
    y = torch.stack([data[i * context + 1:(i + 1) * context + 1] for i in range(n)])
    return x, y
