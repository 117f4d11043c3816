// Model states of ZeRO stage 3 (zero/stage3_layout.h, zero/param_coordinator.h): every rank holds
// only its partitions of parameters, gradients, fp32 masters and moments (16Ψ/N in mixed
// precision); units gather their parameters around their forward and backward. The optimizer
// steps each group's partition flat (DeepSpeed's sub-group flats) and writes the low-precision
// partitions in the same pass; persistent parameters are gathered again after the step. With
// offload_optimizer.device "nvme" the masters and moments live in a swap space (Note [Swapped
// masters]) and the optimizer streams them sub-group by sub-group; with offload_param.device "nvme"
// the parameters' partitions live on disk as well (Note [Swapped partitions] in
// zero/param_swapper.h).
#pragma once

#include <memory>
#include <vector>

#include "comm/comm.h"
#include "runtime/model_states.h"
#include "zero/param_coordinator.h"
#include "zero/stage3_layout.h"

namespace zrt::runtime {

class Stage3ModelStates final : public ModelStates {
 public:
  // Takes ownership of a partitioned layout and attaches the coordinator to `units`. `zero` and
  // `gradients` are the config's (ResolvedConfig::zero, gradient_options()). `inference`: forward
  // only (no optimizer), so no gradient partitions and no fp32 masters (the partitions are the
  // targets' masters, in the model's dtype); a backward through the model is an error.
  Stage3ModelStates(std::unique_ptr<zero::Stage3Layout> layout,
                    std::vector<zero::ShardUnitBase*> units, std::shared_ptr<comm::Comm> comm,
                    const zero::ZeroOptions& zero, const zero::GradientOptions& gradients,
                    bool inference = false, const aio::AioOptions& aio = {});
  ~Stage3ModelStates() override;

  void begin_backward(bool boundary) override;
  void end_backward() override { coordinator_->end_backward(); }
  std::vector<OptimTarget>& targets() override { return targets_; }
  std::shared_ptr<optim::SwapSpace> swap_space() const override { return swap_; }
  void before_optimizer_step() override;
  void after_optimizer_step() override;
  void zero_grad() override { coordinator_->zero_grad(); }
  bool grads_replicated() const override { return false; }
  ModelStateBytes memory() const override;
  std::vector<GroupPartition> group_partitions() const override;
  std::vector<GroupPartition> frozen_partitions() const override;
  void frozen_partitions_written() override;
  bool partitions_params() const override { return true; }
  void gather_all_params() override { coordinator_->gather_all(); }
  void release_gathered_params() override;
  void write_whole_params(const WholeParamFn& whole) override;
  at::Tensor read_lp(size_t group, int64_t offset, int64_t n) const override;
  void write_lp(size_t group, int64_t offset, const at::Tensor& values) override;

  zero::Stage3Layout& layout() { return *layout_; }
  zero::ParamCoordinator& coordinator() { return *coordinator_; }

 private:
  GroupPartition describe_flat(int flat) const;

  std::unique_ptr<zero::Stage3Layout> layout_;
  std::unique_ptr<zero::ParamCoordinator> coordinator_;
  std::vector<zero::ShardUnitBase*> units_;
  std::vector<OptimTarget> targets_;
  std::shared_ptr<optim::SwapSpace> swap_;  // offload_optimizer.device "nvme"
};

}  // namespace zrt::runtime
