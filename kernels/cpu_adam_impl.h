// Internal to kernels/: the per-ISA loops behind cpu_adam_step. Each updates elements
// [begin, end) of one tensor. The SIMD files compile their functions with target attributes (no
// per-file flags), so they build with the shared precompiled header and are only called after the
// CPUID check in cpu_adam.cpp.
#pragma once

#include <cstdint>

#include "kernels/cpu_adam.h"

namespace zrt::kernels::detail {

struct RangeArgs {
  const CpuAdamTensor* tensor;
  int64_t begin;
  int64_t end;
  const AdamScalars* scalars;
  bool streaming_copy;
};

void adam_range_scalar(const RangeArgs& args);
#if defined(__x86_64__)
void adam_range_avx2(const RangeArgs& args);
void adam_range_avx512(const RangeArgs& args);
#endif

// Scalar loads/stores of the gradient and copy types, shared by the scalar path and SIMD tails.
inline float load_grad_scalar(const void* grad, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kFloat32:
      return static_cast<const float*>(grad)[i];
    case DType::kBFloat16:
      return bf16_bits_to_float(static_cast<const uint16_t*>(grad)[i]);
    case DType::kFloat16:
      return fp16_bits_to_float(static_cast<const uint16_t*>(grad)[i]);
  }
  return 0.0f;
}

inline void store_copy_scalar(void* copy, DType dtype, int64_t i, float p) {
  auto* out = static_cast<uint16_t*>(copy);
  out[i] = dtype == DType::kBFloat16 ? float_to_bf16_bits(p) : float_to_fp16_bits(p);
}

// Elements [begin, end) through the scalar element function (heads and tails of SIMD loops).
inline void adam_scalar_elements(const CpuAdamTensor& t, int64_t begin, int64_t end,
                                 const AdamScalars& s) {
  for (int64_t i = begin; i < end; ++i) {
    float p = t.param[i];
    float m = t.exp_avg[i];
    float v = t.exp_avg_sq[i];
    adam_update_element(p, load_grad_scalar(t.grad, t.grad_dtype, i), m, v, s);
    t.param[i] = p;
    t.exp_avg[i] = m;
    t.exp_avg_sq[i] = v;
    if (t.param_copy != nullptr) store_copy_scalar(t.param_copy, t.copy_dtype, i, p);
  }
}

}  // namespace zrt::kernels::detail
