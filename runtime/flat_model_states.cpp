#include "runtime/flat_model_states.h"

#include <algorithm>

#include "core/error.h"
#include "optim/swap_space.h"
#include "zero/param_gather.h"

namespace zrt::runtime {

FlatModelStates::FlatModelStates(std::vector<std::vector<zero::NamedParam>> groups,
                                 std::shared_ptr<comm::Comm> comm, const zero::ZeroOptions& zero,
                                 const zero::GradientOptions& gradients, const aio::AioOptions& aio)
    : comm_(std::move(comm)),
      policy_(zero::StagePolicy::from_stage(zero.stage)),
      allgather_bucket_elements_(std::max<int64_t>(1, zero.allgather_bucket_size)) {
  groups_.reserve(groups.size());
  for (auto& g : groups) {
    groups_.emplace_back(std::move(g), comm_->size());
    groups_.back().bind();
  }
  reducer_ = std::make_unique<zero::GradReducer>(groups_, comm_,
                                                 zero::ReducerOptions::from(zero, gradients));
  const bool sharded = policy_.shard_optimizer;
  const bool offload = zero.offload_optimizer_enabled();
  for (const zero::FlatGroup& group : groups_) {
    device_partitions_.push_back(sharded ? group.partition_view(comm_->rank()) : group.flat());
  }
  std::vector<int64_t> numels;
  for (const at::Tensor& part : device_partitions_) numels.push_back(part.numel());
  swap_ = make_swap_space(zero, aio, comm_->rank(), numels);
  for (size_t g = 0; g < groups_.size(); ++g) {
    const at::Tensor& part = device_partitions_[g];
    OptimTarget t;
    const bool alias = part.scalar_type() == at::kFloat && !offload;
    master_aliases_params_.push_back(alias);
    if (swap_ != nullptr) {
      // Note [Swapped masters]: the optimizer refreshes the CPU partition (or a CPU staging copy
      // of a device partition) from the streamed masters.
      t.master = at::empty({part.numel()}, at::TensorOptions().dtype(at::kFloat).device(at::kMeta));
      swap_->write(static_cast<int>(g), optim::SwapState::kMaster, 0, part);
      t.lp = part.is_cpu() ? part : at::empty({part.numel()}, part.options().device(at::kCPU));
    } else if (alias) {
      t.master = part;
    } else {
      at::TensorOptions cpu = at::TensorOptions().dtype(at::kFloat).device(at::kCPU);
      const bool pin = offload && zero.offload_optimizer.pin_memory && part.is_cuda();
      t.master = at::empty({part.numel()}, cpu.pinned_memory(pin));
      if (!offload) t.master = t.master.to(part.device());
      t.master.copy_(part);
      if (part.scalar_type() != at::kFloat) {
        // Refreshed in the optimizer pass; a CPU staging copy when the device is not the CPU.
        t.lp = part.device() == t.master.device()
                   ? part
                   : at::empty({part.numel()}, part.options().device(at::kCPU).pinned_memory(pin));
      }
    }
    t.grad = reducer_->grad_partition(static_cast<int>(g));
    targets_.push_back(std::move(t));
  }
}

void FlatModelStates::before_optimizer_step() {
  for (size_t g = 0; g < targets_.size(); ++g) {
    const at::Tensor& reduced = reducer_->grad_partition(static_cast<int>(g));
    const c10::Device device = optimizer_device(targets_[g]);
    if (reduced.device() != device) {
      targets_[g].grad = reduced.to(device);
    } else {
      targets_[g].grad = reduced;
    }
  }
}

void FlatModelStates::after_optimizer_step() {
  at::NoGradGuard no_grad;
  for (size_t g = 0; g < targets_.size(); ++g) {
    OptimTarget& t = targets_[g];
    at::Tensor& part = device_partitions_[g];
    if (master_aliases_params_[g]) continue;
    if (!t.lp.defined()) {
      part.copy_(t.master);  // fp32 parameters with a separate (offloaded) master
    } else if (!t.lp.is_same(part)) {
      part.copy_(t.lp);  // staging copy → device
    }
  }
  if (policy_.shard_optimizer) {
    for (const zero::FlatGroup& group : groups_) {
      zero::all_gather_flat(group, *comm_, allgather_bucket_elements_);
    }
  }
}

ModelStateBytes FlatModelStates::memory() const {
  ModelStateBytes m;
  for (const zero::FlatGroup& g : groups_) m.params += g.flat().nbytes();
  m.grads = reducer_->grad_bytes();
  for (size_t g = 0; g < targets_.size(); ++g) {
    if (!master_aliases_params_[g]) m.master += resident_bytes(targets_[g].master);
    if (targets_[g].lp.defined() && !targets_[g].lp.is_same(device_partitions_[g])) {
      m.master += targets_[g].lp.nbytes();  // offload staging buffers
    }
  }
  count_swap(swap_.get(), m);
  return m;
}

std::vector<GroupPartition> FlatModelStates::group_partitions() const {
  std::vector<GroupPartition> out;
  for (size_t g = 0; g < groups_.size(); ++g) {
    GroupPartition gp;
    for (const zero::FlatParam& p : groups_[g].params()) gp.params.emplace_back(p.name, p.shape);
    if (policy_.shard_optimizer) {  // stages 1/2; stage 0 keeps the whole group on every rank
      gp.rank = comm_->rank();
      gp.world_size = groups_[g].partition().world_size;
    }
    gp.lp = device_partitions_.at(g);
    out.push_back(std::move(gp));
  }
  return out;
}

void FlatModelStates::write_whole_params(const WholeParamFn& whole) {
  at::NoGradGuard no_grad;
  // Every rank holds every parameter whole (a view of its group's flat buffer, which holds this
  // rank's partition): writing the parameters writes the partitions.
  for (const zero::FlatGroup& group : groups_) {
    for (const zero::FlatParam& p : group.params()) {
      const at::Tensor value = whole(p.name, p.param);
      if (!value.defined() || (value.numel() > 0 && value.data_ptr() == p.param.data_ptr())) {
        continue;
      }
      p.param.detach().copy_(value.view(p.shape));
    }
  }
}

}  // namespace zrt::runtime
