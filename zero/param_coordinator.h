// ParamCoordinator: the stage-3 data path (spec/deepspeed.md §5.3). It gathers a unit's
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

#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include <ATen/ATen.h>

#include "comm/comm.h"
#include "zero/buffer_pool.h"
#include "zero/options.h"
#include "zero/shard_unit.h"
#include "zero/stage3_layout.h"

namespace zrt::zero {

struct CoordinatorOptions {
  int64_t prefetch_bucket_size = 50000000;   // elements prefetched ahead at most (0: off)
  int64_t max_live_parameters = 1000000000;  // gathered elements beyond which prefetch stops
  int64_t max_reuse_distance = 1000000000;   // keep a unit gathered if reused within this
  // Gradient elements that reductions in flight may hold (reduce_bucket_size): past it, the
  // oldest is finished before the backward goes on (the newest always stays in flight).
  int64_t reduce_bucket_size = 500000000;
  at::ScalarType comm_dtype = at::kFloat;    // gradient reduce-scatter dtype
  at::ScalarType accum_dtype = at::kFloat;   // gradient partition dtype
  // false: forward only (inference): no gradient partitions; a gradient arriving is an error.
  bool gradients = true;

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
};

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

  // Collective: around every micro-step's autograd pass (see GradReducer for the contract).
  void begin_backward();
  void end_backward();
  // This rank's gradient partition of group g (accum dtype), accumulated across micro-steps;
  // undefined without gradients.
  const at::Tensor& grad_partition(int group) const { return grad_flats_.at(group); }
  void zero_grad();

  // Collective: gathers the persistent trainable parameters from the (updated) partitions —
  // after every optimizer step.
  void refresh_persistent();
  // Collective: gathers every unit (for whole-model access); release_all() undoes it.
  void gather_all();
  void release_all();
  // Frees the reusable all-gather buffers and parameter slabs that nothing is using (Note
  // [Reusing gather buffers]); release_all() calls it.
  void trim_gather_buffers();

  const CoordinatorStats& stats() const { return stats_; }
  void reset_peak() {
    stats_.peak_gathered_bytes = stats_.gathered_bytes;
    stats_.peak_reducing_elements = reducing_elements_;
  }
  int64_t grad_bytes() const;
  // Called by the autograd hook of a trainable parameter. Internal.
  void on_grad_ready(int param);

 private:
  struct InFlightGather;
  struct PendingReduce;
  void gather(int unit);
  void start_gather(int unit, bool prefetch);
  void finish_gather(InFlightGather& g);
  void copy_alone(const InFlightGather& g);  // one rank: partitions straight into parameters
  // Gives the gather's parameters that have no storage a place in one pooled slab; returns the
  // number of bytes newly gathered.
  int64_t place_parameters(const InFlightGather& g);
  void sync_pool_stats() {
    stats_.gather_buffer_bytes = gather_buffers_.bytes();
    stats_.parameter_slab_bytes = parameter_slabs_.bytes();
  }
  void release(int unit);
  void prefetch_after(int pos, int direction);
  bool reused_soon(int unit, int pos, bool backward_use) const;
  int forward_position(int unit) const;
  int backward_position(int unit) const;
  void launch_reduce(int unit);
  void finish_reduce(PendingReduce& r);
  void finish_oldest_reduce();  // waits for reduces_.front(), accumulates it, frees it
  void record_forward(int unit);
  void keep_one_pass();  // a trace of k equal passes becomes one

  Stage3Layout& layout_;
  std::shared_ptr<comm::Comm> comm_;
  CoordinatorOptions options_;
  std::vector<char> gathered_;  // per unit
  std::deque<std::unique_ptr<InFlightGather>> gathers_;
  std::deque<std::unique_ptr<PendingReduce>> reduces_;
  int64_t reducing_elements_ = 0;  // send-buffer elements of reduces_
  std::vector<std::unique_ptr<PendingReduce>> open_reduces_;  // per unit, being filled
  std::vector<int> pending_grads_;                            // per unit
  std::vector<char> arrived_alone_;  // per parameter, one rank only: gradient added this pass
  std::vector<at::Tensor> grad_flats_;
  // Note [A unit used several times]
  std::vector<int> forward_order_;  // unit calls of the first training forward, repeats kept
  std::vector<std::vector<int>> positions_of_;  // unit → its indices in forward_order_
  bool order_complete_ = false;
  int forward_cursor_ = -1;       // position of the latest forward use (-1: a new pass)
  int backward_cursor_ = 0;       // position of the latest backward use
  std::vector<int> active_uses_;  // positions of the uses whose forward is running (nested)
  bool in_backward_ = false;
  // Note [Reusing gather buffers]
  BufferPool gather_buffers_;       // all-gather outputs
  BufferPool parameter_slabs_;      // where gathered unit parameters live
  std::vector<int64_t> slab_offset_;  // per parameter: its byte offset in its unit's slab
  std::vector<int64_t> slab_bytes_;   // per unit: the slab it needs
  // Output buffers pooled, and idle slabs kept after a release whatever their size.
  size_t pool_depth_ = 1;
  CoordinatorStats stats_;
  struct HookHandle;
  std::vector<HookHandle> hooks_;
};

}  // namespace zrt::zero
