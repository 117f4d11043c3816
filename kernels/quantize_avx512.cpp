// The AVX-512 path of symmetric group quantization: 16 elements per vector, the odd 4-bit head
// element and the tails through the scalar element functions of quantize_impl.h, which round
// identically. Compiled with target attributes; quantize.cpp calls it only after checking CPUID
// (AVX-512 F, BW, VL, DQ). Nothing here may contract a multiply and an add: the only add is the
// accumulate, kept apart from its product (Note [No fused accumulate]).
#include <algorithm>

#include "kernels/quantize_impl.h"

#if defined(__x86_64__)

#include <immintrin.h>

#define ZRT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,f16c")))

namespace zrt::kernels::detail {
namespace {

enum Kind { kF32, kBf16, kF16, kAcc };  // element types in, out types (+ fp32 accumulate) out

template <int D>
ZRT_AVX512 inline __m512 load16(const void* x, int64_t i) {
  if constexpr (D == kF32) {
    return _mm512_loadu_ps(static_cast<const float*>(x) + i);
  } else {
    const __m256i h =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(x) + i));
    if constexpr (D == kBf16) {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    return _mm512_cvtph_ps(h);
  }
}

// Round-to-nearest-even to bf16 with NaN → 0x7FC0: float_to_bf16_bits, 16 lanes.
ZRT_AVX512 inline __m256i to_bf16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb);
  r = _mm512_srli_epi32(r, 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  r = _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7FC0));
  return _mm512_cvtepi32_epi16(r);  // values < 2^16: the truncating narrow is exact
}

template <int O>
ZRT_AVX512 inline void store16(void* out, int64_t i, __m512 v) {
  if constexpr (O == kF32 || O == kAcc) {
    float* p = static_cast<float*>(out) + i;
    if constexpr (O == kAcc) {
      __asm__("" : "+v"(v));  // Note [No fused accumulate]: keep the product rounded
      v = _mm512_add_ps(_mm512_loadu_ps(p), v);
    }
    _mm512_storeu_ps(p, v);
  } else {
    auto* p = reinterpret_cast<__m256i*>(static_cast<uint16_t*>(out) + i);
    if constexpr (O == kBf16) {
      _mm256_storeu_si256(p, to_bf16(v));
    } else {
      _mm256_storeu_si256(p, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
  }
}

// amax and the non-finite flag of elements [b, e), then the group's m and s.
template <int D>
ZRT_AVX512 GroupParams scan_group(const QuantizeArgs& a, int64_t b, int64_t e) {
  const __m512 big = _mm512_set1_ps(FLT_MAX);
  __m512 vmax = _mm512_setzero_ps();
  __mmask16 bad = 0;
  int64_t i = b;
  for (; i + 16 <= e; i += 16) {
    const __m512 v = _mm512_abs_ps(load16<D>(a.x, i));
    vmax = _mm512_max_ps(vmax, v);
    bad = static_cast<__mmask16>(bad | _mm512_cmp_ps_mask(v, big, _CMP_NLE_UQ));  // NaN, > FLT_MAX
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, vmax);
  float amax = 0.0f;
  for (float l : lanes) amax = std::max(amax, l);  // max is exact: the order does not matter
  bool non_finite = bad != 0;
  for (; i < e; ++i) {
    const float v = load_element(a.x, a.x_dtype, i);
    non_finite = non_finite || not_finite(v);
    amax = std::max(amax, std::fabs(v));
  }
  return group_params(amax, non_finite, a.bits);
}

// The 16 codes of elements [i, i + 16) (quantize_value) as int8 lanes in element order.
template <int D>
ZRT_AVX512 inline __m128i codes16(const void* x, int64_t i, __m512 m, __m512 lo, __m512 hi) {
  __m512 r = _mm512_roundscale_ps(_mm512_mul_ps(load16<D>(x, i), m),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  r = _mm512_min_ps(_mm512_max_ps(r, lo), hi);
  return _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(r));  // in range: the narrow is exact
}

// 16 int8 codes → 8 bytes of nibbles, element 2k high (Note [Quantized layout]).
ZRT_AVX512 inline __m128i pack_nibbles(__m128i c) {
  const __m128i high = _mm_and_si128(_mm_slli_epi16(c, 4), _mm_set1_epi16(0x00F0));
  const __m128i low = _mm_and_si128(_mm_srli_epi16(c, 8), _mm_set1_epi16(0x000F));
  return _mm_packus_epi16(_mm_or_si128(high, low), _mm_setzero_si128());
}

template <int D>
ZRT_AVX512 void quantize_group(const QuantizeArgs& a, int64_t b, int64_t e, float m_scalar) {
  if (m_scalar == 0.0f) return quantize_elements(a, b, e, 0.0f);
  const __m512 m = _mm512_set1_ps(m_scalar);
  const __m512 hi = _mm512_set1_ps(static_cast<float>((1 << (a.bits - 1)) - 1));
  const __m512 lo = _mm512_set1_ps(-static_cast<float>(1 << (a.bits - 1)));
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
ZRT_AVX512 void quantize_range(const QuantizeArgs& a) {
  for (int64_t g = a.group_begin; g < a.group_end; ++g) {
    int64_t b, e;
    group_bounds(g, a.group_size, a.numel, b, e);
    const GroupParams p = scan_group<D>(a, b, e);
    a.scales[g] = p.s;
    quantize_group<D>(a, b, e, p.m);
  }
}

template <int O>
ZRT_AVX512 void dequantize_group(const DequantizeArgs& a, int64_t b, int64_t e, float s_scalar) {
  const __m512 s = _mm512_set1_ps(s_scalar);
  int64_t i = b;
  if (a.bits == 8) {
    for (; i + 16 <= e; i += 16) {
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a.q + i));
      store16<O>(a.out, i, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c)), s));
    }
  } else {
    if ((i & 1) != 0) {
      dequantize_elements(a, i, i + 1, s_scalar);
      ++i;
    }
    for (; i + 16 <= e; i += 16) {
      // Each byte sign-extended to 16 bits; its high nibble is then w >> 4 (arithmetic), its low
      // nibble (w << 12) >> 12; interleaving them gives the 16 codes in element order.
      const __m128i w =
          _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(a.q + i / 2)));
      const __m128i high = _mm_srai_epi16(w, 4);
      const __m128i low = _mm_srai_epi16(_mm_slli_epi16(w, 12), 12);
      const __m256i codes =
          _mm256_set_m128i(_mm_unpackhi_epi16(high, low), _mm_unpacklo_epi16(high, low));
      store16<O>(a.out, i, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(codes)), s));
    }
  }
  dequantize_elements(a, i, e, s_scalar);
}

template <int O>
ZRT_AVX512 void dequantize_range(const DequantizeArgs& a) {
  for (int64_t g = a.group_begin; g < a.group_end; ++g) {
    int64_t b, e;
    group_bounds(g, a.group_size, a.numel, b, e);
    dequantize_group<O>(a, b, e, a.scales[g]);
  }
}

}  // namespace

void quantize_groups_avx512(const QuantizeArgs& a) {
  switch (a.x_dtype) {
    case DType::kFloat32:
      return quantize_range<kF32>(a);
    case DType::kBFloat16:
      return quantize_range<kBf16>(a);
    case DType::kFloat16:
      return quantize_range<kF16>(a);
  }
}

void dequantize_groups_avx512(const DequantizeArgs& a) {
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
