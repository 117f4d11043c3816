#include "runtime/model_states.h"

#include <algorithm>

#include "core/error.h"
#include "core/shard.h"
#include "optim/swap_space.h"

namespace zrt::runtime {

at::Tensor master_values(ModelStates& states, size_t group) {
  const at::Tensor& master = states.targets().at(group).master;
  if (!master.is_meta()) return master;
  return master_range(states, group, 0, master.numel());
}

namespace {

bool same_memory(const at::Tensor& a, const at::Tensor& b) {
  return a.numel() == 0 || (!a.is_meta() && !b.is_meta() && a.data_ptr() == b.data_ptr());
}

}  // namespace

void store_master(ModelStates& states, size_t group, const at::Tensor& values, int64_t offset) {
  at::NoGradGuard no_grad;
  const at::Tensor& master = states.targets().at(group).master;
  ZRT_INTERNAL_ASSERT(offset >= 0 && offset + values.numel() <= master.numel(),
                      "store_master: ", values.numel(), " values at ", offset, " for a master of ",
                      master.numel());
  if (!master.is_meta()) {
    at::Tensor target = master.narrow(0, offset, values.numel());
    if (!same_memory(values, target)) target.copy_(values.reshape({-1}));
    return;
  }
  const std::shared_ptr<optim::SwapSpace> swap = states.swap_space();
  if (swap == nullptr) {  // inference on swapped partitions: they are the masters
    states.write_lp(group, offset, values);
    return;
  }
  swap->write(static_cast<int>(group), optim::SwapState::kMaster, offset, values);
}

at::Tensor master_to_read(ModelStates& states, size_t group) {
  const at::Tensor& master = states.targets().at(group).master;
  const std::shared_ptr<optim::SwapSpace> swap = states.swap_space();
  if (!master.is_meta() || swap == nullptr) return master_values(states, group);
  return swap->map_state(static_cast<int>(group), optim::SwapState::kMaster);
}

at::Tensor master_range(ModelStates& states, size_t group, int64_t offset, int64_t n) {
  const at::Tensor& master = states.targets().at(group).master;
  if (!master.is_meta()) return master.narrow(0, offset, n);
  const std::shared_ptr<optim::SwapSpace> swap = states.swap_space();
  if (swap == nullptr) return states.read_lp(group, offset, n);  // inference: the partitions
  at::Tensor out = at::empty({n}, at::TensorOptions().dtype(at::kFloat));
  swap->read(static_cast<int>(group), optim::SwapState::kMaster, offset, out);
  return out;
}

at::Tensor ModelStates::read_lp(size_t group, int64_t offset, int64_t n) const {
  return group_partitions().at(group).lp.narrow(0, offset, n);
}

void ModelStates::write_lp(size_t group, int64_t offset, const at::Tensor& values) {
  at::NoGradGuard no_grad;
  at::Tensor target = group_partitions().at(group).lp.narrow(0, offset, values.numel());
  if (!same_memory(values, target)) target.copy_(values.reshape({-1}));
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

namespace {

template <typename Fn>
void for_each_chunk(int64_t n, Fn&& fn) {
  for (int64_t offset = 0; offset < n; offset += kStateChunk)
    fn(offset, std::min(kStateChunk, n - offset));
}

}  // namespace

void masters_from_params(ModelStates& states) {
  for (size_t g = 0; g < states.targets().size(); ++g) {
    for_each_chunk(states.targets()[g].master.numel(), [&](int64_t offset, int64_t n) {
      store_master(states, g, states.read_lp(g, offset, n), offset);
    });
  }
}

void params_from_masters(ModelStates& states) {
  at::NoGradGuard no_grad;
  auto& targets = states.targets();
  for (size_t g = 0; g < targets.size(); ++g) {
    // A staging copy of the low-precision partition (offloaded masters with the partition on a
    // device) is what after_optimizer_step copies to the device: it must hold the same values.
    const at::Tensor& staged = targets[g].lp;
    const bool stage = staged.defined() && !staged.is_meta();
    for_each_chunk(targets[g].master.numel(), [&](int64_t offset, int64_t n) {
      const at::Tensor master = master_range(states, g, offset, n);
      states.write_lp(g, offset, master);
      if (stage) {
        at::Tensor s = staged.narrow(0, offset, n);
        if (!same_memory(s, master)) s.copy_(master);
      }
    });
  }
  states.after_optimizer_step();
}

FrozenPlaces frozen_places(const ModelStates& states) {
  FrozenPlaces out;
  const size_t first = states.group_partitions().size();
  const std::vector<GroupPartition> frozen = states.frozen_partitions();
  for (size_t f = 0; f < frozen.size(); ++f) {
    int64_t offset = 0;
    for (const auto& [name, shape] : frozen[f].params) {
      out[name] = {first + f, offset};
      offset += param_partition_size(ckpt::shape_numel(shape), frozen[f].world_size);
    }
  }
  return out;
}

void fill_frozen_partitions(ModelStates& states, const ckpt::RangeReader& read,
                            const std::string& context) {
  at::NoGradGuard no_grad;
  const std::vector<GroupPartition> frozen = states.frozen_partitions();
  if (frozen.empty()) return;
  const size_t first = states.group_partitions().size();
  for (size_t f = 0; f < frozen.size(); ++f) {
    const GroupPartition& gp = frozen[f];
    int64_t offset = 0;
    for (const auto& entry : gp.params) {
      const int64_t pn = param_partition_size(ckpt::shape_numel(entry.second), gp.world_size);
      // Starts as the partition, so that a parameter without a value keeps it.
      at::Tensor part = states.read_lp(first + f, offset, pn).to(at::kCPU, /*non_blocking=*/false,
                                                                  /*copy=*/true);
      ckpt::fill_partition(gp.layout, {entry}, gp.rank, gp.world_size, read, part, context);
      states.write_lp(first + f, offset, part);
      offset += pn;
    }
  }
}

}  // namespace zrt::runtime
