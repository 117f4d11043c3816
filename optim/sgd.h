// SGD with torch.optim.SGD's semantics (momentum, dampening, nesterov, weight_decay; the
// momentum buffer starts as a copy of the first gradient), which DeepSpeed builds for
// "type": "SGD" when zero_allow_untested_optimizer is set. Plain ATen ops, CPU or CUDA.
#pragma once

#include <vector>

#include "optim/grouped_optimizer.h"

namespace zrt::optim {

using SgdParamGroup = OptimizerGroup<SgdOptions>;

// Throws zrt::Error for lr < 0, momentum < 0, weight_decay < 0, or nesterov without momentum or
// with dampening (torch's rules).
void check_sgd_options(const SgdOptions& options);

// Note [SGD step]: per param with a gradient, as torch.optim.SGD (maximize off):
//   d = g·grad_scale (+ λ·p);  b = d at the first step, else μ·b + (1 − dampening)·d;
//   d = d + μ·b (nesterov) or b;  p = p − lr·d;  then param_copy = p rounded, if given.
// Gradients of another dtype than the param are converted first.
class Sgd final : public GroupedOptimizer<SgdOptions> {
 public:
  explicit Sgd(std::vector<SgdParamGroup> groups);

  void step(double grad_scale = 1.0) override;

  // The momentum buffer of a param; undefined before its first step or without momentum.
  const at::Tensor& momentum_buffer(size_t group, size_t index) const;

  OptimizerState state_dict() const override;
  void load_state_dict(const OptimizerState& state) override;

 private:
  std::vector<std::vector<at::Tensor>> momentum_;
};

}  // namespace zrt::optim
