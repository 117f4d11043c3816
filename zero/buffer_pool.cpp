#include "zero/buffer_pool.h"

#include "zero/stage3_layout.h"

namespace zrt::zero {

at::Tensor BufferPool::make(int64_t numel, const at::TensorOptions& options) {
  allocations_ += 1;
  return mapped_empty(numel, options);  // Note [Returning released memory]
}

at::Tensor BufferPool::acquire(int64_t numel, const at::TensorOptions& options) {
  for (at::Tensor& b : buffers_) {
    if (b.storage().use_count() != 1 || b.dtype() != options.dtype() ||
        b.device() != options.device()) {
      continue;
    }
    if (b.numel() < numel) {
      bytes_ -= b.nbytes();
      b = make(numel, options);
      bytes_ += b.nbytes();
    }
    return b.narrow(0, 0, numel);
  }
  if (buffers_.size() < depth_) {
    buffers_.push_back(make(numel, options));
    bytes_ += buffers_.back().nbytes();
    return buffers_.back().narrow(0, 0, numel);
  }
  return make(numel, options);
}

void BufferPool::trim(size_t keep_count, int64_t keep_bytes) {
  std::vector<at::Tensor> kept;
  size_t idle_kept = 0;
  int64_t idle_bytes = 0;
  for (at::Tensor& b : buffers_) {
    const bool idle = b.storage().use_count() == 1;
    const int64_t n = static_cast<int64_t>(b.nbytes());
    if (idle && idle_kept < keep_count) {
      idle_kept += 1;
    } else if (idle && idle_bytes + n <= keep_bytes) {
      idle_bytes += n;
    } else if (idle) {
      bytes_ -= n;
      continue;
    }
    kept.push_back(std::move(b));
  }
  buffers_ = std::move(kept);
}

}  // namespace zrt::zero
