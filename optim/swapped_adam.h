// SwappedAdam: FusedAdam's update (the same CPU kernel, so bitwise the same results) over fp32
// masters and moments kept on a fast disk in a SwapSpace, one streamed sub-group at a time
// (ZeRO-Infinity's optimizer offload). Its state_dict is FusedAdam's, so checkpoints move freely
// between NVMe, CPU and no offload.
#pragma once

#include <memory>
#include <vector>

#include "optim/fused_adam.h"
#include "optim/swap_space.h"

namespace zrt::optim {

class SwappedAdam final : public GroupedOptimizer<AdamOptions> {
 public:
  // One param per group, group g of `space`: `param` a meta fp32 tensor of the group's numel
  // (Note [Swapped params] in optim/optimizer.h), `grad` on the CPU, `param_copy` the CPU
  // partition refreshed from the updated masters (fp32, bf16 or fp16; may be undefined).
  // Throws zrt::Error when the groups do not match the space.
  SwappedAdam(std::vector<AdamParamGroup> groups, std::shared_ptr<SwapSpace> space);

  // Streams every group with a gradient through the space and the CPU Adam kernel.
  void step(double grad_scale = 1.0) override;

  bool has_betas() const override { return true; }
  void set_betas(size_t group, double beta1, double beta2) override;

  // The moments are views of their swap files (SwapSpace::map_state): read them before the next
  // step; they are never whole in memory, and writing into them changes nothing.
  OptimizerState state_dict() const override;
  // Validates everything first (Note [Optimizer state]), then writes the moments to the space.
  void load_state_dict(const OptimizerState& state) override;

  SwapSpace& space() const { return *space_; }

 private:
  std::shared_ptr<SwapSpace> space_;
  std::vector<bool> has_state_;  // per group: moments written by a step or a load
};

}  // namespace zrt::optim
