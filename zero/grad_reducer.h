// GradReducer: bucketed gradient reduction for ZeRO stages 0–2, driven by autograd hooks so that
// communication overlaps the rest of backward (docs/DEEPSPEED.md §5.1, §5.2, §5.6).
//
// What is reduced where, by StagePolicy (see Note [Gradient modes]):
//   stage 0  all_reduce of each bucket of the full flat gradient, at the GA boundary;
//   stage 1  reduce_scatter_v of each bucket of the full flat gradient at the GA boundary, each
//            rank keeping the piece inside its partition;
//   stage 2  every micro-step, gradients are copied into bucket buffers as autograd produces them
//            (the full gradient is freed at once), each bucket is reduce_scatter_v'd and the
//            rank's piece is accumulated into its gradient partition.
// The result is grad_partition(g): this rank's averaged gradient partition of group g (stage 0:
// the whole padded group).
#pragma once

#include <deque>
#include <memory>
#include <vector>

#include <ATen/ATen.h>

#include "comm/comm.h"
#include "zero/flat_layout.h"
#include "zero/options.h"

namespace zrt::zero {

struct ReducerOptions {
  StagePolicy policy;
  int64_t bucket_elements = 500000000;  // reduce_bucket_size
  bool overlap = false;                 // overlap_comm: launch asynchronously from the hooks
  at::ScalarType comm_dtype = at::kFloat;
  at::ScalarType accum_dtype = at::kFloat;
  bool prescale = false;          // prescale_gradients: divide by W before reducing
  double predivide_factor = 1.0;  // gradient_predivide_factor

  // The reducer a config asks for: its stage, reduce_bucket_size, overlap_comm and gradient dtypes.
  static ReducerOptions from(const ZeroOptions& zero, const GradientOptions& gradients);
};

struct ReducerStats {
  int64_t buckets_launched = 0;  // since construction
  int64_t bucket_count = 0;      // buckets per reduction pass
  int64_t max_pool_buffers = 0;  // stage 2: bucket buffers allocated at most
};

class GradReducer {
 public:
  // Registers a post-accumulation hook on every parameter of `groups` (which must outlive the
  // reducer and be bound, see FlatGroup::bind).
  GradReducer(std::vector<FlatGroup>& groups, std::shared_ptr<comm::Comm> comm,
              ReducerOptions options);
  // Removes the hooks.
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // Collective (the reductions it launches are): call around every micro-step's autograd pass,
  // on every rank. `boundary`: this micro-step ends a gradient-accumulation cycle.
  void begin_backward(bool boundary);
  void end_backward();

  // This rank's reduced gradient partition of group g, in accum_dtype; valid after the
  // boundary micro-step's end_backward() until zero_grad(). Stage 0: the whole padded group.
  const at::Tensor& grad_partition(int group) const;
  // Clears every gradient buffer (after the optimizer step or a skipped step).
  void zero_grad();

  // Bytes of gradient storage this reducer holds (flat gradients, partitions, bucket buffers).
  int64_t grad_bytes() const;
  const ReducerStats& stats() const { return stats_; }
  const ReducerOptions& options() const { return options_; }

  // Called by the autograd hook of parameter `param` of group `group`. Internal.
  void on_grad_ready(int group, int param);

 private:
  struct Bucket;
  enum class Mode { kViews, kAccumulate, kBucketed };
  void build_buckets(int group);
  void launch_ready_in_order();
  void launch(Bucket& b);
  void finish(Bucket& b);
  void finish_oldest();
  at::Tensor acquire_buffer(int64_t elements);
  void pre_scale(at::Tensor& t) const;
  void post_scale(at::Tensor& t) const;

  std::vector<FlatGroup>& groups_;
  std::shared_ptr<comm::Comm> comm_;
  ReducerOptions options_;
  Mode mode_ = Mode::kViews;
  std::vector<at::Tensor> flat_grads_;  // kViews / kAccumulate: padded, accum dtype
  std::vector<at::Tensor> partitions_;  // stage 1/2: partition size; stage 0: = flat_grads_
  std::vector<std::unique_ptr<Bucket>> buckets_;               // launch order
  std::vector<std::vector<std::pair<int, int>>> param_slots_;  // [g][p] → (bucket, slot)
  std::vector<at::Tensor> free_buffers_;
  std::deque<Bucket*> in_flight_;
  size_t next_launch_ = 0;
  bool in_backward_ = false;
  bool reducing_ = false;  // this micro-step reduces (stage 2: always; 0/1: at the boundary)
  ReducerStats stats_;
  struct HookHandle;
  std::vector<HookHandle> hooks_;
};

}  // namespace zrt::zero
