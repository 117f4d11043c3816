// BufferPool: reusable CPU or device buffers for ZeRO-3's gathers (Note [Reusing gather
// buffers] in zero/param_coordinator.cpp). A buffer is free when the pool holds the only
// reference to its storage, so whoever got a view of it (a tensor, a parameter's DataPtr that
// points into it through point_storage) keeps it busy exactly as long as that view lives, and the
// pool needs no bookkeeping of who uses what.
#pragma once

#include <cstddef>
#include <vector>

#include <ATen/ATen.h>

namespace zrt::zero {

class BufferPool {
 public:
  // At most `depth` pooled buffers (in use or idle); beyond them, one-off buffers.
  explicit BufferPool(size_t depth = 1) : depth_(depth) {}

  // A 1-D view of `numel` elements of a free pooled buffer of this dtype and device (grown when
  // it is smaller); past the depth, a buffer of its own, freed with its last view.
  at::Tensor acquire(int64_t numel, const at::TensorOptions& options);
  // Frees the pooled buffers that nobody uses, except the first `keep_count` idle ones and, after
  // them, as many more as fit in `keep_bytes` together.
  void trim(size_t keep_count = 0, int64_t keep_bytes = 0);
  // Bytes of the pooled buffers held now, in use or idle (not counting one-off buffers).
  int64_t bytes() const { return bytes_; }
  // Buffers created since construction, pooled and one-off.
  int64_t allocations() const { return allocations_; }
  void set_depth(size_t depth) { depth_ = depth; }

 private:
  at::Tensor make(int64_t numel, const at::TensorOptions& options);
  std::vector<at::Tensor> buffers_;
  size_t depth_;
  int64_t bytes_ = 0;
  int64_t allocations_ = 0;
};

}  // namespace zrt::zero
