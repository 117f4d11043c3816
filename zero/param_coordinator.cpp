#include "zero/param_coordinator.h"

#include <algorithm>
#include <limits>

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "core/error.h"
#include "zero/accumulator_hook.h"
#include "zero/scalar_type.h"
#include "core/logging.h"

namespace zrt::zero {

// Note [Coalesced unit collectives]
// A unit's all-gather is one collective: every rank contributes its partitions of the unit's
// gathered parameters back to back (T = Σ pn elements) and receives W chunks of T, chunk r
// holding rank r's partitions; each parameter's storage is then filled from the W chunks. The
// gradient reduce-scatter mirrors it (DeepSpeed's reduce_scatter_coalesced): chunk r of the send
// buffer holds, for every trainable parameter of the unit, the elements [r·pn, (r+1)·pn) of its
// gradient, zero-padded, so that the reduced chunk each rank receives is exactly its
// partitions. Gradients are divided by W before the reduction, as DeepSpeed's stage 3 does.

// Note [Stage 3 on one rank]
// With one rank a partition is the whole parameter. The layout then keeps every parameter
// gathered (unless offload_param keeps the partitions elsewhere), a "gather" copies each
// partition straight into its parameter, and a gradient is added straight into its partition's
// accumulator (through comm_dtype, as the reduce-scatter would): no send buffers, no
// collectives, no release. Where dtype and device agree, Stage3Layout::partition() makes each
// parameter a view of its partition, so that the "gather" after a step copies nothing: stage 3
// at N = 1 does the work of stage 0 and holds the same memory.

enum : char { kReleased = 0, kInFlight = 1, kGathered = 2 };

struct ParamCoordinator::InFlightGather {
  int unit = -1;  // -1: the persistent parameters
  std::vector<int> params;
  std::vector<int64_t> offsets;
  int64_t chunk = 0;
  at::Tensor send;
  at::Tensor out;
  std::shared_ptr<comm::Work> work;
};

struct ParamCoordinator::PendingReduce {
  int unit = -1;
  at::Tensor send;
  at::Tensor out;
  std::vector<char> arrived;  // per trainable param of the unit
  std::shared_ptr<comm::Work> work;
};

namespace {

class GradReadyHook final : public torch::autograd::FunctionPostHook {
 public:
  GradReadyHook(ParamCoordinator* c, int param) : coordinator_(c), param_(param) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    coordinator_->on_grad_ready(param_);
    return outputs;
  }

 private:
  ParamCoordinator* coordinator_;
  int param_;
};

}  // namespace

struct ParamCoordinator::HookHandle : AccumulatorHook {};

CoordinatorOptions CoordinatorOptions::from(const ZeroOptions& zero,
                                            const GradientOptions& gradients) {
  CoordinatorOptions o;
  o.prefetch_bucket_size = zero.prefetch_bucket_size;
  o.max_live_parameters = zero.max_live_parameters;
  o.max_reuse_distance = zero.max_reuse_distance;
  o.reduce_bucket_size = zero.reduce_bucket_size;
  o.comm_dtype = scalar_type_of(gradients.comm_dtype);
  o.accum_dtype = scalar_type_of(gradients.accum_dtype);
  return o;
}

ParamCoordinator::ParamCoordinator(Stage3Layout& layout, std::shared_ptr<comm::Comm> comm,
                                   CoordinatorOptions options)
    : layout_(layout), comm_(std::move(comm)), options_(options) {
  const int units = static_cast<int>(layout_.units().size());
  gathered_.assign(units, kReleased);
  gathered_.back() = kGathered;  // the root unit's parameters are persistent
  open_reduces_.resize(units);
  pending_grads_.assign(units, 0);
  positions_of_.assign(units, {});
  grad_flats_.resize(layout_.num_groups());
  for (int g = 0; g < layout_.num_groups() && options_.gradients; ++g) {
    grad_flats_[g] = at::zeros({layout_.group_partition_numel(g)},
                               layout_.partition_flat(g).options().dtype(options_.accum_dtype));
  }
  // Note [Reusing gather buffers]: generation never prefetches; training may have a prefetch in
  // flight next to the gather being used.
  pool_depth_ = options_.gradients && options_.prefetch_bucket_size > 0 ? 2 : 1;
  gather_buffers_.set_depth(pool_depth_);
  parameter_slabs_.set_depth(std::numeric_limits<size_t>::max());
  slab_offset_ = layout_.slab_offsets(&slab_bytes_);
  const auto& params = layout_.params();
  // Hooks even without gradients (inference): a loss.backward() through the model is an error.
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].group < 0) continue;
    hooks_.push_back({add_accumulator_hook(
        params[i].param, std::make_unique<GradReadyHook>(this, static_cast<int>(i)),
        params[i].name)});
  }
}

