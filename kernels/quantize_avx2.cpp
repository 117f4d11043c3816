// The AVX2 path of symmetric group quantization: 16 elements per step (two 8-float vectors), the
// odd 4-bit head element and the tails through the scalar element functions of quantize_impl.h,
// which round identically. Compiled with target attributes (no FMA: nothing here may contract);
// quantize.cpp calls it only after checking CPUID.
#include <algorithm>

#include "kernels/quantize_impl.h"

#if defined(__x86_64__)

#include <immintrin.h>

#define ZRT_AVX2 __attribute__((target("avx2,f16c")))

namespace zrt::kernels::detail {
namespace {

enum Kind { kF32, kBf16, kF16, kAcc };  // element types in, out types (+ fp32 accumulate) out

template <int D>
ZRT_AVX2 inline __m256 load8(const void* x, int64_t i) {
  if constexpr (D == kF32) {
    return _mm256_loadu_ps(static_cast<const float*>(x) + i);
  } else {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(x) + i));
    if constexpr (D == kBf16)
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
  }
}

// Round-to-nearest-even to bf16 with NaN → 0x7FC0: float_to_bf16_bits, 8 lanes.
ZRT_AVX2 inline __m128i to_bf16(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb), 16);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC0), nan);
  // packus works per 128-bit lane; the permute gathers the two useful 64-bit quarters.
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08));
}

template <int O>
ZRT_AVX2 inline void store8(void* out, int64_t i, __m256 v) {
  if constexpr (O == kF32 || O == kAcc) {
    float* p = static_cast<float*>(out) + i;
    if constexpr (O == kAcc) {
      __asm__("" : "+x"(v));  // Note [No fused accumulate]: keep the product rounded
      v = _mm256_add_ps(_mm256_loadu_ps(p), v);
    }
    _mm256_storeu_ps(p, v);
  } else {
    auto* p = reinterpret_cast<__m128i*>(static_cast<uint16_t*>(out) + i);
    _mm_storeu_si128(p, O == kBf16
                            ? to_bf16(v)
                            : _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
}

// amax and the non-finite flag of elements [b, e), then the group's m and s.
template <int D>
ZRT_AVX2 GroupParams scan_group(const QuantizeArgs& a, int64_t b, int64_t e) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 big = _mm256_set1_ps(FLT_MAX);
  __m256 vmax = _mm256_setzero_ps();
  __m256 bad = _mm256_setzero_ps();
  int64_t i = b;
  for (; i + 8 <= e; i += 8) {
    const __m256 v = _mm256_andnot_ps(sign, load8<D>(a.x, i));
    vmax = _mm256_max_ps(vmax, v);
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(v, big, _CMP_NLE_UQ));  // NaN or > FLT_MAX
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vmax);
  float amax = 0.0f;
  for (float l : lanes) amax = std::max(amax, l);  // max is exact: the order does not matter
  bool non_finite = _mm256_movemask_ps(bad) != 0;
  for (; i < e; ++i) {
    const float v = load_element(a.x, a.x_dtype, i);
    non_finite = non_finite || not_finite(v);
    amax = std::max(amax, std::fabs(v));
  }
  return group_params(amax, non_finite, a.bits);
}

// 8 codes of quantize_value, as int32 lanes.
ZRT_AVX2 inline __m256i codes8(__m256 v, __m256 m, __m256 lo, __m256 hi) {
  __m256 r = _mm256_round_ps(_mm256_mul_ps(v, m), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  r = _mm256_min_ps(_mm256_max_ps(r, lo), hi);
  return _mm256_cvttps_epi32(r);
}

// The 16 codes of elements [i, i + 16) as int8 lanes in element order.
template <int D>
ZRT_AVX2 inline __m128i codes16(const void* x, int64_t i, __m256 m, __m256 lo, __m256 hi) {
  const __m256i a = codes8(load8<D>(x, i), m, lo, hi);
  const __m256i b = codes8(load8<D>(x, i + 8), m, lo, hi);
  // packs works per 128-bit lane: [a0-3 b0-3 | a4-7 b4-7]; the permute restores the order.
  const __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xD8);
  return _mm_packs_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
}

// 16 int8 codes → 8 bytes of nibbles, element 2k high (Note [Quantized layout]).
ZRT_AVX2 inline __m128i pack_nibbles(__m128i c) {
  const __m128i high = _mm_and_si128(_mm_slli_epi16(c, 4), _mm_set1_epi16(0x00F0));
  const __m128i low = _mm_and_si128(_mm_srli_epi16(c, 8), _mm_set1_epi16(0x000F));
  return _mm_packus_epi16(_mm_or_si128(high, low), _mm_setzero_si128());
}

