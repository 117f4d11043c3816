// The MLP regression model of the zrt-train example (--model mlp) and its data: an input layer
// (16 -> width), residual blocks x + tanh(Linear(width, width)(x)), each a ZeRO-3 sharding unit
// (zrt::ShardUnit), and an output layer (width -> 2); the targets are
// y = [sin(2 x.a), 0.5 cos(3 x.b)] of x in [-1, 1]^16. Shared by tools/zrt_train.cpp and
// bench/zero_bench.cpp; tests/peers/twins.py has the Python twin.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "zero/shard_unit.h"

namespace zrt::models {

struct MlpBlockImpl : torch::nn::Module {
  explicit MlpBlockImpl(int64_t width) {
    fc = register_module("fc", torch::nn::Linear(width, width));
  }
  torch::Tensor forward(const torch::Tensor& x) { return x + torch::tanh(fc->forward(x)); }
  torch::nn::Linear fc{nullptr};
};

struct MlpImpl : torch::nn::Module {
  MlpImpl(int64_t width, int64_t layers) {
    in = register_module("input", torch::nn::Linear(16, width));
    for (int64_t i = 0; i < layers; ++i) {
      blocks.push_back(register_module("h" + std::to_string(i),
                                       std::make_shared<zrt::ShardUnit<MlpBlockImpl>>(width)));
    }
    out = register_module("output", torch::nn::Linear(width, 2));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = in->forward(x);
    for (auto& b : blocks) x = b->forward(x);
    return out->forward(x).to(torch::kFloat);
  }
  int64_t num_params() {
    int64_t n = 0;
    for (auto& p : parameters()) n += p.numel();
    return n;
  }
  torch::nn::Linear in{nullptr}, out{nullptr};
  std::vector<std::shared_ptr<zrt::ShardUnit<MlpBlockImpl>>> blocks;
};

// n examples (x: (n, 16), y: (n, 2)) from torch's CPU generator seeded with `seed`; twins.py's
// regression_data(n, seed) draws the same numbers.
inline std::pair<at::Tensor, at::Tensor> regression_data(int64_t n, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor x = at::rand({n, 16}, gen) * 2 - 1;
  auto a = at::linspace(-1, 1, 16).view({16, 1});
  auto b = at::linspace(1, -1, 16).view({16, 1});
  at::Tensor y = at::cat({at::sin(x.matmul(a) * 2), 0.5 * at::cos(x.matmul(b) * 3)}, 1);
  return {x, y};
}

}  // namespace zrt::models
