// FusedAdam: Adam / AdamW with DeepSpeed's semantics (spec/deepspeed.md §6) over fp32 master
// tensors, one fused pass per group: the CPU SIMD kernel for CPU tensors (DeepSpeedCPUAdam's
// role), the CUDA multi-tensor kernel for CUDA tensors (FusedAdam's role). The same arithmetic
// on both (Note [Adam element math] in kernels/adam_math.h).
#pragma once

#include <vector>

#include "kernels/cpu_adam.h"
#include "optim/optimizer.h"

namespace zrt::optim {

struct AdamParamGroup {
  std::vector<OptimParam> params;
  AdamOptions options;
};

// Throws zrt::Error for lr < 0, eps < 0, betas outside [0, 1) or weight_decay < 0.
void check_adam_options(const AdamOptions& options);

// Note [FusedAdam steps]:
// Like DeepSpeed's FusedAdam, each group has one step count t, incremented once per step() (for a
// group with at least one param) and used for every tensor of the group; the optimizer state is
// created (zeros) at a param's first step with a gradient. m and v are fp32 whatever the
// gradient dtype; the update is the kernels' (spec §6.2 formulation: ε after bias-correcting
// sqrt(v), decoupled decay as p·(1 − lr·λ) when adam_w_mode, L2 added to g otherwise).
class FusedAdam final : public Optimizer {
 public:
  // Throws zrt::Error for invalid hyper-parameters or tensors (Optimizer's checks; params fp32).
  explicit FusedAdam(std::vector<AdamParamGroup> groups);

  const char* name() const override { return "FusedAdam"; }
  void step(double grad_scale = 1.0) override;

  double lr(size_t group) const override { return options(group).lr; }
  void set_lr(size_t group, double lr) override;
  double weight_decay(size_t group) const override { return options(group).weight_decay; }
  void set_weight_decay(size_t group, double weight_decay) override;
  bool has_betas() const override { return true; }
  void set_betas(size_t group, double beta1, double beta2) override;
  int64_t step_count(size_t group) const override;

  const AdamOptions& options(size_t group) const;
  void set_options(size_t group, const AdamOptions& options);

  // m and v of a param; undefined before its first step.
  const at::Tensor& exp_avg(size_t group, size_t index) const;
  const at::Tensor& exp_avg_sq(size_t group, size_t index) const;

  // Threads, ISA and tiling of the CPU kernel (defaults: ZRT_NUM_THREADS / LibTorch's intra-op
  // thread count, ZRT_CPU_ADAM_ISA / CPUID). For benchmarks and tests.
  void set_cpu_config(const kernels::CpuAdamConfig& config) { cpu_config_ = config; }

  OptimizerState state_dict() const override;
  void load_state_dict(const OptimizerState& state) override;

 private:
  struct State {
    at::Tensor exp_avg;
    at::Tensor exp_avg_sq;
  };
  static std::vector<std::vector<OptimParam>> take_params(std::vector<AdamParamGroup>& groups);

  std::vector<AdamOptions> options_;
  std::vector<int64_t> steps_;
  std::vector<std::vector<State>> state_;
  kernels::CpuAdamConfig cpu_config_;
};

}  // namespace zrt::optim
