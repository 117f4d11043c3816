#include "zero/param_storage.h"

#include <limits>

namespace zrt::zero {

ParamStorage::ParamStorage(const Stage3Layout& layout, size_t idle_slabs)
    : layout_(layout), idle_slabs_(idle_slabs), slabs_(std::numeric_limits<size_t>::max()) {
  offset_ = layout_.slab_offsets(&slab_bytes_);
}

int64_t ParamStorage::place(int unit, const std::vector<int>& params) {
  at::Tensor slab;
  int64_t placed = 0;
  for (int i : params) {
    const Stage3Param& p = layout_.params()[i];
    if (storage_allocated(p.param) && p.param.storage().data() != nullptr) continue;
    if (unit >= 0 && !slab.defined()) {
      slab = slabs_.acquire(slab_bytes_[unit],
                            at::TensorOptions().dtype(at::kByte).device(p.param.device()));
    }
    if (unit >= 0 && slab.device() == p.param.device()) {
      point_storage(p.param, slab, static_cast<size_t>(offset_[i]));
    } else {
      allocate_storage(p.param);
    }
    placed += p.bytes();
  }
  return placed;
}

int64_t ParamStorage::release(int unit) {
  int64_t dropped = 0;
  for (int i : layout_.units()[unit].params) {
    const Stage3Param& p = layout_.params()[i];
    if (p.persistent || p.numel == 0 || !storage_allocated(p.param)) continue;
    release_storage(p.param);
    dropped += p.bytes();
  }
  slabs_.trim(idle_slabs_, kHeapTrimBytes);
  return dropped;
}

}  // namespace zrt::zero