ParamCoordinator::~ParamCoordinator() {
  for (HookHandle& h : hooks_) h.remove();
  try {
    while (!gathers_.empty()) {
      gathers_.front()->work->wait();
      gathers_.pop_front();
    }
    while (!reduces_.empty()) {
      reduces_.front()->work->wait();
      reduces_.pop_front();
    }
  } catch (...) {
    // The communicator reports its failure elsewhere.
  }
}

// ---- gather / release --------------------------------------------------------------------

void ParamCoordinator::start_gather(int unit, bool prefetch) {
  auto g = std::make_unique<InFlightGather>();
  g->unit = unit;
  const auto& params = layout_.params();
  const std::vector<int>& members = unit >= 0 ? layout_.units()[unit].params : std::vector<int>{};
  auto consider = [&](int i) {
    const Stage3Param& p = params[i];
    const bool wanted = unit >= 0 ? !p.persistent : (p.persistent && p.group >= 0);
    if (!wanted || p.numel == 0) return;
    g->offsets.push_back(g->chunk);
    g->params.push_back(i);
    g->chunk += p.pn;
  };
  if (unit >= 0) {
    for (int i : members) consider(i);
  } else {
    for (size_t i = 0; i < params.size(); ++i) consider(static_cast<int>(i));
  }
  if (unit >= 0) gathered_[unit] = kInFlight;
  if (g->chunk == 0) {
    if (unit >= 0) gathered_[unit] = kGathered;
    return;
  }
  if (comm_->size() == 1) {
    copy_alone(*g);
    if (unit >= 0) gathered_[unit] = kGathered;
    return;
  }
  // Collectives run on the parameters' device, wherever the partitions live (offload_param).
  const at::Tensor& first = params[g->params.front()].param;
  const auto opts = layout_.partition_flat(params[g->params.front()].group)
                        .options()
                        .device(first.device())
                        .pinned_memory(false);
  // In place: this rank's partitions go straight into its own chunk of the output.
  g->out = gather_buffers_.acquire(g->chunk * comm_->size(), opts);
  sync_pool_stats();
  g->send = g->out.narrow(0, comm_->rank() * g->chunk, g->chunk);
  for (size_t k = 0; k < g->params.size(); ++k) {
    g->send.narrow(0, g->offsets[k], params[g->params[k]].pn)
        .copy_(layout_.partition_of(g->params[k]));
  }
  g->work = comm_->all_gather_async(g->out, g->send);
  stats_.all_gathers += 1;
  if (prefetch) stats_.prefetches += 1;
  stats_.gathered_bytes += g->out.nbytes();
  stats_.peak_gathered_bytes = std::max(stats_.peak_gathered_bytes, stats_.gathered_bytes);
  gathers_.push_back(std::move(g));
}

// Note [Reusing gather buffers]
// A gather needs the all-gather's output (W x chunk elements) and storage for the parameters.
// Fresh for every gather, each is a new mapping (Note [Returning released memory]) that the kernel
// zeroes at first touch and releasing unmaps: at N = 2 most of a generated token's time. So two
// BufferPools (a buffer is free when the pool holds the only reference to its storage): outputs,
// 1 for inference and 2 for training with prefetch (one-offs beyond; the send side is this rank's
// chunk of the output, in place); and slabs, one per gathered unit, holding its parameters
// (point_storage; 64-byte aligned offsets fixed per parameter; a slab grows to the largest unit it
// held), free once its last parameter is released. Training keeps units gathered from forward
// into backward, so any number of slabs may be in use (gathered memory, bounded as before); idle
// ones are bounded: after a release 1 or 2 whatever their size plus others within
// kHeapTrimBytes (what glibc may keep at its heap's top), after a backward only those within it
// (the optimizer step's peak grows by at most that), none after release_all(). A small model
// reuses all its slabs step after step; a large one's units still leave the process.
void ParamCoordinator::trim_gather_buffers() {
  gather_buffers_.trim();
  parameter_slabs_.trim();
  sync_pool_stats();
}

