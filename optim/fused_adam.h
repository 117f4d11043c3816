// FusedAdam: Adam / AdamW with DeepSpeed's semantics (docs/DEEPSPEED.md §6) over fp32 master
// tensors, one fused pass per group: the CPU SIMD kernel for CPU tensors (DeepSpeedCPUAdam's
// role), the CUDA multi-tensor kernel for CUDA tensors (FusedAdam's role). The same arithmetic
// on both (Note [Adam element math] in kernels/adam_math.h).
#pragma once

#include <vector>

#include "kernels/adam_math.h"
#include "optim/grouped_optimizer.h"

namespace zrt::optim {

using AdamParamGroup = OptimizerGroup<AdamOptions>;

// The kernel's arguments for one step of a group (step: t after incrementing).
kernels::AdamStepArgs adam_step_args(const AdamOptions& options, int64_t step, double grad_scale);

// Throws zrt::Error for invalid hyper-parameters.
void check_adam_options(const AdamOptions& options);

class FusedAdam final : public GroupedOptimizer<AdamOptions> {
 public:
  // Throws zrt::Error for invalid hyper-parameters or tensors (Optimizer's checks; params fp32).
  explicit FusedAdam(std::vector<AdamParamGroup> groups);

  void step(double grad_scale = 1.0) override;

  bool has_betas() const override { return true; }
  void set_betas(size_t group, double beta1, double beta2) override;

  // m and v of a param; undefined before its first step.
  const at::Tensor& exp_avg(size_t group, size_t index) const;
  const at::Tensor& exp_avg_sq(size_t group, size_t index) const;

  OptimizerState state_dict() const override;
  void load_state_dict(const OptimizerState& state) override;

 private:
  struct State {
    at::Tensor exp_avg;
    at::Tensor exp_avg_sq;
  };
  std::vector<std::vector<State>> state_;
};

}  // namespace zrt::optim
