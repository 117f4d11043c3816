#include "runtime/stage3_model_states.h"

#include <algorithm>

#include "core/error.h"
#include "core/shard.h"
#include "optim/swap_space.h"

namespace zrt::runtime {

Stage3ModelStates::Stage3ModelStates(std::unique_ptr<zero::Stage3Layout> layout,
                                     std::vector<zero::ShardUnitBase*> units,
                                     std::shared_ptr<comm::Comm> comm,
                                     const zero::ZeroOptions& zero,
                                     const zero::GradientOptions& gradients, bool inference,
                                     const aio::AioOptions& aio)
    : layout_(std::move(layout)), units_(std::move(units)) {
  zero::CoordinatorOptions co = zero::CoordinatorOptions::from(zero, gradients);
  co.gradients = !inference;
  coordinator_ = std::make_unique<zero::ParamCoordinator>(*layout_, std::move(comm), co);
  const bool offload = zero.offload_optimizer_enabled();
  for (size_t u = 0; u < units_.size(); ++u) {
    units_[u]->attach(coordinator_.get(), static_cast<int>(u));
  }
  if (!inference) {
    std::vector<int64_t> numels;
    for (int g = 0; g < layout_->num_groups(); ++g)
      numels.push_back(layout_->partition_flat(g).numel());
    swap_ = make_swap_space(zero, aio, layout_->rank(), numels);
  }
  const bool swapped_params = layout_->swapped();
  if (swap_ != nullptr && swapped_params) {
    // Note [Swapped partitions]: SwappedAdam's low-precision copies go straight to the disk.
    zero::Stage3Layout* layout = layout_.get();
    swap_->set_param_copy_sink([layout](int g, int64_t offset, const at::Tensor& values) {
      layout->write_flat(g, offset, values);
    });
  }
  for (int g = 0; g < layout_->num_groups(); ++g) {
    const at::Tensor& lp = layout_->partition_flat(g);  // meta when swapped_params
    OptimTarget t;
    if (swap_ != nullptr) {  // Note [Swapped masters]
      t.master = at::empty({lp.numel()}, at::TensorOptions().dtype(at::kFloat).device(at::kMeta));
      if (swapped_params) {
        t.lp = lp;  // meta: written through the sink above
      } else {
        t.lp = lp.is_cpu() ? lp : at::empty({lp.numel()}, lp.options().device(at::kCPU));
      }
    } else if (inference) {
      t.master = lp;  // nothing to update: the partitions are all there is
    } else if (lp.scalar_type() == at::kFloat && !offload && !swapped_params) {
      t.master = lp;  // pure fp32: the partitions are the masters
    } else {
      const bool pin =
          (zero.offload_optimizer.pin_memory || zero.offload_param.pin_memory) && lp.is_cuda();
      t.master = at::empty({lp.numel()}, at::TensorOptions().dtype(at::kFloat).pinned_memory(pin));
      if (!offload && !swapped_params) t.master = t.master.to(lp.device());
      if (lp.scalar_type() != at::kFloat && lp.device() == t.master.device()) t.lp = lp;
    }
    t.grad = coordinator_->grad_partition(g);
    targets_.push_back(std::move(t));
  }
  // The masters start as the partitions (read by chunks when either is on disk).
  if (!inference) masters_from_params(*this);
}

Stage3ModelStates::~Stage3ModelStates() {
  for (zero::ShardUnitBase* u : units_) u->detach();
}

void Stage3ModelStates::begin_backward(bool boundary) {
  (void)boundary;  // stage 3 reduces every micro-step
  coordinator_->begin_backward();
}

void Stage3ModelStates::before_optimizer_step() {
  for (int g = 0; g < layout_->num_groups(); ++g) {
    const at::Tensor& reduced = coordinator_->grad_partition(g);
    const c10::Device device = optimizer_device(targets_[g]);
    targets_[g].grad = reduced.device() == device ? reduced : reduced.to(device);
  }
}

void Stage3ModelStates::after_optimizer_step() {
  at::NoGradGuard no_grad;
  for (int g = 0; g < layout_->num_groups(); ++g) {
    const OptimTarget& t = targets_[g];
    const at::Tensor& lp = layout_->partition_flat(g);
    if (t.master.is_same(lp) || (t.lp.defined() && t.lp.is_same(lp))) continue;  // done in place
    if (layout_->swapped()) {  // CPU masters → the swapped partitions, by chunks
      for (int64_t off = 0; off < lp.numel(); off += kStateChunk) {
        layout_->write_flat(g, off,
                            t.master.narrow(0, off, std::min(kStateChunk, lp.numel() - off)));
      }
      continue;
    }
    lp.copy_(t.master.is_meta() ? t.lp : t.master);  // offloaded master or staging → partition
  }
  coordinator_->refresh_persistent();
}

ModelStateBytes Stage3ModelStates::memory() const {
  ModelStateBytes m;
  for (int f = layout_->num_groups(); f < layout_->num_flats(); ++f)
    m.params += resident_bytes(layout_->partition_flat(f));  // the frozen parameters'
  m.params += layout_->own_partition_bytes();                // quantized ones and their flats'
  for (int g = 0; g < layout_->num_groups(); ++g) {
    m.params += resident_bytes(layout_->partition_flat(g));
    if (!targets_[g].master.is_same(layout_->partition_flat(g)))
      m.master += resident_bytes(targets_[g].master);
    if (targets_[g].master.is_meta() && !targets_[g].lp.is_same(layout_->partition_flat(g))) {
      m.master += resident_bytes(targets_[g].lp);  // CPU staging of a device partition
    }
  }
  m.grads = coordinator_->grad_bytes();
  m.gathered = coordinator_->stats().gathered_bytes;
  count_swap(swap_.get(), m);
  if (const zero::ParamSwapper* swapper = layout_->swapper()) {
    const zero::ParamSwapStats st = swapper->stats();
    m.params += st.resident_bytes;
    m.swap_buffers += st.buffer_bytes;
    m.swapped += st.swapped_bytes;
  }
  return m;
}

GroupPartition Stage3ModelStates::describe_flat(int flat) const {
  // The flat's parameters in the order of their partitions in it (group_offset).
  std::vector<const zero::Stage3Param*> members;
  for (const zero::Stage3Param& p : layout_->params()) {
    if (p.flat == flat) members.push_back(&p);
  }
  std::sort(members.begin(), members.end(),
            [](const zero::Stage3Param* a, const zero::Stage3Param* b) {
              return a->group_offset < b->group_offset;
            });
  GroupPartition out;
  for (const zero::Stage3Param* p : members) out.params.emplace_back(p->name, p->shape);
  out.layout = ckpt::PartitionLayout::kPerParam;
  out.rank = layout_->rank();
  out.world_size = layout_->world_size();
  out.lp = layout_->partition_flat(flat);
  return out;
}

std::vector<GroupPartition> Stage3ModelStates::group_partitions() const {
  std::vector<GroupPartition> out;
  for (int g = 0; g < layout_->num_groups(); ++g) out.push_back(describe_flat(g));
  return out;
}

std::vector<GroupPartition> Stage3ModelStates::frozen_partitions() const {
  std::vector<GroupPartition> out;
  for (int f = layout_->num_groups(); f < layout_->num_flats(); ++f)
    out.push_back(describe_flat(f));
  return out;
}

void Stage3ModelStates::frozen_partitions_written() {
  coordinator_->partitions_written();
  coordinator_->refresh_persistent(/*frozen_too=*/true);
}

at::Tensor Stage3ModelStates::read_lp(size_t group, int64_t offset, int64_t n) const {
  return layout_->read_flat(static_cast<int>(group), offset, n);
}

void Stage3ModelStates::write_lp(size_t group, int64_t offset, const at::Tensor& values) {
  if (!layout_->swapped() && group < static_cast<size_t>(layout_->num_groups())) {
    ModelStates::write_lp(group, offset, values);
    return;
  }
  layout_->write_flat(static_cast<int>(group), offset, values);
  coordinator_->partitions_written();
}

void Stage3ModelStates::release_gathered_params() {
  coordinator_->release_all();
  coordinator_->refresh_persistent();
}

void Stage3ModelStates::write_whole_params(const WholeParamFn& whole) {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < layout_->params().size(); ++i) {
    const zero::Stage3Param& p = layout_->params()[i];
    const at::Tensor value = whole(p.name, p.param);
    if (!value.defined()) continue;
    // Staged, then written (Note [Swapped partitions], Note [Quantized frozen partitions]).
    const bool swapped = layout_->swapped() || p.quantized;
    at::Tensor part = swapped ? at::empty({p.pn}, p.param.options().device(at::kCPU))
                              : layout_->partition_of(static_cast<int>(i));
    // One rank: the parameter is a view of its partition (Note [Stage 3 on one rank]), and a value
    // read from the parameter is already there.
    if (p.numel > 0 && value.data_ptr() == part.data_ptr()) continue;
    const at::Tensor flat = value.reshape({-1});
    const ShardInfo mine = param_shard(p.numel, layout_->rank(), layout_->world_size());
    part.zero_();
    if (mine.size > 0) part.narrow(0, 0, mine.size).copy_(flat.narrow(0, mine.offset, mine.size));
    if (swapped) layout_->write_partition(static_cast<int>(i), part);
    if (zero::storage_allocated(p.param) &&
        (p.numel == 0 || value.data_ptr() != p.param.data_ptr())) {
      p.param.detach().copy_(value.view(p.shape));
    }
  }
  coordinator_->partitions_written();
}

}  // namespace zrt::runtime