int64_t ParamCoordinator::place_parameters(const InFlightGather& g) {
  at::Tensor slab;
  int64_t placed = 0;
  for (int i : g.params) {
    const Stage3Param& p = layout_.params()[i];
    if (storage_allocated(p.param) && p.param.storage().data() != nullptr) continue;
    if (g.unit >= 0 && !slab.defined()) {
      slab = parameter_slabs_.acquire(
          slab_bytes_[g.unit], at::TensorOptions().dtype(at::kByte).device(p.param.device()));
    }
    if (g.unit >= 0 && slab.device() == p.param.device()) {
      point_storage(p.param, slab, static_cast<size_t>(slab_offset_[i]));
    } else {
      allocate_storage(p.param);
    }
    placed += p.bytes();
  }
  sync_pool_stats();
  return placed;
}

void ParamCoordinator::copy_alone(const InFlightGather& g) {
  at::NoGradGuard no_grad;
  const int64_t placed = place_parameters(g);
  if (g.unit >= 0) stats_.gathered_bytes += placed;
  for (int i : g.params) {
    const Stage3Param& p = layout_.params()[i];
    const at::Tensor part = layout_.partition_of(i);
    if (p.param.data_ptr() == part.data_ptr()) continue;  // a view of it
    // As in finish_gather: an alias outside autograd's version counting.
    at::from_blob(p.param.data_ptr(), {p.numel},
                  at::TensorOptions().dtype(p.param.scalar_type()).device(p.param.device()))
        .copy_(part.narrow(0, 0, p.numel));
  }
  stats_.peak_gathered_bytes = std::max(stats_.peak_gathered_bytes, stats_.gathered_bytes);
}

void ParamCoordinator::finish_gather(InFlightGather& g) {
  at::NoGradGuard no_grad;
  g.work->wait();
  const auto& params = layout_.params();
  const int w = comm_->size();
  const int64_t placed = place_parameters(g);
  if (g.unit >= 0) stats_.gathered_bytes += placed;
  for (size_t k = 0; k < g.params.size(); ++k) {
    const Stage3Param& p = params[g.params[k]];
    // An alias that does not share the parameter's version counter: refilling a gathered
    // parameter must not look like an in-place change to the views autograd saved in forward.
    at::Tensor flat =
        at::from_blob(p.param.data_ptr(), {p.numel},
                      at::TensorOptions().dtype(p.param.scalar_type()).device(p.param.device()));
    for (int r = 0; r < w; ++r) {
      const int64_t n = std::min(p.pn, p.numel - r * p.pn);
      if (n <= 0) break;
      flat.narrow(0, r * p.pn, n).copy_(g.out.narrow(0, r * g.chunk + g.offsets[k], n));
    }
  }
  stats_.peak_gathered_bytes = std::max(stats_.peak_gathered_bytes, stats_.gathered_bytes);
  stats_.gathered_bytes -= g.out.nbytes();
  g.out = at::Tensor();
  g.send = at::Tensor();
  if (g.unit >= 0) gathered_[g.unit] = kGathered;
}

void ParamCoordinator::gather(int unit) {
  if (gathered_[unit] == kGathered) return;
  if (gathered_[unit] == kReleased) start_gather(unit, /*prefetch=*/false);
  // Finish in issue order up to and including this unit's gather.
  while (gathered_[unit] != kGathered) {
    ZRT_INTERNAL_ASSERT(!gathers_.empty(), "unit ", unit, " neither gathered nor in flight");
    std::unique_ptr<InFlightGather> g = std::move(gathers_.front());
    gathers_.pop_front();
    finish_gather(*g);
  }
}

void ParamCoordinator::release(int unit) {
  if (unit >= layout_.num_units() || gathered_[unit] != kGathered) return;
  const auto& params = layout_.params();
  for (int i : layout_.units()[unit].params) {
    const Stage3Param& p = params[i];
    if (p.persistent || p.numel == 0) continue;
    if (storage_allocated(p.param)) {
      release_storage(p.param);
      stats_.gathered_bytes -= p.bytes();
    }
  }
  gathered_[unit] = kReleased;
  parameter_slabs_.trim(pool_depth_, kHeapTrimBytes);
  sync_pool_stats();
}

// ---- prefetch and reuse --------------------------------------------------------------------

