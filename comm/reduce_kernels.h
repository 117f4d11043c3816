// Element-wise reduction loops on raw buffers, for the CPU backends (MPI user-defined ops, the
// point-to-point ring, the in-process backend). Single-threaded on purpose: they run on a
// communicator's own thread, next to the training threads. Internal to comm/.
#pragma once

#include <cstdint>

#include <c10/core/ScalarType.h>

#include "comm/comm.h"

namespace zrt::comm::detail {

// acc[i] = op(acc[i], in[i]) for i < n. kAvg reduces as kSum (the caller divides).
void reduce_inplace(void* acc, const void* in, int64_t n, at::ScalarType dtype, ReduceOp op);

// out[i] = op(a[i], b[i]); `out` may alias `a` or `b`.
void reduce_into(void* out, const void* a, const void* b, int64_t n, at::ScalarType dtype,
                 ReduceOp op);

// data[i] /= divisor for floating dtypes (the second half of kAvg).
void divide_inplace(void* data, int64_t n, at::ScalarType dtype, int64_t divisor);

}  // namespace zrt::comm::detail
