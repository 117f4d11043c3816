// SGD with torch.optim.SGD's semantics (momentum, dampening, nesterov, weight_decay; the
// momentum buffer starts as a copy of the first gradient), which DeepSpeed builds for
// "type": "SGD" when zero_allow_untested_optimizer is set. Plain ATen ops, CPU or CUDA.
#pragma once

#include <vector>

#include "optim/optimizer.h"

namespace zrt::optim {

struct SgdParamGroup {
  std::vector<OptimParam> params;
  SgdOptions options;
};

// Throws zrt::Error for lr < 0, momentum < 0, weight_decay < 0, or nesterov without momentum or
// with dampening (torch's rules).
void check_sgd_options(const SgdOptions& options);

// Note [SGD step]: per param with a gradient, as torch.optim.SGD (maximize off):
//   d = g·grad_scale (+ λ·p);  b = d at the first step, else μ·b + (1 − dampening)·d;
//   d = d + μ·b (nesterov) or b;  p = p − lr·d;  then param_copy = p rounded, if given.
// Gradients of another dtype than the param are converted first.
class Sgd final : public Optimizer {
 public:
  explicit Sgd(std::vector<SgdParamGroup> groups);

  const char* name() const override { return "SGD"; }
  void step(double grad_scale = 1.0) override;

  double lr(size_t group) const override { return options(group).lr; }
  void set_lr(size_t group, double lr) override;
  double weight_decay(size_t group) const override { return options(group).weight_decay; }
  void set_weight_decay(size_t group, double weight_decay) override;
  int64_t step_count(size_t group) const override;

  const SgdOptions& options(size_t group) const;
  void set_options(size_t group, const SgdOptions& options);
  // The momentum buffer of a param; undefined before its first step or without momentum.
  const at::Tensor& momentum_buffer(size_t group, size_t index) const;

  OptimizerState state_dict() const override;
  void load_state_dict(const OptimizerState& state) override;

 private:
  static std::vector<std::vector<OptimParam>> take_params(std::vector<SgdParamGroup>& groups);

  std::vector<SgdOptions> options_;
  std::vector<int64_t> steps_;
  std::vector<std::vector<at::Tensor>> momentum_;
};

}  // namespace zrt::optim
