// Argument checks shared by the CPU (kernels/quantize.cpp) and CUDA (kernels/quantize_cuda.cu)
// quantizers, so that both refuse the same arguments with the same messages. Internal.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"

namespace zrt::kernels::detail {

inline void check_quantize_args(const char* fn, int64_t numel, int64_t group_size, int bits) {
  ZRT_CHECK(bits == 8 || bits == 4, fn, ": bits=", bits, " must be 8 or 4");
  ZRT_CHECK(group_size > 0, fn, ": group_size=", group_size, " must be > 0");
  ZRT_CHECK(numel >= 0, fn, ": numel=", numel, " must be >= 0");
}

inline void check_quantize_dtype(const char* fn, const char* arg, DType dtype) {
  const bool known =
      dtype == DType::kFloat32 || dtype == DType::kBFloat16 || dtype == DType::kFloat16;
  ZRT_CHECK(known, fn, ": ", arg, " is not a known dtype (value ", static_cast<int>(dtype),
            "); expected fp32, bf16 or fp16");
}

}  // namespace zrt::kernels::detail
