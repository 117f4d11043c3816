// Internal to kernels/: the per-ISA loops behind quantize_symmetric / dequantize_symmetric /
// dequantize_accumulate, and the scalar element math they all share (heads and tails of the SIMD
// loops go through it, so every path rounds identically). Each loop handles whole groups
// [group_begin, group_end); see Note [Quantize work split] in quantize.cpp for why that is safe
// for 4-bit codes.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/dtype.h"
#include "kernels/adam_math.h"  // the bf16 / fp16 conversions

namespace zrt::kernels::detail {

struct QuantizeArgs {
  const void* x;
  DType x_dtype;
  int64_t numel;
  int64_t group_size;
  int bits;
  uint8_t* q;
  float* scales;
  int64_t group_begin;
  int64_t group_end;
};

struct DequantizeArgs {
  const uint8_t* q;
  const float* scales;
  int64_t numel;
  int64_t group_size;
  int bits;
  void* out;  // out_dtype elements, or fp32 accumulators when accumulate
  DType out_dtype;
  bool accumulate;
  int64_t group_begin;
  int64_t group_end;
};

void quantize_groups_scalar(const QuantizeArgs& args);
void dequantize_groups_scalar(const DequantizeArgs& args);
#if defined(__x86_64__)
void quantize_groups_avx2(const QuantizeArgs& args);
void dequantize_groups_avx2(const DequantizeArgs& args);
void quantize_groups_avx512(const QuantizeArgs& args);
void dequantize_groups_avx512(const DequantizeArgs& args);
#endif

// Elements [begin, end) of group `group`.
inline void group_bounds(int64_t group, int64_t group_size, int64_t numel, int64_t& begin,
                         int64_t& end) {
  begin = group * group_size;
  end = begin + group_size < numel ? begin + group_size : numel;
}

inline float load_element(const void* x, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kFloat32:
      return static_cast<const float*>(x)[i];
    case DType::kBFloat16:
      return bf16_bits_to_float(static_cast<const uint16_t*>(x)[i]);
    case DType::kFloat16:
      return fp16_bits_to_float(static_cast<const uint16_t*>(x)[i]);
  }
  return 0.0f;
}

inline void store_element(void* out, DType dtype, int64_t i, float v) {
  switch (dtype) {
    case DType::kFloat32:
      static_cast<float*>(out)[i] = v;
      return;
    case DType::kBFloat16:
      static_cast<uint16_t*>(out)[i] = float_to_bf16_bits(v);
      return;
    case DType::kFloat16:
      static_cast<uint16_t*>(out)[i] = float_to_fp16_bits(v);
      return;
  }
}

// A group's multiplier m and scale s (Note [Symmetric group quantization]). m == 0 means "write
// zero codes" (all-zero, tiny or non-finite groups); s is then 0 or NaN.
struct GroupParams {
  float m;
  float s;
};

inline GroupParams group_params(float amax, bool non_finite, int bits) {
  if (non_finite) return {0.0f, std::numeric_limits<float>::quiet_NaN()};
  const float m = static_cast<float>(1 << (bits - 1)) / amax;  // +inf for amax == 0
  if (!(m <= FLT_MAX)) return {0.0f, 0.0f};
  return {m, 1.0f / m};
}

// Whether |v| is NaN or inf: the test the SIMD paths make with an unordered compare.
inline bool not_finite(float v) { return !(std::fabs(v) <= FLT_MAX); }

// round_half_even(x·m) clamped to the code range; x·m is finite here (|x| ≤ amax, m finite).
inline int quantize_value(float x, float m, int bits) {
  const float qmax = static_cast<float>((1 << (bits - 1)) - 1);
  const float qmin = -static_cast<float>(1 << (bits - 1));
  float r = std::nearbyint(x * m);  // default rounding mode: to nearest, ties to even
  r = r < qmin ? qmin : r;
  r = r > qmax ? qmax : r;
  return static_cast<int>(r);
}

// Writes code c of element i (Note [Quantized layout]). For 4 bits an even element writes its
// whole byte (high nibble, low nibble 0) and the following odd element ORs in the low nibble, so
// elements must be written in increasing order within a byte; that holds because each byte is
// written by one thread (Note [Quantize work split]).
inline void put_code(uint8_t* q, int bits, int64_t i, int c) {
  if (bits == 8) {
    q[i] = static_cast<uint8_t>(static_cast<int8_t>(c));
  } else if ((i & 1) == 0) {
    q[i >> 1] = static_cast<uint8_t>((c & 0xF) << 4);
  } else {
    q[i >> 1] = static_cast<uint8_t>(q[i >> 1] | (c & 0xF));
  }
}

inline int get_code(const uint8_t* q, int bits, int64_t i) {
  if (bits == 8) return static_cast<int8_t>(q[i]);
  const uint8_t b = q[i >> 1];
  const int nibble = (i & 1) == 0 ? (b >> 4) : (b & 0xF);
  return nibble >= 8 ? nibble - 16 : nibble;
}

// Elements [begin, end) of one group with multiplier m (zero codes when m == 0).
inline void quantize_elements(const QuantizeArgs& a, int64_t begin, int64_t end, float m) {
  for (int64_t i = begin; i < end; ++i) {
    put_code(a.q, a.bits, i,
             m == 0.0f ? 0 : quantize_value(load_element(a.x, a.x_dtype, i), m, a.bits));
  }
}

// Note [No fused accumulate]:
// dequantize_accumulate promises acc + fl(q·s) with two roundings, the fp32 sum of dequantized
// values. GCC contracts a multiply feeding an add into an FMA whenever the target has one
// (-ffp-contract=fast is its default for C++, ISO mode included), and the AVX-512 target implies
// FMA, so the product passes through an empty asm statement the compiler cannot see through.
// The vector paths do the same with their product vectors; the CUDA kernel uses __fmul_rn and
// __fadd_rn, which are never contracted.
inline float opaque_product(float v) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  __asm__("" : "+x"(v));
#else
  volatile float t = v;
  v = t;
#endif
  return v;
}

// Elements [begin, end) of one group with scale s; see Note [No fused accumulate].
inline void dequantize_elements(const DequantizeArgs& a, int64_t begin, int64_t end, float s) {
  for (int64_t i = begin; i < end; ++i) {
    const float v = static_cast<float>(get_code(a.q, a.bits, i)) * s;
    if (a.accumulate) {
      float* acc = static_cast<float*>(a.out);
      acc[i] = acc[i] + opaque_product(v);
    } else {
      store_element(a.out, a.out_dtype, i, v);
    }
  }
}

}  // namespace zrt::kernels::detail
