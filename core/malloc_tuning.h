// An explicit, process-wide opt-in for programs that train or serve models larger than one
// rank under ZeRO-3. The library itself never changes its host's allocator (docs/DESIGN.md,
// "A library is a guest"); zrt-train (under ZeRO-3), zrt-generate and the stage-3 benchmark call
// this.
#pragma once

#include <cstddef>

namespace zrt {

// Note [Returning released memory]: glibc raises its mmap threshold each time a large block is
// freed (up to 32 MiB), after which blocks of that size come from the heap, where freed memory
// stays resident and fragments: a rank that releases gathered parameters, gradients or
// load-time temporaries keeps a peak far above its bound (a 394M-parameter model once generated
// at 2.2-3.1 GB per rank). tune_malloc_for_large_models() fixes glibc's mmap threshold at
// kLargeBlockBytes (so large blocks go back to the system when freed) and its heap-trim threshold
// at kHeapTrimBytes (so the heap's top is not given back and faulted in again every step). With
// these values the 583M-parameter memory test (tests/peers/hf_llama_memory.py) stays under its
// per-rank cap, which it does not with glibc's defaults or at 4 MiB; the small example models'
// stage-3 steps are 10-20% slower than with glibc's defaults (their 1-4 MiB activations are
// mapped afresh every step). Setting a threshold also turns glibc's dynamic adjustment off.
// Not glibc: does nothing. Idempotent; returns whether the thresholds were set.
constexpr size_t kLargeBlockBytes = 1 << 20;
constexpr size_t kHeapTrimBytes = 32 << 20;
bool tune_malloc_for_large_models();

}  // namespace zrt
