// Small deterministic models for parity tests: parameter values depend only on their names and
// shapes (no RNG), so every rank — thread or process — builds the identical model.
#pragma once

#include <string>
#include <vector>

#include <torch/torch.h>

#include "zero/flat_layout.h"
#include "zero/shard_unit.h"

namespace zrt::test {

// An MLP with sizes that divide no world size: 5 → 7 → 3 (+ bias), ReLU, and optionally a frozen
// scale and a parameter that never receives a gradient.
struct TinyMlpImpl : torch::nn::Module {
  explicit TinyMlpImpl(bool with_extras = false) {
    fc1 = register_module("fc1", torch::nn::Linear(5, 7));
    fc2 = register_module("fc2", torch::nn::Linear(7, 3));
    if (with_extras) {
      frozen = register_parameter("frozen_scale", torch::ones({3}), /*requires_grad=*/false);
      unused = register_parameter("unused", torch::zeros({4}));
    }
    reset_deterministic();
  }
  void reset_deterministic() {
    torch::NoGradGuard no_grad;
    int salt = 1;
    for (auto& p : named_parameters()) {
      const int64_t n = p.value().numel();
      auto v = torch::arange(n, torch::kFloat).mul(0.37f * salt).sin().mul(0.5f);
      p.value().copy_(v.view(p.value().sizes()));
      ++salt;
    }
    if (frozen.defined()) frozen.fill_(1.5f);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = torch::relu(fc1->forward(x));
    auto y = fc2->forward(h);
    if (frozen.defined()) y = y * frozen;
    return y;
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::Tensor frozen, unused;
};
TORCH_MODULE(TinyMlp);

// Parameter i (in registration order, from 1) becomes amplitude * sin(arange(numel) * rate * i).
inline void fill_by_order(torch::nn::Module& m, float rate, float amplitude) {
  torch::NoGradGuard no_grad;
  int salt = 1;
  for (auto& p : m.named_parameters()) {
    const int64_t n = p.value().numel();
    p.value().copy_(torch::arange(n, torch::kFloat)
                        .mul(rate * static_cast<float>(salt))
                        .sin()
                        .mul(amplitude)
                        .view(p.value().sizes()));
    ++salt;
  }
}

// A residual block, the typical ZeRO-3 unit.
struct TinyBlockImpl : torch::nn::Module {
  explicit TinyBlockImpl(int64_t width) {
    fc = register_module("fc", torch::nn::Linear(width, width));
    norm_scale = register_parameter("norm_scale", torch::ones({width}));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return x + torch::tanh(fc->forward(x)) * norm_scale;
  }
  torch::nn::Linear fc{nullptr};
  torch::Tensor norm_scale;
};

// A residual MLP block with dropout: x + fc2(dropout(gelu(fc1(x)))), width → 2 width → width; for
// activation checkpointing, whose recompute must draw the same dropout masks.
struct DropBlockImpl : torch::nn::Module {
  explicit DropBlockImpl(int64_t width, double p = 0.25) {
    fc1 = register_module("fc1", torch::nn::Linear(width, 2 * width));
    fc2 = register_module("fc2", torch::nn::Linear(2 * width, width));
    drop = register_module("drop", torch::nn::Dropout(p));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return x + fc2->forward(drop->forward(torch::gelu(fc1->forward(x))));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::Dropout drop{nullptr};
};

// 5 → 7, three residual blocks of width 7, 7 → 3, every layer a ZeRO-3 unit when
// `units_everywhere`, else only the blocks (the two Linear layers stay outside every unit).
// Parameter values as TinyMlp: deterministic from names.
struct TinyStackImpl : torch::nn::Module {
  explicit TinyStackImpl(bool units_everywhere = false) {
    if (units_everywhere) {
      in_unit =
          register_module("input", std::make_shared<zrt::ShardUnit<torch::nn::LinearImpl>>(5, 7));
      out_unit =
          register_module("output", std::make_shared<zrt::ShardUnit<torch::nn::LinearImpl>>(7, 3));
    } else {
      in = register_module("input", torch::nn::Linear(5, 7));
      out = register_module("output", torch::nn::Linear(7, 3));
    }
    for (int i = 0; i < 3; ++i) {
      blocks.push_back(register_module("h" + std::to_string(i),
                                       std::make_shared<zrt::ShardUnit<TinyBlockImpl>>(7)));
    }
    fill_by_order(*this, 0.29f, 0.4f);
  }
  torch::Tensor forward(torch::Tensor x) {
    x = in ? in->forward(x) : in_unit->forward(x);
    for (auto& b : blocks) x = b->forward(x);
    return out ? out->forward(x) : out_unit->forward(x);
  }
  torch::nn::Linear in{nullptr}, out{nullptr};
  std::shared_ptr<zrt::ShardUnit<torch::nn::LinearImpl>> in_unit, out_unit;
  std::vector<std::shared_ptr<zrt::ShardUnit<TinyBlockImpl>>> blocks;
};
TORCH_MODULE(TinyStack);

// Tied embeddings, as LLaMA's with tie_word_embeddings: an embedding of 11 tokens × 7 whose
// weight is also the output projection, three residual blocks between them. The embedding is a
// ZeRO-3 unit and the projection a second use of it (ShardUnitBase::run). Deterministic values
// from the parameters' order and sizes, as in TinyStack.
struct TiedStackImpl : torch::nn::Module {
  TiedStackImpl() {
    embed =
        register_module("embed", std::make_shared<zrt::ShardUnit<torch::nn::EmbeddingImpl>>(11, 7));
    for (int i = 0; i < 3; ++i) {
      blocks.push_back(register_module("h" + std::to_string(i),
                                       std::make_shared<zrt::ShardUnit<TinyBlockImpl>>(7)));
    }
    fill_by_order(*this, 0.31f, 0.5f);
  }
  // tokens (batch, t) → logits (batch, t, 11)
  torch::Tensor forward(const torch::Tensor& tokens) {
    torch::Tensor x = embed->forward(tokens);
    for (auto& b : blocks) x = b->forward(x);
    auto& e = *embed;
    return e.run([&e](const torch::Tensor& h) { return torch::linear(h, e.weight); }, x);
  }
  std::shared_ptr<zrt::ShardUnit<torch::nn::EmbeddingImpl>> embed;
  std::vector<std::shared_ptr<zrt::ShardUnit<TinyBlockImpl>>> blocks;
};
TORCH_MODULE(TiedStack);

// Deterministic tokens (n × 5) for TiedStack and their next-token targets.
inline std::pair<torch::Tensor, torch::Tensor> tied_batch(int rank, int step, int64_t n = 4) {
  auto tokens =
      torch::arange(n * 5, torch::kLong).view({n, 5}).mul(3).add(7 * rank + 5 * step).remainder(11);
  return {tokens, tokens.add(1).remainder(11)};
}

// Deterministic batch for `rank` at `step`: inputs (n × 5) and targets (n × 3).
inline std::pair<torch::Tensor, torch::Tensor> tiny_batch(int rank, int step, int64_t n = 4) {
  const float base = 0.1f * rank + 0.013f * step;
  auto x = torch::arange(n * 5, torch::kFloat).view({n, 5}).mul(0.21f).add(base).cos();
  auto y = torch::arange(n * 3, torch::kFloat).view({n, 3}).mul(0.17f).sub(base).sin();
  return {x, y};
}

inline std::vector<zero::NamedParam> named_params(torch::nn::Module& m) {
  std::vector<zero::NamedParam> out;
  for (auto& p : m.named_parameters()) out.push_back({p.key(), p.value()});
  return out;
}

}  // namespace zrt::test