// Note [A unit used several times]
// A unit may run more than once in a forward: ShardUnitBase::run() uses its parameters again (a
// tied lm_head reads the embedding unit's weight). The trace F of the first training forward
// keeps every call, so a unit may sit at several positions. A forward use takes the unit's next
// position after the previous forward use (its first position when none is left: a new pass),
// a backward use the unit's last position before the previous backward use, so prefetch walks
// on from the position of this use, not of the unit's first one. Reuse is measured along the
// step's sequence of uses S = F ++ reverse(F) (in training; F repeated cyclically in a forward-
// only pass): the elements gathered between this use and the unit's next one. For a unit used
// once this is the old rule (twice the units after it in training, every other unit in
// inference); a tied embedding is kept from the lm_head's forward into its backward (distance
// 0), and released after that backward (post_backward) until the embedding's own backward.
// Only engines that train record (gradients on), and the trace ends at the first backward: when
// several grad-mode forwards came before it (an evaluation without NoGradGuard), it is the same
// pass repeated and one copy is kept. A trace that differs from later passes only mispredicts
// prefetches, the same way on every rank.

void ParamCoordinator::record_forward(int unit) {
  positions_of_[unit].push_back(static_cast<int>(forward_order_.size()));
  forward_order_.push_back(unit);
}

void ParamCoordinator::keep_one_pass() {
  const size_t n = forward_order_.size();
  for (size_t p = 1; p < n; ++p) {
    if (n % p != 0) continue;
    bool repeats = true;
    for (size_t i = p; i < n && repeats; ++i) repeats = forward_order_[i] == forward_order_[i - p];
    if (!repeats) continue;
    forward_order_.resize(p);
    for (std::vector<int>& ps : positions_of_) {
      ps.erase(std::remove_if(ps.begin(), ps.end(), [&](int x) { return x >= static_cast<int>(p); }),
               ps.end());
    }
    return;
  }
}

int ParamCoordinator::forward_position(int unit) const {
  const std::vector<int>& ps = positions_of_[unit];
  if (ps.empty()) return -1;
  const auto next = std::upper_bound(ps.begin(), ps.end(), forward_cursor_);
  return next != ps.end() ? *next : ps.front();
}

int ParamCoordinator::backward_position(int unit) const {
  const std::vector<int>& ps = positions_of_[unit];
  if (ps.empty()) return -1;
  const int n = static_cast<int>(forward_order_.size());
  // Another marked output of the use whose backward is running.
  if (backward_cursor_ < n && forward_order_[backward_cursor_] == unit) return backward_cursor_;
  const auto next = std::lower_bound(ps.begin(), ps.end(), backward_cursor_);
  return next != ps.begin() ? *std::prev(next) : ps.back();
}

void ParamCoordinator::prefetch_after(int pos, int direction) {
  if (!order_complete_ || options_.prefetch_bucket_size <= 0 || pos < 0) return;
  int64_t in_flight = 0;
  for (const auto& g : gathers_) {
    if (g->unit >= 0) in_flight += layout_.units()[g->unit].gather_numel;
  }
  int64_t live = 0;
  for (size_t u = 0; u + 1 < gathered_.size(); ++u) {
    if (gathered_[u] == kGathered) live += layout_.units()[u].gather_numel;
  }
  for (int at = pos + direction; at >= 0 && at < static_cast<int>(forward_order_.size());
       at += direction) {
    const int next = forward_order_[at];
    if (gathered_[next] != kReleased) continue;
    const int64_t size = layout_.units()[next].gather_numel;
    if (in_flight + size > options_.prefetch_bucket_size) break;
    if (live + in_flight + size > options_.max_live_parameters) break;
    start_gather(next, /*prefetch=*/true);
    in_flight += size;
  }
}

bool ParamCoordinator::reused_soon(int unit, int pos, bool backward_use) const {
  if (!order_complete_ || pos < 0) return false;
  // Autograd runs backward with grad mode off: a backward use is always part of training.
  const bool training = backward_use || at::GradMode::is_enabled();
  const int n = static_cast<int>(forward_order_.size());
  const int len = training ? 2 * n : n;
  auto unit_at = [&](int s) { return forward_order_[s < n ? s : 2 * n - 1 - s]; };
  const int from = backward_use ? 2 * n - 1 - pos : pos;  // this use's index in S
  int64_t between = 0;
  for (int k = 1; k <= len; ++k) {
    if (training && from + k >= len) return false;  // not used again this step
    const int u = training ? unit_at(from + k) : forward_order_[(from + k) % n];
    if (u == unit) {
      // In a forward-only pass a use past the end of F is the next forward's, which may be far
      // off or never come: reaching it is never distance 0.
      if (!training && from + k >= n) between = std::max<int64_t>(between, 1);
      return between <= options_.max_reuse_distance;
    }
    between += layout_.units()[u].gather_numel;
  }
  return false;
}

