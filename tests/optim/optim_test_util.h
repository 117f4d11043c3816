// Helpers of the optimizer tests: parameter sets built from sizes, a gradient stream that several
// optimizers can replay identically, and access to torch::optim's per-param state.
#pragma once

#include <string>
#include <type_traits>
#include <vector>

#include <torch/torch.h>

#include "optim/optimizer.h"
#include "tests/support/tensor_compare.h"

namespace zrt::test {

using optim::OptimizerState;

// Parameters of the given sizes with deterministic values (randn from `seed`).
inline std::vector<at::Tensor> make_params(const std::vector<int64_t>& sizes, uint64_t seed) {
  at::manual_seed(seed);
  std::vector<at::Tensor> out;
  for (const int64_t n : sizes) out.push_back(at::randn({n}));
  return out;
}

// The gradient of param `k` at `step`: a function of (seed, step, k) only, so two optimizers fed
// from this stream see the same gradients whatever they do in between.
inline at::Tensor grad_at(int64_t numel, int64_t step, size_t k, uint64_t seed = 99) {
  auto gen =
      at::detail::createCPUGenerator(seed * 1000003 + static_cast<uint64_t>(step) * 7919 + k);
  const double scale = 0.5 + 0.1 * static_cast<double>(step % 7);
  return at::randn({numel}, gen) * scale;
}

inline std::vector<at::Tensor> clone_all(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> out;
  for (const auto& t : ts) out.push_back(t.clone());
  return out;
}

// torch::optim keys its state by the TensorImpl: its address printed through an ostream in
// LibTorch 1.x, the address itself (void*) in 2.x.
template <typename StateMap>
const torch::optim::OptimizerParamState& torch_state_of(const StateMap& state, const at::Tensor& p) {
  using Key = typename StateMap::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    return *state.at(c10::str(p.unsafeGetTensorImpl()));
  } else {
    return *state.at(static_cast<Key>(p.unsafeGetTensorImpl()));
  }
}

template <typename StateT>
const StateT& torch_state(const torch::optim::Optimizer& opt, const at::Tensor& p) {
  return static_cast<const StateT&>(torch_state_of(opt.state(), p));
}

// A deep copy of an optimizer state (state_dict() aliases the live tensors).
inline OptimizerState deep_copy(const OptimizerState& s) {
  OptimizerState out = s;
  for (auto& [k, ps] : out.state) {
    if (ps.exp_avg.defined()) ps.exp_avg = ps.exp_avg.clone();
    if (ps.exp_avg_sq.defined()) ps.exp_avg_sq = ps.exp_avg_sq.clone();
    if (ps.momentum_buffer.defined()) ps.momentum_buffer = ps.momentum_buffer.clone();
  }
  return out;
}

}  // namespace zrt::test