template <int D>
ZRT_AVX2 void quantize_group(const QuantizeArgs& a, int64_t b, int64_t e, float m_scalar) {
  if (m_scalar == 0.0f) return quantize_elements(a, b, e, 0.0f);
  const __m256 m = _mm256_set1_ps(m_scalar);
  const __m256 hi = _mm256_set1_ps(static_cast<float>((1 << (a.bits - 1)) - 1));
  const __m256 lo = _mm256_set1_ps(-static_cast<float>(1 << (a.bits - 1)));
  int64_t i = b;
  if (a.bits == 8) {
    for (; i + 16 <= e; i += 16) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(a.q + i), codes16<D>(a.x, i, m, lo, hi));
    }
  } else {
    if ((i & 1) != 0) {  // the low nibble of a byte shared with the previous group
      quantize_elements(a, i, i + 1, m_scalar);
      ++i;
    }
    for (; i + 16 <= e; i += 16) {
      _mm_storel_epi64(reinterpret_cast<__m128i*>(a.q + i / 2),
                       pack_nibbles(codes16<D>(a.x, i, m, lo, hi)));
    }
  }
  quantize_elements(a, i, e, m_scalar);
}

template <int D>
ZRT_AVX2 void quantize_range(const QuantizeArgs& a) {
  for (int64_t g = a.group_begin; g < a.group_end; ++g) {
    int64_t b, e;
    group_bounds(g, a.group_size, a.numel, b, e);
    const GroupParams p = scan_group<D>(a, b, e);
    a.scales[g] = p.s;
    quantize_group<D>(a, b, e, p.m);
  }
}

ZRT_AVX2 inline __m256 widen8(__m128i codes16_lanes_low8) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(codes16_lanes_low8));
}

template <int O>
ZRT_AVX2 void dequantize_group(const DequantizeArgs& a, int64_t b, int64_t e, float s_scalar) {
  const __m256 s = _mm256_set1_ps(s_scalar);
  int64_t i = b;
  if (a.bits == 8) {
    for (; i + 16 <= e; i += 16) {
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a.q + i));
      const __m256 v0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c));
      const __m256 v1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(c, 8)));
      store8<O>(a.out, i, _mm256_mul_ps(v0, s));
      store8<O>(a.out, i + 8, _mm256_mul_ps(v1, s));
    }
  } else {
    if ((i & 1) != 0) {
      dequantize_elements(a, i, i + 1, s_scalar);
      ++i;
    }
    for (; i + 16 <= e; i += 16) {
      // Each byte sign-extended to 16 bits; its high nibble is then w >> 4 (arithmetic), its low
      // nibble (w << 12) >> 12.
      const __m128i w =
          _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(a.q + i / 2)));
      const __m128i high = _mm_srai_epi16(w, 4);
      const __m128i low = _mm_srai_epi16(_mm_slli_epi16(w, 12), 12);
      store8<O>(a.out, i, _mm256_mul_ps(widen8(_mm_unpacklo_epi16(high, low)), s));
      store8<O>(a.out, i + 8, _mm256_mul_ps(widen8(_mm_unpackhi_epi16(high, low)), s));
    }
  }
  dequantize_elements(a, i, e, s_scalar);
}

template <int O>
ZRT_AVX2 void dequantize_range(const DequantizeArgs& a) {
  for (int64_t g = a.group_begin; g < a.group_end; ++g) {
    int64_t b, e;
    group_bounds(g, a.group_size, a.numel, b, e);
    dequantize_group<O>(a, b, e, a.scales[g]);
  }
}

}  // namespace

void quantize_groups_avx2(const QuantizeArgs& a) {
  switch (a.x_dtype) {
    case DType::kFloat32:
      return quantize_range<kF32>(a);
    case DType::kBFloat16:
      return quantize_range<kBf16>(a);
    case DType::kFloat16:
      return quantize_range<kF16>(a);
  }
}

void dequantize_groups_avx2(const DequantizeArgs& a) {
  if (a.accumulate) return dequantize_range<kAcc>(a);
  switch (a.out_dtype) {
    case DType::kFloat32:
      return dequantize_range<kF32>(a);
    case DType::kBFloat16:
      return dequantize_range<kBf16>(a);
    case DType::kFloat16:
      return dequantize_range<kF16>(a);
  }
}

}  // namespace zrt::kernels::detail

#endif  // defined(__x86_64__)