// ---- UnitHooks ------------------------------------------------------------------------------

void ParamCoordinator::pre_forward(int unit) {
  if (options_.gradients && at::GradMode::is_enabled() && !order_complete_) record_forward(unit);
  const int pos = forward_position(unit);
  if (pos >= 0) forward_cursor_ = pos;
  active_uses_.push_back(pos);
  gather(unit);
  prefetch_after(pos, +1);
}

void ParamCoordinator::post_forward(int unit) {
  int pos = -1;
  if (!active_uses_.empty()) {
    pos = active_uses_.back();
    active_uses_.pop_back();
  }
  if (!reused_soon(unit, pos, /*backward_use=*/false)) release(unit);
}

void ParamCoordinator::pre_backward(int unit) {
  const int pos = backward_position(unit);
  if (pos >= 0) backward_cursor_ = pos;
  gather(unit);
  prefetch_after(pos, -1);
}

void ParamCoordinator::post_backward(int unit) {
  if (!reused_soon(unit, backward_position(unit), /*backward_use=*/true)) release(unit);
}

// ---- gradients -----------------------------------------------------------------------------

void ParamCoordinator::begin_backward() {
  ZRT_CHECK(!in_backward_, "backward() was called while a previous backward is still running");
  in_backward_ = true;
  if (!order_complete_) keep_one_pass();
  backward_cursor_ = static_cast<int>(forward_order_.size());
  for (size_t u = 0; u < layout_.units().size(); ++u) {
    pending_grads_[u] = static_cast<int>(layout_.units()[u].trainable.size());
  }
  if (comm_->size() == 1) arrived_alone_.assign(layout_.params().size(), 0);
}

void ParamCoordinator::on_grad_ready(int i) {
  const Stage3Param& p = layout_.params()[i];
  ZRT_CHECK(options_.gradients, "the gradient of parameter '", p.name,
            "' was produced through a ZeRO-3 inference engine (no optimizer, no gradient "
            "partitions): run forwards under torch::NoGradGuard, or add an \"optimizer\" "
            "section to train");
  ZRT_CHECK(in_backward_, "the gradient of parameter '", p.name,
            "' was produced outside engine.backward(): call engine.backward(loss) instead of "
            "loss.backward()");
  at::NoGradGuard no_grad;
  const Stage3Unit& unit = layout_.units()[p.unit];
  if (comm_->size() == 1) {
    at::Tensor dest = grad_flats_[p.group].narrow(0, p.group_offset, p.numel);
    dest.add_(p.param.grad().reshape({-1}).to(options_.comm_dtype).to(dest.device()));
    p.param.mutable_grad() = at::Tensor();
    if (!arrived_alone_[i]) {
      arrived_alone_[i] = 1;
      if (--pending_grads_[p.unit] == 0) release(p.unit);
    }
    return;
  }
  std::unique_ptr<PendingReduce>& r = open_reduces_[p.unit];
  if (!r) {
    r = std::make_unique<PendingReduce>();
    r->unit = p.unit;
    r->send = at::zeros({unit.reduce_partition * comm_->size()},
                        p.param.options().dtype(options_.comm_dtype).requires_grad(false));
    r->arrived.assign(unit.trainable.size(), 0);
  }
  int64_t offset = 0;
  size_t slot = 0;
  for (; slot < unit.trainable.size() && unit.trainable[slot] != i; ++slot) {
    offset += layout_.params()[unit.trainable[slot]].pn;
  }
  const at::Tensor grad = p.param.grad().reshape({-1});
  for (int rank = 0; rank < comm_->size(); ++rank) {
    const int64_t n = std::min(p.pn, p.numel - rank * p.pn);
    if (n <= 0) break;
    r->send.narrow(0, rank * unit.reduce_partition + offset, n)
        .copy_(grad.narrow(0, rank * p.pn, n));
  }
  p.param.mutable_grad() = at::Tensor();
  if (!r->arrived[slot]) {
    r->arrived[slot] = 1;
    if (--pending_grads_[p.unit] == 0) {
      launch_reduce(p.unit);
      release(p.unit);
    }
  }
}

