#include "zero/unit_gatherer.h"

#include <algorithm>

#include "core/error.h"

namespace zrt::zero {

// Note [Coalesced unit collectives]
// A unit's all-gather is one collective: every rank contributes its partitions of the unit's
// gathered parameters back to back (T = Σ pn elements) and receives W chunks of T, chunk r
// holding rank r's partitions; each parameter's storage is then filled from the W chunks. The
// gradient reduce-scatter mirrors it (DeepSpeed's reduce_scatter_coalesced; UnitGradReducer):
// chunk r of the send buffer holds, for every trainable parameter of the unit, the elements
// [r·pn, (r+1)·pn) of its gradient, zero-padded, so that the reduced chunk each rank receives is
// exactly its partitions. Gradients are divided by W before the reduction, as DeepSpeed's stage 3
// does.

// Note [Stage 3 on one rank]
// With one rank a partition is the whole parameter. The layout then keeps every parameter
// gathered (unless offload_param keeps the partitions elsewhere), a "gather" copies each
// partition straight into its parameter, and a gradient is added straight into its partition's
// accumulator (through comm_dtype, as the reduce-scatter would): no send buffers, no
// collectives, no release. Where dtype and device agree, Stage3Layout::partition() makes each
// parameter a view of its partition, so that the "gather" after a step copies nothing: stage 3
// at N = 1 does the work of stage 0 and holds the same memory.

struct UnitGatherer::InFlight {
  int unit = -1;  // -1: the persistent parameters
  std::vector<int> params;
  std::vector<int64_t> offsets;
  int64_t chunk = 0;
  at::Tensor send;
  at::Tensor out;
  std::shared_ptr<comm::Work> work;
};

UnitGatherer::UnitGatherer(Stage3Layout& layout, std::shared_ptr<comm::Comm> comm,
                           size_t pooled_outputs)
    : layout_(layout),
      comm_(std::move(comm)),
      outputs_(pooled_outputs),
      storage_(layout, pooled_outputs) {
  state_.assign(layout_.units().size(), State::kReleased);
  state_.back() = State::kGathered;  // the root unit's parameters are persistent
}

UnitGatherer::~UnitGatherer() {
  try {
    for (auto& g : in_flight_) g->work->wait();
  } catch (...) {
    // The communicator reports its failure elsewhere.
  }
}

void UnitGatherer::start(int unit, bool prefetch) {
  auto g = std::make_unique<InFlight>();
  g->unit = unit;
  const auto& params = layout_.params();
  auto consider = [&](int i) {
    const Stage3Param& p = params[i];
    const bool wanted = unit >= 0 ? !p.persistent : (p.persistent && p.group >= 0);
    if (!wanted || p.numel == 0) return;
    g->offsets.push_back(g->chunk);
    g->params.push_back(i);
    g->chunk += p.pn;
  };
  if (unit >= 0) {
    for (int i : layout_.units()[unit].params) consider(i);
    state_[unit] = State::kInFlight;
  } else {
    for (size_t i = 0; i < params.size(); ++i) consider(static_cast<int>(i));
  }
  if (g->chunk == 0 || comm_->size() == 1) {
    if (g->chunk > 0) copy_alone(*g);
    if (unit >= 0) state_[unit] = State::kGathered;
    return;
  }
  // Collectives run on the parameters' device, wherever the partitions live (offload_param).
  const at::Tensor& first = params[g->params.front()].param;
  const auto opts = layout_.partition_flat(params[g->params.front()].group)
                        .options()
                        .device(first.device())
                        .pinned_memory(false);
  // In place: this rank's partitions go straight into its own chunk of the output.
  g->out = outputs_.acquire(g->chunk * comm_->size(), opts);
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
  in_flight_.push_back(std::move(g));
}

void UnitGatherer::copy_alone(const InFlight& g) {
  at::NoGradGuard no_grad;
  const int64_t placed = storage_.place(g.unit, g.params);
  if (g.unit >= 0) stats_.gathered_bytes += placed;
  for (int i : g.params) {
    const Stage3Param& p = layout_.params()[i];
    const at::Tensor part = layout_.partition_of(i);
    if (p.param.data_ptr() == part.data_ptr()) continue;  // a view of it
    // As in finish: an alias outside autograd's version counting.
    at::from_blob(p.param.data_ptr(), {p.numel},
                  at::TensorOptions().dtype(p.param.scalar_type()).device(p.param.device()))
        .copy_(part.narrow(0, 0, p.numel));
  }
  stats_.peak_gathered_bytes = std::max(stats_.peak_gathered_bytes, stats_.gathered_bytes);
}

void UnitGatherer::finish(InFlight& g) {
  at::NoGradGuard no_grad;
  g.work->wait();
  const auto& params = layout_.params();
  const int w = comm_->size();
  const int64_t placed = storage_.place(g.unit, g.params);
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
  if (g.unit >= 0) state_[g.unit] = State::kGathered;
}

void UnitGatherer::wait(int unit) {
  if (state_[unit] == State::kGathered) return;
  if (state_[unit] == State::kReleased) start(unit, /*prefetch=*/false);
  // Finish in issue order up to and including this unit's gather.
  while (state_[unit] != State::kGathered) {
    ZRT_INTERNAL_ASSERT(!in_flight_.empty(), "unit ", unit, " neither gathered nor in flight");
    std::unique_ptr<InFlight> g = std::move(in_flight_.front());
    in_flight_.pop_front();
    finish(*g);
  }
}

void UnitGatherer::release(int unit) {
  if (unit >= layout_.num_units() || state_[unit] != State::kGathered) return;
  stats_.gathered_bytes -= storage_.release(unit);
  state_[unit] = State::kReleased;
}

void UnitGatherer::refresh_persistent() {
  start(-1, /*prefetch=*/false);
  while (!in_flight_.empty()) {
    std::unique_ptr<InFlight> g = std::move(in_flight_.front());
    in_flight_.pop_front();
    finish(*g);
  }
}

int64_t UnitGatherer::in_flight_numel() const {
  int64_t n = 0;
  for (const auto& g : in_flight_) {
    if (g->unit >= 0) n += layout_.units()[g->unit].gather_numel;
  }
  return n;
}

int64_t UnitGatherer::live_numel() const {
  int64_t n = 0;
  for (size_t u = 0; u + 1 < state_.size(); ++u) {
    if (state_[u] == State::kGathered) n += layout_.units()[u].gather_numel;
  }
  return n;
}

}  // namespace zrt::zero
