// A small GPT-style decoder language model for the zrt-train example: token and position
// embeddings, pre-norm transformer blocks (causal self-attention + MLP), a final norm and a
// language-model head. Each block is a ZeRO-3 sharding unit (zrt::ShardUnit). Works in fp32 and
// bf16 on the CPU (attention is written with matmul/softmax so every op has a bf16 kernel).
#pragma once

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "zero/shard_unit.h"

namespace zrt::models {

struct GptConfig {
  int64_t vocab = 256;  // byte-level
  int64_t context = 64;
  int64_t width = 128;
  int64_t heads = 4;
  int64_t layers = 4;
  double dropout = 0.0;
};

struct CausalSelfAttentionImpl : torch::nn::Module {
  explicit CausalSelfAttentionImpl(const GptConfig& c) : heads(c.heads), dropout(c.dropout) {
    qkv = register_module("qkv", torch::nn::Linear(c.width, 3 * c.width));
    proj = register_module("proj", torch::nn::Linear(c.width, c.width));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t b = x.size(0), t = x.size(1), w = x.size(2), hd = w / heads;
    auto parts = qkv->forward(x).view({b, t, 3, heads, hd}).permute({2, 0, 3, 1, 4});
    auto q = parts[0], k = parts[1], v = parts[2];  // (b, heads, t, hd)
    auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(hd));
    auto mask = torch::ones({t, t}, torch::TensorOptions().dtype(torch::kBool)).triu(1);
    scores = scores.masked_fill(mask, -1e4);
    auto att = torch::softmax(scores.to(torch::kFloat), -1).to(x.scalar_type());
    att = torch::dropout(att, dropout, is_training());
    auto y = torch::matmul(att, v).transpose(1, 2).reshape({b, t, w});
    return proj->forward(y);
  }
  int64_t heads;
  double dropout;
  torch::nn::Linear qkv{nullptr}, proj{nullptr};
};
TORCH_MODULE(CausalSelfAttention);

// LayerNorm computed in fp32 (LibTorch 1.13 has no bf16 layer_norm on the CPU).
struct NormImpl : torch::nn::Module {
  explicit NormImpl(int64_t width) {
    weight = register_parameter("weight", torch::ones({width}));
    bias = register_parameter("bias", torch::zeros({width}));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = torch::layer_norm(x.to(torch::kFloat), {x.size(-1)}, weight.to(torch::kFloat),
                               bias.to(torch::kFloat), 1e-5);
    return y.to(x.scalar_type());
  }
  torch::Tensor weight, bias;
};
TORCH_MODULE(Norm);

struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(const GptConfig& c) {
    ln_1 = register_module("ln_1", Norm(c.width));
    attn = register_module("attn", CausalSelfAttention(c));
    ln_2 = register_module("ln_2", Norm(c.width));
    fc = register_module("fc", torch::nn::Linear(c.width, 4 * c.width));
    fc_proj = register_module("fc_proj", torch::nn::Linear(4 * c.width, c.width));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = x + attn->forward(ln_1->forward(x));
    return x + fc_proj->forward(torch::gelu(fc->forward(ln_2->forward(x))));
  }
  Norm ln_1{nullptr}, ln_2{nullptr};
  CausalSelfAttention attn{nullptr};
  torch::nn::Linear fc{nullptr}, fc_proj{nullptr};
};

struct GptImpl : torch::nn::Module {
  explicit GptImpl(const GptConfig& c) : config(c) {
    wte = register_module("wte", torch::nn::Embedding(c.vocab, c.width));
    wpe = register_module("wpe", torch::nn::Embedding(c.context, c.width));
    for (int64_t i = 0; i < c.layers; ++i) {
      blocks.push_back(
          register_module("h" + std::to_string(i), std::make_shared<zrt::ShardUnit<BlockImpl>>(c)));
    }
    ln_f = register_module("ln_f", Norm(c.width));
    lm_head = register_module(
        "lm_head", torch::nn::Linear(torch::nn::LinearOptions(c.width, c.vocab).bias(false)));
    // GPT-2's initialisation: N(0, 0.02), residual projections scaled by 1/sqrt(2·layers).
    torch::NoGradGuard no_grad;
    for (auto& p : named_parameters()) {
      if (p.key().find("ln") != std::string::npos) continue;
      if (p.key().find("bias") != std::string::npos) {
        p.value().zero_();
      } else {
        const bool residual = p.key().find("proj.weight") != std::string::npos;
        p.value().normal_(0.0, residual ? 0.02 / std::sqrt(2.0 * c.layers) : 0.02);
      }
    }
  }
  // tokens: (batch, t) int64 → logits (batch, t, vocab) in fp32.
  torch::Tensor forward(const torch::Tensor& tokens) {
    const int64_t t = tokens.size(1);
    auto pos = torch::arange(t, torch::kLong);
    auto x = wte->forward(tokens) + wpe->forward(pos).unsqueeze(0);
    for (auto& b : blocks) x = b->forward(x);
    return lm_head->forward(ln_f->forward(x)).to(torch::kFloat);
  }
  int64_t num_params() {
    int64_t n = 0;
    for (auto& p : parameters()) n += p.numel();
    return n;
  }
  GptConfig config;
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  std::vector<std::shared_ptr<zrt::ShardUnit<BlockImpl>>> blocks;
  Norm ln_f{nullptr};
  torch::nn::Linear lm_head{nullptr};
};
TORCH_MODULE(Gpt);

}  // namespace zrt::models