void ParamCoordinator::launch_reduce(int unit) {
  const Stage3Unit& u = layout_.units()[unit];
  std::unique_ptr<PendingReduce> r = std::move(open_reduces_[unit]);
  if (!r) {  // no gradient arrived this micro-step: contribute zeros
    r = std::make_unique<PendingReduce>();
    r->unit = unit;
    r->send =
        at::zeros({u.reduce_partition * comm_->size()},
                  layout_.params()[u.trainable.front()].param.options().dtype(options_.comm_dtype));
  }
  if (comm_->size() > 1) r->send.div_(comm_->size());
  r->out = at::empty({u.reduce_partition}, r->send.options());
  r->work = comm_->reduce_scatter_async(r->out, r->send);
  stats_.reduce_scatters += 1;
  pending_grads_[unit] = 0;
  reducing_elements_ += r->send.numel();
  stats_.peak_reducing_elements = std::max(stats_.peak_reducing_elements, reducing_elements_);
  reduces_.push_back(std::move(r));
  // Note [Bounded gradient reduction]: every unit's reduction holds the unit's whole gradient
  // (its send buffer) until it is finished. Finishing them all only at the end of the backward
  // would hold the whole model's gradient at once; as DeepSpeed's reduce buckets do, the
  // gradients in flight stay within reduce_bucket_size, less the newest reduction, which keeps
  // overlapping the backward of the next unit.
  while (reduces_.size() > 1 && reducing_elements_ > options_.reduce_bucket_size) {
    finish_oldest_reduce();
  }
}

void ParamCoordinator::finish_oldest_reduce() {
  std::unique_ptr<PendingReduce> r = std::move(reduces_.front());
  reduces_.pop_front();
  reducing_elements_ -= r->send.numel();
  finish_reduce(*r);
}

void ParamCoordinator::finish_reduce(PendingReduce& r) {
  at::NoGradGuard no_grad;
  r.work->wait();
  const auto& params = layout_.params();
  int64_t offset = 0;
  for (int i : layout_.units()[r.unit].trainable) {
    const Stage3Param& p = params[i];
    at::Tensor dest = grad_flats_[p.group].narrow(0, p.group_offset, p.pn);
    dest.add_(r.out.narrow(0, offset, p.pn).to(dest.device()));
    offset += p.pn;
  }
}

void ParamCoordinator::end_backward() {
  ZRT_CHECK(in_backward_, "end_backward() without begin_backward()");
  // Units whose gradients did not all arrive (unused parameters, or the root unit) reduce now,
  // in unit order on every rank.
  for (size_t u = 0; u < layout_.units().size(); ++u) {
    // With one rank nothing is left to reduce (Note [Stage 3 on one rank]).
    if (pending_grads_[u] > 0 && comm_->size() > 1) launch_reduce(static_cast<int>(u));
  }
  while (!reduces_.empty()) finish_oldest_reduce();
  for (int u = 0; u < layout_.num_units(); ++u) {
    if (gathered_[u] == kInFlight) gather(u);
    release(u);
  }
  gather_buffers_.trim();
  parameter_slabs_.trim(0, kHeapTrimBytes);  // Note [Reusing gather buffers]
  if (!forward_order_.empty()) order_complete_ = true;
  sync_pool_stats();
  in_backward_ = false;
  forward_cursor_ = -1;
  active_uses_.clear();
}

void ParamCoordinator::zero_grad() {
  for (at::Tensor& g : grad_flats_) {
    if (g.defined()) g.zero_();
  }
}

int64_t ParamCoordinator::grad_bytes() const {
  int64_t bytes = 0;
  for (const at::Tensor& g : grad_flats_) bytes += g.defined() ? g.nbytes() : 0;
  return bytes;
}

// ---- whole-model operations ------------------------------------------------------------------

void ParamCoordinator::refresh_persistent() {
  start_gather(-1, false);
  while (!gathers_.empty()) {
    std::unique_ptr<InFlightGather> g = std::move(gathers_.front());
    gathers_.pop_front();
    finish_gather(*g);
  }
}

void ParamCoordinator::gather_all() {
  for (int u = 0; u < layout_.num_units(); ++u) gather(u);
}

void ParamCoordinator::release_all() {
  for (int u = 0; u < layout_.num_units(); ++u) {
    if (gathered_[u] == kInFlight) gather(u);
    release(u);
  }
  trim_gather_buffers();
}

}  // namespace zrt::zero
