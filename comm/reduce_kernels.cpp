#include "comm/reduce_kernels.h"

#include <algorithm>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include "core/error.h"

namespace zrt::comm::detail {
namespace {

// Reduced precision types accumulate in float and round once per element and step, as NCCL does.
template <typename T>
struct Accum {
  using type = T;
};
template <>
struct Accum<c10::BFloat16> {
  using type = float;
};
template <>
struct Accum<c10::Half> {
  using type = float;
};

template <typename T, typename F>
void apply(T* __restrict out, const T* a, const T* b, int64_t n, F f) {
  using A = typename Accum<T>::type;
  for (int64_t i = 0; i < n; ++i) {
    out[i] = static_cast<T>(f(static_cast<A>(a[i]), static_cast<A>(b[i])));
  }
}

template <typename T>
void reduce_typed(void* out, const void* a, const void* b, int64_t n, ReduceOp op) {
  using A = typename Accum<T>::type;
  auto* o = static_cast<T*>(out);
  const auto* x = static_cast<const T*>(a);
  const auto* y = static_cast<const T*>(b);
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      apply(o, x, y, n, [](A u, A v) { return u + v; });
      return;
    case ReduceOp::kMax:
      apply(o, x, y, n, [](A u, A v) { return std::max(u, v); });
      return;
    case ReduceOp::kMin:
      apply(o, x, y, n, [](A u, A v) { return std::min(u, v); });
      return;
  }
}

}  // namespace

void reduce_into(void* out, const void* a, const void* b, int64_t n, at::ScalarType dtype,
                 ReduceOp op) {
  switch (dtype) {
    case at::kFloat:
      return reduce_typed<float>(out, a, b, n, op);
    case at::kDouble:
      return reduce_typed<double>(out, a, b, n, op);
    case at::kBFloat16:
      return reduce_typed<c10::BFloat16>(out, a, b, n, op);
    case at::kHalf:
      return reduce_typed<c10::Half>(out, a, b, n, op);
    case at::kInt:
      return reduce_typed<int32_t>(out, a, b, n, op);
    case at::kLong:
      return reduce_typed<int64_t>(out, a, b, n, op);
    case at::kByte:
      return reduce_typed<uint8_t>(out, a, b, n, op);
    case at::kBool:
      return reduce_typed<uint8_t>(out, a, b, n, op);  // max = or, min = and
    default:
      ZRT_INTERNAL_ASSERT(false, "unsupported dtype ", dtype);
  }
}

void reduce_inplace(void* acc, const void* in, int64_t n, at::ScalarType dtype, ReduceOp op) {
  reduce_into(acc, acc, in, n, dtype, op);
}

void divide_inplace(void* data, int64_t n, at::ScalarType dtype, int64_t divisor) {
  switch (dtype) {
    case at::kFloat: {
      auto* p = static_cast<float*>(data);
      const float d = static_cast<float>(divisor);
      for (int64_t i = 0; i < n; ++i) p[i] /= d;
      return;
    }
    case at::kDouble: {
      auto* p = static_cast<double*>(data);
      for (int64_t i = 0; i < n; ++i) p[i] /= static_cast<double>(divisor);
      return;
    }
    case at::kBFloat16: {
      auto* p = static_cast<c10::BFloat16*>(data);
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(p[i]) / divisor;
      return;
    }
    case at::kHalf: {
      auto* p = static_cast<c10::Half*>(data);
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(p[i]) / divisor;
      return;
    }
    default:
      ZRT_INTERNAL_ASSERT(false, "avg on non-floating dtype ", dtype);
  }
}

}  // namespace zrt::comm::detail
