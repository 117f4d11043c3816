#include "zero/unit_gatherer.h"

#include <algorithm>

#include "core/error.h"
#include "zero/unit_tags.h"

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
  std::vector<int64_t> parts;  // each parameter's piece per rank: pn, or hpZ's ceil(numel / K)
  int64_t chunk = 0;           // Σ parts: one rank's contribution
  int ranks = 0;               // the ranks gathered from: the world, or the hpZ group
  int64_t stride = 0;          // elements between consecutive ranks' chunks in `out`
  int64_t wire_stride = 0;     // qwZ: bytes between consecutive ranks' pieces in `wire`
  bool secondary = false;      // from hpZ's secondary partitions
  bool exact = true;           // the values are the partitions' (not qwZ's)
  QuantizedChunk quant;        // qwZ's wire layout (quant.bytes == 0: not quantized)
  at::Tensor send;
  at::Tensor out;
  at::Tensor wire;  // qwZ: every rank's quantized chunk
  std::shared_ptr<comm::Work> work;
};

UnitGatherer::UnitGatherer(Stage3Layout& layout, std::shared_ptr<comm::Comm> comm,
                           size_t pooled_outputs, std::shared_ptr<comm::Comm> hpz,
                           bool quantized_weights)
    : layout_(layout),
      comm_(std::move(comm)),
      outputs_(pooled_outputs),
      storage_(layout, pooled_outputs),
      hpz_(std::move(hpz)),
      quantized_(quantized_weights && comm_->size() > 1),
      contexts_(layout, "gather") {
  state_.assign(layout_.units().size(), State::kReleased);
  state_.back() = State::kGathered;  // the root unit's parameters are persistent
  secondary_.resize(layout_.units().size());
  exact_.assign(layout_.units().size(), 1);
}

UnitGatherer::~UnitGatherer() {
  try {
    for (auto& g : in_flight_) g->work->wait();
  } catch (...) {
    // The communicator reports its failure elsewhere.
  }
}

void UnitGatherer::start(int unit, bool prefetch, bool exact, bool frozen_too) {
  auto g = std::make_unique<InFlight>();
  g->unit = unit;
  // With qwZ a secondary partition holds the dequantized values the forward used.
  g->secondary = hpz_ && unit >= 0 && secondary_[unit].defined() && !(exact && quantized_);
  g->exact = !quantized_ || exact;
  g->ranks = g->secondary ? hpz_->size() : comm_->size();
  const auto& params = layout_.params();
  auto consider = [&](int i) {
    const Stage3Param& p = params[i];
    const bool wanted =
        unit >= 0 ? !p.persistent : (p.persistent && (frozen_too || !p.frozen()));
    if (!wanted || p.numel == 0) return;
    const int64_t part = g->secondary ? (p.numel + g->ranks - 1) / g->ranks : p.pn;
    g->offsets.push_back(g->chunk);
    g->params.push_back(i);
    g->parts.push_back(part);
    g->chunk += part;
  };
  if (unit >= 0) {
    for (int i : layout_.units()[unit].params) consider(i);
    state_[unit] = State::kInFlight;
  } else {
    for (size_t i = 0; i < params.size(); ++i) consider(static_cast<int>(i));
  }
  if (unit >= 0) exact_[unit] = g->exact;
  if (g->chunk == 0 || comm_->size() == 1) {
    if (g->chunk > 0) copy_alone(*g);
    if (unit >= 0) state_[unit] = State::kGathered;
    return;
  }
  if (g->secondary) {
    start_plain(*g, *hpz_);
    stats_.secondary_gathers += 1;
  } else if (!g->exact && unit >= 0) {
    start_quantized(*g);
    stats_.quantized_gathers += 1;
  } else {
    start_plain(*g, *comm_);
  }
  stats_.all_gathers += 1;
  if (prefetch) stats_.prefetches += 1;
  stats_.gathered_bytes += g->out.nbytes();
  stats_.peak_gathered_bytes = std::max(stats_.peak_gathered_bytes, stats_.gathered_bytes);
  in_flight_.push_back(std::move(g));
}

namespace {

// Collectives run on the parameters' device, wherever the partitions live (offload_param).
at::TensorOptions gather_options(const Stage3Layout& layout, int first_param) {
  const Stage3Param& p = layout.params()[first_param];
  return layout.partition_flat(p.flat).options().device(p.param.device()).pinned_memory(false);
}

}  // namespace

