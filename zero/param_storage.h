// ParamStorage: where ZeRO-3's gathered parameters live. A gather gives its unit's parameters
// that have no memory a place in one pooled slab (point_storage); a release drops them, and the
// idle slabs kept for the next gathers stay bounded (Note [Reusing gather buffers]).
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "zero/buffer_pool.h"
#include "zero/stage3_layout.h"

namespace zrt::zero {

// Note [Reusing gather buffers]
// A gather needs the all-gather's output (W x chunk elements) and storage for the parameters.
// Fresh for every gather, each is a new mapping (Note [Returning released memory]) that the kernel
// zeroes at first touch and releasing unmaps: at N = 2 most of a generated token's time. So two
// BufferPools (a buffer is free when the pool holds the only reference to its storage): outputs
// (UnitGatherer), 1 for inference and 2 for training with prefetch (one-offs beyond; the send side
// is this rank's chunk of the output, in place); and slabs (ParamStorage), one per gathered unit,
// holding its parameters (point_storage; 64-byte aligned offsets fixed per parameter; a slab grows
// to the largest unit it held), free once its last parameter is released. Training keeps units
// gathered from forward into backward, so any number of slabs may be in use (gathered memory,
// bounded as before); idle ones are bounded: after a release 1 or 2 whatever their size plus
// others within kHeapTrimBytes (what glibc may keep at its heap's top), after a backward only
// those within it (the optimizer step's peak grows by at most that), none after trim(). A small
// model reuses all its slabs step after step; a large one's units still leave the process.
class ParamStorage {
 public:
  // `idle_slabs`: idle slabs kept after a release whatever their size (1 or 2, as the gather
  // buffers). `layout` must outlive this.
  ParamStorage(const Stage3Layout& layout, size_t idle_slabs);

  // Gives every parameter of `params` (indices into layout.params()) that has no memory its
  // place: in the slab of `unit` when unit >= 0 and the devices agree, else memory of its own.
  // Returns the bytes newly placed.
  int64_t place(int unit, const std::vector<int>& params);
  // Drops the memory of the non-persistent parameters of `unit`; returns the bytes dropped.
  int64_t release(int unit);
  // Keeps only the idle slabs within kHeapTrimBytes (after a backward).
  void trim_after_backward() { slabs_.trim(0, kHeapTrimBytes); }
  // Frees every idle slab.
  void trim() { slabs_.trim(); }
  // Bytes of the slabs held now, in use or idle.
  int64_t bytes() const { return slabs_.bytes(); }

 private:
  const Stage3Layout& layout_;
  size_t idle_slabs_;
  BufferPool slabs_;
  std::vector<int64_t> offset_;      // per parameter: its byte offset in its unit's slab
  std::vector<int64_t> slab_bytes_;  // per unit: the slab it needs
};

}  // namespace zrt::zero
