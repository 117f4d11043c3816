// After the optimizer step of stages 1 and 2, every rank holds updated parameters only for its
// partition; all_gather_flat() brings the whole flat group back to every rank, in buckets of at
// most `bucket_elements` (allgather_bucket_size), each an in-place all_gather_v of a contiguous
// range of the flat buffer (docs/DEEPSPEED.md §5.1 step "all-gather bit16 partitions").
#pragma once

#include <cstdint>

#include "comm/comm.h"
#include "zero/flat_layout.h"

namespace zrt::zero {

// Collective: every rank must call this with the same group layout and bucket size. All buckets
// are issued asynchronously, then waited.
void all_gather_flat(const FlatGroup& group, comm::Comm& comm, int64_t bucket_elements);

}  // namespace zrt::zero