// The partitions a gather sends, in its order: views of the layout's flats or, with swapped
// partitions (Note [Swapped partitions]), of the unit's swap buffer until the reader goes.
class UnitGatherer::PartitionReader {
 public:
  PartitionReader(Stage3Layout& layout, const InFlight& g) : layout_(layout), unit_(g.unit) {
    if (layout.swapped() && unit_ >= 0) {
      parts_ = layout.swapper()->acquire(unit_);
      return;
    }
    for (int i : g.params) parts_.push_back(layout.read_partition(i));
  }
  ~PartitionReader() {
    if (layout_.swapped() && unit_ >= 0) layout_.swapper()->release(unit_);
  }
  PartitionReader(const PartitionReader&) = delete;
  PartitionReader& operator=(const PartitionReader&) = delete;
  const at::Tensor& operator[](size_t k) const { return parts_[k]; }

 private:
  Stage3Layout& layout_;
  int unit_;
  std::vector<at::Tensor> parts_;
};

// In place: this rank's pieces go straight into its own chunk of the output.
// Each rank's chunk ends in the unit's tag (Note [Unit tags]).
void UnitGatherer::start_plain(InFlight& g, comm::Comm& group) {
  const at::TensorOptions options = gather_options(layout_, g.params.front());
  g.stride = g.chunk + gather_tag_elements(c10::typeMetaToScalarType(options.dtype()));
  g.out = outputs_.acquire(g.stride * g.ranks, options);
  g.send = g.out.narrow(0, group.rank() * g.stride, g.stride);
  if (g.secondary) {
    g.send.narrow(0, 0, g.chunk).copy_(secondary_[g.unit]);
  } else {
    const PartitionReader parts(layout_, g);
    for (size_t k = 0; k < g.params.size(); ++k) {
      g.send.narrow(0, g.offsets[k], g.parts[k]).copy_(parts[k]);
    }
  }
  write_gather_tag(g.send.narrow(0, g.chunk, g.stride - g.chunk), g.unit);
  const comm::CollectiveContext context(contexts_[g.unit]);
  g.work = group.all_gather_async(g.out, g.send);
}

// qwZ (Note [ZeRO++]): the chunk is staged in this rank's slot of the output, zero-padded,
// quantized into this rank's slot of the wire buffer, and the wire buffer all-gathered.
void UnitGatherer::start_quantized(InFlight& g) {
  g.quant = QuantizedChunk::for_numel(g.chunk);
  g.stride = g.quant.padded;
  const int rank = comm_->rank();
  g.out = outputs_.acquire(g.stride * g.ranks, gather_options(layout_, g.params.front()));
  at::Tensor staged = g.out.narrow(0, rank * g.stride, g.stride);
  {
    const PartitionReader parts(layout_, g);
    for (size_t k = 0; k < g.params.size(); ++k) {
      staged.narrow(0, g.offsets[k], g.parts[k]).copy_(parts[k]);
    }
  }
  staged.narrow(0, g.chunk, g.stride - g.chunk).zero_();
  const int64_t tag_bytes = gather_tag_elements(at::kByte);
  g.wire_stride = g.quant.bytes + tag_bytes;
  g.wire = at::empty({g.wire_stride * g.ranks}, g.out.options().dtype(at::kByte));
  g.send = g.wire.narrow(0, rank * g.wire_stride, g.wire_stride);
  g.quant.pack(staged, g.send.narrow(0, 0, g.quant.bytes));
  write_gather_tag(g.send.narrow(0, g.quant.bytes, tag_bytes), g.unit);
  const comm::CollectiveContext context(contexts_[g.unit]);
  g.work = comm_->all_gather_async(g.wire, g.send);
}

