#include "zero/param_coordinator.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "zero/scalar_type.h"

namespace zrt::zero {

CoordinatorOptions CoordinatorOptions::from(const ZeroOptions& zero,
                                            const GradientOptions& gradients) {
  CoordinatorOptions o;
  o.prefetch_bucket_size = zero.prefetch_bucket_size;
  o.max_live_parameters = zero.max_live_parameters;
  o.max_reuse_distance = zero.max_reuse_distance;
  o.reduce_bucket_size = zero.reduce_bucket_size;
  o.comm_dtype = scalar_type_of(gradients.comm_dtype);
  o.accum_dtype = scalar_type_of(gradients.accum_dtype);
  o.zeropp = zero.zeropp;
  return o;
}

namespace {

std::vector<int64_t> unit_numels(const Stage3Layout& layout) {
  std::vector<int64_t> n;
  for (const Stage3Unit& u : layout.units()) n.push_back(u.gather_numel);
  return n;
}

UnitGradReducer::Options reducer_options(const CoordinatorOptions& o, const ZeroPPGroups& groups) {
  UnitGradReducer::Options r;
  r.quantized = o.zeropp.quantized_gradients ? &groups : nullptr;
  r.reduce_bucket_size = o.reduce_bucket_size;
  r.comm_dtype = o.comm_dtype;
  r.accum_dtype = o.accum_dtype;
  r.gradients = o.gradients;
  return r;
}

// Note [Reusing gather buffers]: generation never prefetches; training may have a prefetch in
// flight next to the gather being used.
size_t pooled_outputs(const CoordinatorOptions& o) {
  return o.gradients && o.prefetch_bucket_size > 0 ? 2 : 1;
}

}  // namespace

ParamCoordinator::ParamCoordinator(Stage3Layout& layout, std::shared_ptr<comm::Comm> comm,
                                   CoordinatorOptions options)
    : layout_(layout),
      options_(options),
      zeropp_(ZeroPPGroups::make(*comm, options.zeropp)),
      gatherer_(layout, comm, pooled_outputs(options), zeropp_.hpz,
                options.zeropp.quantized_weights),
      trace_(unit_numels(layout)),
      grads_(layout, comm, reducer_options(options, zeropp_),
             [this](int unit) { gradients_done(unit); }),
      pending_inputs_(layout.units().size(), 0) {
  // Note [Units with frozen parameters]
  // A unit is released in backward once its last trainable gradient has arrived: in a unit of
  // trainable parameters that is when its backward ends, as every weight's gradient comes from
  // the node that also needs it for the input's gradient. A frozen weight has no gradient, and a
  // LoRA layer's adapters may get theirs while a frozen projection beside them still has its
  // input's gradient to compute from its gathered weight. So a unit with frozen gathered
  // parameters marks its forward's inputs (ShardUnitBase::call_marking_inputs, one mark for all
  // of them): its backward use ends when their gradient is done (post_backward), and the arrival
  // of its last trainable gradient releases it only when no input mark is pending (the inputs
  // needed no gradient, e.g. the first layer after a frozen embedding). A unit of frozen
  // parameters alone, reached in backward, is released by its input mark.
  marks_inputs_.assign(layout.units().size(), 0);
  for (int u = 0; u < layout.num_units(); ++u) {
    for (int i : layout.units()[u].params) {
      const Stage3Param& p = layout.params()[i];
      if (p.frozen() && !p.persistent) marks_inputs_[u] = 1;
    }
  }
}

ParamCoordinator::~ParamCoordinator() = default;

CoordinatorStats ParamCoordinator::stats() const {
  CoordinatorStats s;
  const GatherStats& g = gatherer_.stats();
  s.gathered_bytes = g.gathered_bytes;
  s.peak_gathered_bytes = g.peak_gathered_bytes;
  s.all_gathers = g.all_gathers;
  s.prefetches = g.prefetches;
  s.reduce_scatters = grads_.stats().reduce_scatters;
  s.peak_reducing_elements = grads_.stats().peak_reducing_elements;
  s.gather_buffer_bytes = gatherer_.output_bytes();
  s.parameter_slab_bytes = gatherer_.storage().bytes();
  s.secondary_bytes = g.secondary_bytes;
  s.secondary_gathers = g.secondary_gathers;
  s.quantized_gathers = g.quantized_gathers;
  return s;
}

void ParamCoordinator::prefetch_after(int pos, int direction) {
  const PrefetchLimits limits{options_.prefetch_bucket_size, options_.max_live_parameters};
  const std::vector<int> next = trace_.prefetch_after(
      pos, direction, limits, gatherer_.in_flight_numel(), gatherer_.live_numel(),
      [&](int u) { return gatherer_.state(u) == UnitGatherer::State::kReleased; });
  for (int u : next) gatherer_.start(u, /*prefetch=*/true);
}

// Note [Swapped partitions] (zero/param_swapper.h): the units the trace uses next are read from
// disk ahead of their gathers, nearest first, while the swapper has buffers for them. Issued before
// the gathers' prefetch, which then finds the next unit read.
void ParamCoordinator::read_ahead(int pos, int direction) {
  ParamSwapper* swapper = layout_.swapper();
  if (swapper == nullptr) return;
  constexpr int64_t kUnlimited = std::numeric_limits<int64_t>::max() / 4;
  const std::vector<int> next = trace_.prefetch_after(
      pos, direction, PrefetchLimits{kUnlimited, kUnlimited}, 0, 0,
      [&](int u) { return gatherer_.state(u) == UnitGatherer::State::kReleased; });
  for (int u : next) {
    if (!swapper->read_ahead(u)) break;
  }
}

bool ParamCoordinator::reused_soon(int unit, int pos, bool backward_use) const {
  // Autograd runs backward with grad mode off: a backward use is always part of training.
  const bool training = backward_use || at::GradMode::is_enabled();
  return trace_.reused_soon(unit, pos, backward_use, training, options_.max_reuse_distance);
}

// ---- UnitHooks ------------------------------------------------------------------------------

void ParamCoordinator::pre_forward(int unit) {
  const int pos = trace_.begin_forward_use(unit, options_.gradients && at::GradMode::is_enabled());
  gatherer_.wait(unit);
  read_ahead(pos, +1);
  prefetch_after(pos, +1);
}

void ParamCoordinator::post_forward(int unit) {
  const int pos = trace_.end_forward_use();
  if (!reused_soon(unit, pos, /*backward_use=*/false)) gatherer_.release(unit);
}

void ParamCoordinator::pre_backward(int unit) {
  const int pos = trace_.begin_backward_use(unit);
  gatherer_.wait(unit);
  read_ahead(pos, -1);
  prefetch_after(pos, -1);
}

void ParamCoordinator::post_backward(int unit) {
  if (pending_inputs_[unit] > 0) --pending_inputs_[unit];
  if (!reused_soon(unit, trace_.backward_position(unit), /*backward_use=*/true)) {
    gatherer_.release(unit);
  }
}

void ParamCoordinator::gradients_done(int unit) {
  if (pending_inputs_[unit] == 0) gatherer_.release(unit);
}

// ---- backward and whole-model operations ----------------------------------------------------

void ParamCoordinator::begin_backward() {
  grads_.begin();
  trace_.begin_backward();
}

void ParamCoordinator::end_backward() {
  grads_.end();
  std::fill(pending_inputs_.begin(), pending_inputs_.end(), 0);
  for (int u = 0; u < layout_.num_units(); ++u) {
    gatherer_.wait_if_in_flight(u);
    gatherer_.release(u);
  }
  gatherer_.trim_outputs();
  gatherer_.storage().trim_after_backward();  // Note [Reusing gather buffers]
  trace_.end_backward();
}

void ParamCoordinator::gather_all() {
  for (int u = 0; u < layout_.num_units(); ++u) gatherer_.wait_exact(u);
}

void ParamCoordinator::release_all() {
  for (int u = 0; u < layout_.num_units(); ++u) {
    gatherer_.wait_if_in_flight(u);
    gatherer_.release(u);
  }
  gatherer_.trim();
}

}  // namespace zrt::zero
