#include "runtime/model_states.h"

#include "core/error.h"
#include "optim/swap_space.h"

namespace zrt::runtime {

at::Tensor master_values(ModelStates& states, size_t group) {
  const at::Tensor& master = states.targets().at(group).master;
  if (!master.is_meta()) return master;
  const std::shared_ptr<optim::SwapSpace> swap = states.swap_space();
  ZRT_INTERNAL_ASSERT(swap != nullptr, "a meta master without a swap space");
  return swap->read_all(static_cast<int>(group), optim::SwapState::kMaster);
}

void store_master(ModelStates& states, size_t group, const at::Tensor& values) {
  at::NoGradGuard no_grad;
  const at::Tensor& master = states.targets().at(group).master;
  ZRT_INTERNAL_ASSERT(values.numel() == master.numel(), "store_master: ", values.numel(),
                      " values for a master of ", master.numel());
  if (values.is_same(master)) return;
  if (!master.is_meta()) {
    master.copy_(values.reshape(master.sizes()));
    return;
  }
  const std::shared_ptr<optim::SwapSpace> swap = states.swap_space();
  ZRT_INTERNAL_ASSERT(swap != nullptr, "a meta master without a swap space");
  swap->write(static_cast<int>(group), optim::SwapState::kMaster, 0, values);
}

c10::Device optimizer_device(const OptimTarget& target) {
  return target.master.is_meta() ? c10::Device(at::kCPU) : target.master.device();
}

int64_t resident_bytes(const at::Tensor& t) {
  return t.defined() && !t.is_meta() ? static_cast<int64_t>(t.nbytes()) : 0;
}

void count_swap(const optim::SwapSpace* swap, ModelStateBytes& m) {
  if (swap == nullptr) return;
  m.swap_buffers = swap->stats().buffer_bytes;
  for (int g = 0; g < swap->num_groups(); ++g) {
    m.swapped += optim::kNumSwapStates * swap->numel(g) * int64_t{sizeof(float)};
  }
}

std::shared_ptr<optim::SwapSpace> make_swap_space(const zero::ZeroOptions& zero,
                                                  const aio::AioOptions& aio, int rank,
                                                  const std::vector<int64_t>& group_numels) {
  if (zero.offload_optimizer.device != zero::OffloadDevice::kNvme) return nullptr;
  optim::SwapSpaceOptions o;
  o.nvme_path = zero.offload_optimizer.nvme_path;
  o.rank = rank;
  o.aio = aio;
  o.sub_group_size = zero.sub_group_size;
  o.buffer_count = zero.offload_optimizer.buffer_count;
  o.pipeline_read = zero.offload_optimizer.pipeline_read;
  o.pipeline_write = zero.offload_optimizer.pipeline_write;
  return std::make_shared<optim::SwapSpace>(o, group_numels);
}

void masters_from_params(ModelStates& states) {
  const std::vector<GroupPartition> groups = states.group_partitions();
  for (size_t g = 0; g < states.targets().size(); ++g) store_master(states, g, groups.at(g).lp);
}

void params_from_masters(ModelStates& states) {
  at::NoGradGuard no_grad;
  const std::vector<GroupPartition> groups = states.group_partitions();
  auto& targets = states.targets();
  for (size_t g = 0; g < targets.size(); ++g) {
    at::Tensor lp = groups.at(g).lp;
    const at::Tensor master = master_values(states, g);
    if (!master.is_same(lp)) lp.copy_(master);
    // A staging copy of the low-precision partition (offloaded masters with the partition on a
    // device) is what after_optimizer_step copies to the device: it must hold the same values.
    const at::Tensor& staged = targets[g].lp;
    if (staged.defined() && !staged.is_same(lp) && !staged.is_same(master)) {
      staged.copy_(master);
    }
  }
  states.after_optimizer_step();
}

}  // namespace zrt::runtime
