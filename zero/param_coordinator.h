// ParamCoordinator: the stage-3 data path (docs/DEEPSPEED.md §5.3). It gathers a unit's
// parameters just before its forward and again before its backward, releases them afterwards,
// prefetches the next unit asynchronously, and reduce-scatters each unit's gradients as soon as
// autograd has produced all of them, accumulating this rank's pieces into the gradient
// partitions across micro-steps.
//
// Collective order: gathers follow the unit call order and reduce-scatters the order in which
// units complete in backward; both are the same on every rank when every rank runs the same
// model code (as DeepSpeed requires). A different order on one rank is a collective mismatch,
// reported by the communicator (size error or timeout).
#pragma once

#include <memory>

#include <ATen/ATen.h>

#include "comm/comm.h"
#include "zero/options.h"
#include "zero/shard_unit.h"
#include "zero/stage3_layout.h"
#include "zero/unit_gatherer.h"
#include "zero/unit_grad_reducer.h"
#include "zero/use_trace.h"

namespace zrt::zero {

struct CoordinatorOptions {
  int64_t prefetch_bucket_size = 50000000;   // elements prefetched ahead at most (0: off)
  int64_t max_live_parameters = 1000000000;  // gathered elements beyond which prefetch stops
  int64_t max_reuse_distance = 1000000000;   // keep a unit gathered if reused within this
  // Gradient elements that reductions in flight may hold (reduce_bucket_size): past it, the
  // oldest is finished before the backward goes on (the newest always stays in flight).
  int64_t reduce_bucket_size = 500000000;
  at::ScalarType comm_dtype = at::kFloat;   // gradient reduce-scatter dtype
  at::ScalarType accum_dtype = at::kFloat;  // gradient partition dtype
  // false: forward only (inference): no gradient partitions; a gradient arriving is an error.
  bool gradients = true;
  ZeroPPOptions zeropp;  // hpZ, qwZ, qgZ (Note [ZeRO++] in zero/zeropp.cpp)

  // The stage3_* prefetch and reuse limits of a config and its gradient dtypes.
  static CoordinatorOptions from(const ZeroOptions& zero, const GradientOptions& gradients);
};

struct CoordinatorStats {
  int64_t gathered_bytes = 0;       // non-persistent parameter bytes gathered right now
  int64_t peak_gathered_bytes = 0;  // since the last reset_peak()
  int64_t all_gathers = 0;          // unit gathers issued (prefetches included)
  int64_t prefetches = 0;
  int64_t reduce_scatters = 0;
  // Most gradient elements held by reductions in flight at once, since the last reset_peak().
  int64_t peak_reducing_elements = 0;
  // Bytes of the reusable all-gather buffers held now, in use or idle (Note [Reusing gather
  // buffers]); not part of gathered_bytes.
  int64_t gather_buffer_bytes = 0;
  // Bytes of the pooled slabs that gathered parameters live in, in use or idle (the same Note);
  // the parameters in use are also counted in gathered_bytes.
  int64_t parameter_slab_bytes = 0;
  // ZeRO++ (Note [ZeRO++]): hpZ's secondary partitions held now, unit gathers within the hpZ
  // group, and gathers sent quantized (qwZ).
  int64_t secondary_bytes = 0;
  int64_t secondary_gathers = 0;
  int64_t quantized_gathers = 0;
};

// Composes the three parts of the stage-3 data path: UnitGatherer (gather, release, storage),
// UseTrace (where each use sits, prefetch and reuse decisions) and UnitGradReducer (gradients).
class ParamCoordinator final : public UnitHooks {
 public:
  // `layout` must be partitioned already and outlive the coordinator.
  ParamCoordinator(Stage3Layout& layout, std::shared_ptr<comm::Comm> comm,
                   CoordinatorOptions options);
  ~ParamCoordinator() override;
  ParamCoordinator(const ParamCoordinator&) = delete;
  ParamCoordinator& operator=(const ParamCoordinator&) = delete;

  // UnitHooks (called by ShardUnit::forward and by autograd).
  void pre_forward(int unit) override;
  void post_forward(int unit) override;
  void pre_backward(int unit) override;
  void post_backward(int unit) override;
  bool marks_inputs(int unit) const override { return marks_inputs_[unit] != 0; }
  void inputs_marked(int unit) override { ++pending_inputs_[unit]; }

  // Collective: around every micro-step's autograd pass (see GradReducer for the contract).
  void begin_backward();
  void end_backward();
  // This rank's gradient partition of group g (accum dtype), accumulated across micro-steps;
  // undefined without gradients.
  const at::Tensor& grad_partition(int group) const { return grads_.grad_partition(group); }
  void zero_grad() { grads_.zero_grad(); }
  int64_t grad_bytes() const { return grads_.grad_bytes(); }

  // Collective: gathers the persistent trainable parameters from the (updated) partitions —
  // after every optimizer step.
  void refresh_persistent(bool frozen_too = false) { gatherer_.refresh_persistent(frozen_too); }
  // After this rank's partitions were written (whole values loaded into them): hpZ's secondary
  // partitions are stale and are dropped (every rank writes, so every rank drops).
  void partitions_written() { gatherer_.drop_secondaries(); }
  // Collective: gathers every unit (for whole-model access); release_all() undoes it.
  void gather_all();
  void release_all();
  // Frees the reusable all-gather buffers and parameter slabs that nothing is using (Note
  // [Reusing gather buffers]); release_all() calls it.
  void trim_gather_buffers() { gatherer_.trim(); }

  // The gradient path on its own (its accumulator hooks call it; tests may too).
  UnitGradReducer& gradients() { return grads_; }

  CoordinatorStats stats() const;
  void reset_peak() {
    gatherer_.reset_peak();
    grads_.reset_peak();
  }

 private:
  void prefetch_after(int pos, int direction);
  void read_ahead(int pos, int direction);
  bool reused_soon(int unit, int pos, bool backward_use) const;
  void gradients_done(int unit);

  Stage3Layout& layout_;
  CoordinatorOptions options_;
  ZeroPPGroups zeropp_;  // before the parts that use its communicators
  UnitGatherer gatherer_;
  UseTrace trace_;
  UnitGradReducer grads_;
  // Note [Units with frozen parameters]: per unit, whether its forward marks its inputs, and the
  // input marks of this pass whose backward has not run yet.
  std::vector<char> marks_inputs_;
  std::vector<int> pending_inputs_;
};

}  // namespace zrt::zero