void UnitGatherer::copy_alone(const InFlight& g) {
  at::NoGradGuard no_grad;
  const int64_t placed = storage_.place(g.unit, g.params);
  if (g.unit >= 0) stats_.gathered_bytes += placed;
  const PartitionReader parts(layout_, g);
  for (size_t k = 0; k < g.params.size(); ++k) {
    const Stage3Param& p = layout_.params()[g.params[k]];
    const at::Tensor& part = parts[k];
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
  if (g.quant.bytes > 0) {
    check_gather_tags(layout_, g.wire, g.wire_stride, g.quant.bytes, g.ranks, comm_->rank(),
                      g.unit, "");
  } else {
    const comm::Comm& group = g.secondary ? *hpz_ : *comm_;
    check_gather_tags(layout_, g.out, g.stride, g.chunk, g.ranks, group.rank(), g.unit,
                      g.secondary ? " of its hpZ group" : "");
  }
  const auto& params = layout_.params();
  if (g.quant.bytes > 0) {  // every rank's chunk, this rank's too: all see the same values
    for (int r = 0; r < g.ranks; ++r) {
      g.quant.unpack(g.wire.narrow(0, r * g.wire_stride, g.quant.bytes),
                     g.out.narrow(0, r * g.stride, g.stride));
    }
    g.wire = at::Tensor();
  }
  const int64_t placed = storage_.place(g.unit, g.params);
  if (g.unit >= 0) stats_.gathered_bytes += placed;
  for (size_t k = 0; k < g.params.size(); ++k) {
    const Stage3Param& p = params[g.params[k]];
    // An alias that does not share the parameter's version counter: refilling a gathered
    // parameter must not look like an in-place change to the views autograd saved in forward.
    at::Tensor flat =
        at::from_blob(p.param.data_ptr(), {p.numel},
                      at::TensorOptions().dtype(p.param.scalar_type()).device(p.param.device()));
    for (int r = 0; r < g.ranks; ++r) {
      const int64_t n = std::min(g.parts[k], p.numel - r * g.parts[k]);
      if (n <= 0) break;
      flat.narrow(0, r * g.parts[k], n).copy_(g.out.narrow(0, r * g.stride + g.offsets[k], n));
    }
  }
  // A secondary keeps what the compute gathers give (an exact gather's values would differ).
  if (hpz_ && g.unit >= 0 && !g.secondary && g.exact == !quantized_) keep_secondary(g);
  stats_.peak_gathered_bytes = std::max(stats_.peak_gathered_bytes, stats_.gathered_bytes);
  stats_.gathered_bytes -= g.out.nbytes();
  g.out = at::Tensor();
  g.send = at::Tensor();
  if (g.unit >= 0) state_[g.unit] = State::kGathered;
}

// hpZ: piece j (this rank's index in the group) of each parameter just gathered, in the order
// and at the offsets a secondary gather's chunk uses.
void UnitGatherer::keep_secondary(const InFlight& g) {
  const int k_ranks = hpz_->size();
  const int j = hpz_->rank();
  std::vector<int64_t> pieces;
  int64_t total = 0;
  for (int i : g.params) {
    pieces.push_back((layout_.params()[i].numel + k_ranks - 1) / k_ranks);
    total += pieces.back();
  }
  at::Tensor& sec = secondary_[g.unit];
  const at::Tensor& first = layout_.params()[g.params.front()].param;
  sec = at::empty({total}, first.options().requires_grad(false));
  stats_.secondary_bytes += sec.nbytes();
  int64_t offset = 0;
  for (size_t k = 0; k < g.params.size(); ++k) {
    const Stage3Param& p = layout_.params()[g.params[k]];
    const int64_t n = std::min(pieces[k], p.numel - j * pieces[k]);
    if (n > 0) {
      sec.narrow(0, offset, n).copy_(p.param.detach().reshape({-1}).narrow(0, j * pieces[k], n));
    }
    offset += pieces[k];
  }
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

void UnitGatherer::wait_exact(int unit) {
  if (state_[unit] != State::kReleased && !exact_[unit]) {
    wait(unit);
    release(unit);
  }
  if (state_[unit] == State::kReleased) start(unit, /*prefetch=*/false, /*exact=*/true);
  wait(unit);
}

void UnitGatherer::release(int unit) {
  if (unit >= layout_.num_units() || state_[unit] != State::kGathered) return;
  stats_.gathered_bytes -= storage_.release(unit);
  state_[unit] = State::kReleased;
}

void UnitGatherer::drop_secondaries() {
  for (at::Tensor& sec : secondary_) {
    if (sec.defined()) stats_.secondary_bytes -= sec.nbytes();
    sec = at::Tensor();
  }
}

void UnitGatherer::refresh_persistent(bool frozen_too) {
  drop_secondaries();
  start(-1, /*prefetch=*/false, /*exact=*/false, frozen_too);
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
