#include "optim/swapped_adam.h"

#include <cmath>

#include <ATen/ATen.h>

#include "core/error.h"
#include "kernels/adam_launch.h"

namespace zrt::optim {

SwappedAdam::SwappedAdam(std::vector<AdamParamGroup> groups, std::shared_ptr<SwapSpace> space)
    : GroupedOptimizer(std::move(groups), /*fp32_params_only=*/true), space_(std::move(space)) {
  ZRT_INTERNAL_ASSERT(space_ != nullptr, "SwappedAdam without a SwapSpace");
  ZRT_CHECK(static_cast<int>(groups_.size()) == space_->num_groups(),
            "SwappedAdam: ", groups_.size(), " param groups, the swap space has ",
            space_->num_groups());
  for (size_t g = 0; g < groups_.size(); ++g) {
    ZRT_CHECK(groups_[g].size() == 1, "SwappedAdam: param group ", g, " has ", groups_[g].size(),
              " params; a swapped group is one flat partition");
    const OptimParam& p = groups_[g][0];
    ZRT_CHECK(p.param.is_meta() && p.param.numel() == space_->numel(static_cast<int>(g)),
              "SwappedAdam: param group ", g, " must be a meta tensor of ",
              space_->numel(static_cast<int>(g)), " elements (its values are in the swap space)");
  }
  has_state_.assign(groups_.size(), false);
}

void SwappedAdam::set_betas(size_t group, double beta1, double beta2) {
  AdamOptions o = options(group);
  o.beta1 = beta1;
  o.beta2 = beta2;
  set_options(group, o);
}

void SwappedAdam::step(double grad_scale) {
  ZRT_CHECK(std::isfinite(grad_scale), "FusedAdam::step: grad_scale ", grad_scale,
            " is not finite");
  for (size_t g = 0; g < groups_.size(); ++g) {
    ++steps_[g];
    const OptimParam& p = groups_[g][0];
    if (!p.grad.defined()) continue;
    const kernels::AdamStepArgs args = adam_step_args(options_[g], steps_[g], grad_scale);
    const at::Tensor& copy = p.param_copy;
    const bool copy_fp32 = copy.defined() && copy.scalar_type() == at::kFloat;
    const bool copy_swapped = copy.defined() && copy.is_meta();
    space_->stream(static_cast<int>(g), [&](SwapChunk& c) {
      kernels::AdamTensors t;
      t.param = c.state(SwapState::kMaster);
      t.grad = p.grad.narrow(0, c.offset, c.numel);
      t.exp_avg = c.state(SwapState::kExpAvg);
      t.exp_avg_sq = c.state(SwapState::kExpAvgSq);
      if (copy_swapped && !copy_fp32) {
        t.param_copy = at::empty({c.numel}, copy.options().device(at::kCPU));
      } else if (copy.defined() && !copy_fp32) {
        t.param_copy = copy.narrow(0, c.offset, c.numel);
      }
      kernels::adam_step_cpu({t}, args, kernels::CpuAdamConfig{});
      if (copy_swapped) {
        space_->write_param_copy(static_cast<int>(g), c.offset, copy_fp32 ? t.param : t.param_copy);
      } else if (copy_fp32) {
        copy.narrow(0, c.offset, c.numel).copy_(t.param);
      }
    });
    has_state_[g] = true;
  }
}

OptimizerState SwappedAdam::state_dict() const {
  return state_dict_with([&](size_t g, size_t, ParamState& out) {
    if (!has_state_[g]) return false;
    // Views of the swap files (never whole in memory): a checkpoint writer reads them once.
    out.exp_avg = space_->map_state(static_cast<int>(g), SwapState::kExpAvg);
    out.exp_avg_sq = space_->map_state(static_cast<int>(g), SwapState::kExpAvgSq);
    return true;
  });
}

void SwappedAdam::load_state_dict(const OptimizerState& state) {
  const auto matched = match_and_check(state);
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamState* saved = matched[g][0];
    if (saved == nullptr) continue;
    const int64_t n = groups_[g][0].param.numel();
    for (const auto& [t, what] :
         {std::pair{&saved->exp_avg, "exp_avg"}, std::pair{&saved->exp_avg_sq, "exp_avg_sq"}}) {
      ZRT_CHECK_AS(CheckpointError, t->defined() && t->is_floating_point() && t->numel() == n,
                   "param group ", g, " param 0: ", what, " must be a floating-point tensor of ", n,
                   " elements, got ", t->defined() ? t->sizes() : at::IntArrayRef{});
    }
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    const bool torch_adam = options_[g].torch_adam;
    options_[g] = saved_options(state, g);
    options_[g].torch_adam = torch_adam;
    const ParamState* saved = matched[g][0];
    const int group = static_cast<int>(g);
    if (saved == nullptr) {
      steps_[g] = 0;
      if (has_state_[g]) {
        space_->fill_zero(group, SwapState::kExpAvg);
        space_->fill_zero(group, SwapState::kExpAvgSq);
      }
      has_state_[g] = false;
      continue;
    }
    space_->write(group, SwapState::kExpAvg, 0, saved->exp_avg);
    space_->write(group, SwapState::kExpAvgSq, 0, saved->exp_avg_sq);
    steps_[g] = saved->step;
    has_state_[g] = true;
  }
}

}  // namespace zrt::optim
