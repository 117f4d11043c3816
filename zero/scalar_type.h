// The LibTorch dtype of a config's DType (fp32/fp16/bf16).
#pragma once

#include <c10/core/ScalarType.h>

#include "core/dtype.h"

namespace zrt::zero {

inline at::ScalarType scalar_type_of(DType d) {
  switch (d) {
    case DType::kFloat16:
      return at::kHalf;
    case DType::kBFloat16:
      return at::kBFloat16;
    case DType::kFloat32:
      break;
  }
  return at::kFloat;
}

}  // namespace zrt::zero
