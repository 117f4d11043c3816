// FusedAdam: per-group hyper-parameters and step counts, lazy state, dispatch of each group to
// the CPU or CUDA kernel, and the optimizer state round trip.
#include "optim/fused_adam.h"

#include <cmath>

#include <ATen/ATen.h>

#include "core/error.h"
#include "kernels/adam_launch.h"

namespace zrt::optim {

std::string options_problem(const AdamOptions& o) {
  if (!(o.lr >= 0.0)) return str("invalid learning rate ", o.lr, " (must be >= 0)");
  if (!(o.eps >= 0.0)) return str("invalid eps ", o.eps, " (must be >= 0)");
  if (!(o.beta1 >= 0.0 && o.beta1 < 1.0))
    return str("invalid beta1 ", o.beta1, " (must be in [0, 1))");
  if (!(o.beta2 >= 0.0 && o.beta2 < 1.0))
    return str("invalid beta2 ", o.beta2, " (must be in [0, 1))");
  if (!(o.weight_decay >= 0.0))
    return str("invalid weight_decay ", o.weight_decay, " (must be >= 0)");
  return "";
}

kernels::AdamStepArgs adam_step_args(const AdamOptions& o, int64_t step, double grad_scale) {
  kernels::AdamStepArgs a;
  a.lr = o.lr;
  a.beta1 = o.beta1;
  a.beta2 = o.beta2;
  a.eps = o.eps;
  a.weight_decay = o.weight_decay;
  a.bias_correction = o.bias_correction;
  a.adam_w_mode = o.adam_w_mode;
  a.step = step;
  a.grad_scale = grad_scale;
  return a;
}

namespace {

void check_state_tensor(const at::Tensor& t, const at::Tensor& param, const char* what, size_t g,
                        size_t i) {
  ZRT_CHECK_AS(CheckpointError, t.defined(), "param group ", g, " param ", i, ": ", what,
               " is missing from the optimizer state");
  ZRT_CHECK_AS(CheckpointError, t.is_floating_point(), "param group ", g, " param ", i, ": ", what,
               " must be a floating-point tensor, got ", t.scalar_type());
  ZRT_CHECK_AS(CheckpointError, t.numel() == param.numel(), "param group ", g, " param ", i, ": ",
               what, " has shape ", t.sizes(), " (", t.numel(), " elements), the param has shape ",
               param.sizes(), " (", param.numel(), ")");
}

}  // namespace

void check_adam_options(const AdamOptions& options) {
  const std::string problem = options_problem(options);
  ZRT_CHECK(problem.empty(), "FusedAdam: ", problem);
}

FusedAdam::FusedAdam(std::vector<AdamParamGroup> groups)
    : GroupedOptimizer(std::move(groups), /*fp32_params_only=*/true) {
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].size(); ++i) {
      ZRT_CHECK(!groups_[g][i].param.is_meta(), "FusedAdam: param group ", g, " param ", i,
                " is a meta tensor (swapped masters need SwappedAdam)");
    }
  }
  for (const auto& params : groups_) state_.emplace_back(params.size());
}

void FusedAdam::set_betas(size_t group, double beta1, double beta2) {
  AdamOptions o = options(group);
  o.beta1 = beta1;
  o.beta2 = beta2;
  set_options(group, o);
}

const at::Tensor& FusedAdam::exp_avg(size_t group, size_t index) const {
  param(group, index);  // bounds check
  return state_[group][index].exp_avg;
}

const at::Tensor& FusedAdam::exp_avg_sq(size_t group, size_t index) const {
  param(group, index);
  return state_[group][index].exp_avg_sq;
}

void FusedAdam::step(double grad_scale) {
  ZRT_CHECK(std::isfinite(grad_scale), "FusedAdam::step: grad_scale ", grad_scale,
            " is not finite");
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (groups_[g].empty()) continue;
    ++steps_[g];
    const kernels::AdamStepArgs args = adam_step_args(options_[g], steps_[g], grad_scale);
    std::vector<kernels::AdamTensors> cpu;
    std::vector<kernels::AdamTensors> cuda;
    for (size_t i = 0; i < groups_[g].size(); ++i) {
      const OptimParam& p = groups_[g][i];
      if (!p.grad.defined()) continue;
      State& s = state_[g][i];
      if (!s.exp_avg.defined()) {
        s.exp_avg = at::zeros_like(p.param, at::MemoryFormat::Contiguous);
        s.exp_avg_sq = at::zeros_like(p.param, at::MemoryFormat::Contiguous);
      }
      (p.param.is_cuda() ? cuda : cpu)
          .push_back({p.param, p.grad, s.exp_avg, s.exp_avg_sq, p.param_copy});
    }
    if (!cpu.empty()) kernels::adam_step_cpu(cpu, args, kernels::CpuAdamConfig{});
    if (!cuda.empty()) kernels::adam_step_cuda(cuda, args);
  }
}

OptimizerState FusedAdam::state_dict() const {
  return state_dict_with([&](size_t g, size_t i, ParamState& out) {
    const State& s = state_[g][i];
    out.exp_avg = s.exp_avg;
    out.exp_avg_sq = s.exp_avg_sq;
    return s.exp_avg.defined();
  });
}

void FusedAdam::load_state_dict(const OptimizerState& state) {
  // Validate everything before changing anything (Note [Optimizer state]).
  const auto matched = match_and_check(state);
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].size(); ++i) {
      if (matched[g][i] == nullptr) continue;
      check_state_tensor(matched[g][i]->exp_avg, groups_[g][i].param, "exp_avg", g, i);
      check_state_tensor(matched[g][i]->exp_avg_sq, groups_[g][i].param, "exp_avg_sq", g, i);
    }
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    const bool torch_adam = options_[g].torch_adam;
    options_[g] = saved_options(state, g);
    options_[g].torch_adam = torch_adam;
    steps_[g] = 0;
    for (size_t i = 0; i < groups_[g].size(); ++i) {
      State& s = state_[g][i];
      const ParamState* saved = matched[g][i];
      if (saved == nullptr) {
        s = State{};
        continue;
      }
      const at::Tensor& param = groups_[g][i].param;
      if (!s.exp_avg.defined()) {
        s.exp_avg = at::empty_like(param, at::MemoryFormat::Contiguous);
        s.exp_avg_sq = at::empty_like(param, at::MemoryFormat::Contiguous);
      }
      s.exp_avg.copy_(saved->exp_avg.reshape(param.sizes()));
      s.exp_avg_sq.copy_(saved->exp_avg_sq.reshape(param.sizes()));
      steps_[g] = saved->step;  // the last param with state wins (Note [Optimizer state])
    }
  }
}

}  // namespace zrt::optim
