// Model states of ZeRO stages 0–2 over flat groups (zero/flat_layout.h): the GradReducer's
// gradient partitions, fp32 master partitions (aliasing the parameters themselves in pure fp32
// without offload), and the post-step all-gather of stages 1/2. With offload_optimizer the
// masters live on the CPU (pinned when CUDA is in use) and gradients are copied there first; with
// its device "nvme" they live in a swap space (Note [Swapped masters]).
#pragma once

#include <memory>
#include <vector>

#include "comm/comm.h"
#include "runtime/model_states.h"
#include "zero/flat_layout.h"
#include "zero/grad_reducer.h"

namespace zrt::runtime {

class FlatModelStates final : public ModelStates {
 public:
  // Lays out and binds `groups` (parameters become views of flat buffers), then builds the
  // reducer and the fp32 masters. The parameters must already hold their final (broadcast)
  // values. `zero` and `gradients` are the config's (ResolvedConfig::zero, gradient_options()).
  FlatModelStates(std::vector<std::vector<zero::NamedParam>> groups,
                  std::shared_ptr<comm::Comm> comm, const zero::ZeroOptions& zero,
                  const zero::GradientOptions& gradients, const aio::AioOptions& aio = {});

  void begin_backward(bool boundary) override { reducer_->begin_backward(boundary); }
  void end_backward() override { reducer_->end_backward(); }
  std::vector<OptimTarget>& targets() override { return targets_; }
  std::shared_ptr<optim::SwapSpace> swap_space() const override { return swap_; }
  void before_optimizer_step() override;
  void after_optimizer_step() override;
  void zero_grad() override { reducer_->zero_grad(); }
  bool grads_replicated() const override { return !policy_.shard_optimizer; }
  ModelStateBytes memory() const override;
  std::vector<GroupPartition> group_partitions() const override;
  bool partitions_params() const override { return false; }
  void gather_all_params() override {}
  void release_gathered_params() override {}
  void write_whole_params(const WholeParamFn& whole) override;

 private:
  std::shared_ptr<comm::Comm> comm_;
  zero::StagePolicy policy_;
  int64_t allgather_bucket_elements_ = 1;  // allgather_bucket_size, at least 1
  std::vector<zero::FlatGroup> groups_;
  std::unique_ptr<zero::GradReducer> reducer_;
  std::vector<OptimTarget> targets_;
  std::vector<at::Tensor> device_partitions_;  // the parameters' own partition views
  std::vector<bool> master_aliases_params_;
  std::shared_ptr<optim::SwapSpace> swap_;  // offload_optimizer.device "nvme"
};

}  // namespace zrt::runtime
