// The AVX-512 path of the CPU Adam kernel: 16 floats per vector, masked loads/stores for the
// unaligned head and the tail, bf16/fp16 gradients widened in registers, the optional bf16/fp16
// copy rounded in registers. Compiled with target attributes; cpu_adam.cpp calls it only after
// checking CPUID (AVX-512 F, BW and VL).
#include <algorithm>

#include "kernels/cpu_adam_impl.h"

#if defined(__x86_64__)

#include <immintrin.h>

#define ZRT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))

namespace zrt::kernels::detail {
namespace {

enum GradKind { kGradF32, kGradBf16, kGradF16 };
enum CopyKind { kCopyNone, kCopyBf16, kCopyF16 };

struct Scalars16 {
  __m512 scale, l2, beta1, one_minus_beta1, beta2, one_minus_beta2, bc2_rsqrt, eps, decay, step;
  bool has_l2, has_decay;
};

ZRT_AVX512 inline Scalars16 broadcast(const AdamScalars& s) {
  Scalars16 b;
  b.scale = _mm512_set1_ps(s.grad_scale);
  b.l2 = _mm512_set1_ps(s.l2);
  b.beta1 = _mm512_set1_ps(s.beta1);
  b.one_minus_beta1 = _mm512_set1_ps(s.one_minus_beta1);
  b.beta2 = _mm512_set1_ps(s.beta2);
  b.one_minus_beta2 = _mm512_set1_ps(s.one_minus_beta2);
  b.bc2_rsqrt = _mm512_set1_ps(s.bc2_rsqrt);
  b.eps = _mm512_set1_ps(s.eps);
  b.decay = _mm512_set1_ps(s.decay);
  b.step = _mm512_set1_ps(s.step_size);
  b.has_l2 = s.l2 != 0.0f;
  b.has_decay = s.decay != 0.0f;
  return b;
}

// Note [Adam element math], 16 lanes at a time.
ZRT_AVX512 inline void adam_math(__m512& p, __m512 g, __m512& m, __m512& v, const Scalars16& s) {
  g = _mm512_mul_ps(g, s.scale);
  if (s.has_l2) g = _mm512_fmadd_ps(s.l2, p, g);
  m = _mm512_fmadd_ps(s.beta1, m, _mm512_mul_ps(s.one_minus_beta1, g));
  v = _mm512_fmadd_ps(s.beta2, v, _mm512_mul_ps(_mm512_mul_ps(s.one_minus_beta2, g), g));
  const __m512 d = _mm512_fmadd_ps(_mm512_sqrt_ps(v), s.bc2_rsqrt, s.eps);
  const __m512 u = _mm512_div_ps(m, d);
  if (s.has_decay) p = _mm512_fmadd_ps(s.decay, p, p);
  p = _mm512_fmadd_ps(s.step, u, p);
}

template <int G, bool kMasked>
ZRT_AVX512 inline __m512 load_grad(const void* grad, int64_t i, __mmask16 k) {
  if constexpr (G == kGradF32) {
    const float* g = static_cast<const float*>(grad) + i;
    return kMasked ? _mm512_maskz_loadu_ps(k, g) : _mm512_loadu_ps(g);
  } else {
    const uint16_t* g = static_cast<const uint16_t*>(grad) + i;
    const __m256i h = kMasked ? _mm256_maskz_loadu_epi16(k, g)
                              : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g));
    if constexpr (G == kGradBf16) {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    } else {
      return _mm512_cvtph_ps(h);
    }
  }
}

// Round-to-nearest-even to bf16 with NaN → 0x7FC0, the rounding of float_to_bf16_bits.
ZRT_AVX512 inline __m256i to_bf16(__m512 p) {
  const __m512i u = _mm512_castps_si512(p);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb);
  r = _mm512_srli_epi32(r, 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(p, p, _CMP_UNORD_Q);
  r = _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7FC0));
  return _mm512_cvtepi32_epi16(r);
}

template <int C, bool kMasked, bool kStream>
ZRT_AVX512 inline void store_copy(void* copy, int64_t i, __mmask16 k, __m512 p) {
  if constexpr (C != kCopyNone) {
    const __m256i h = C == kCopyBf16
                          ? to_bf16(p)
                          : _mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    uint16_t* out = static_cast<uint16_t*>(copy) + i;
    if constexpr (kMasked) {
      _mm256_mask_storeu_epi16(out, k, h);
    } else if constexpr (kStream) {
      _mm256_stream_si256(reinterpret_cast<__m256i*>(out), h);
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), h);
    }
  }
}

template <int G, int C, bool kMasked, bool kStream>
ZRT_AVX512 inline void step16(const CpuAdamTensor& t, int64_t i, __mmask16 k, const Scalars16& s) {
  float* pp = t.param + i;
  float* mp = t.exp_avg + i;
  float* vp = t.exp_avg_sq + i;
  __m512 p = kMasked ? _mm512_maskz_loadu_ps(k, pp) : _mm512_loadu_ps(pp);
  __m512 m = kMasked ? _mm512_maskz_loadu_ps(k, mp) : _mm512_loadu_ps(mp);
  __m512 v = kMasked ? _mm512_maskz_loadu_ps(k, vp) : _mm512_loadu_ps(vp);
  const __m512 g = load_grad<G, kMasked>(t.grad, i, k);
  adam_math(p, g, m, v, s);
  if constexpr (kMasked) {
    _mm512_mask_storeu_ps(pp, k, p);
    _mm512_mask_storeu_ps(mp, k, m);
    _mm512_mask_storeu_ps(vp, k, v);
  } else {
    _mm512_storeu_ps(pp, p);
    _mm512_storeu_ps(mp, m);
    _mm512_storeu_ps(vp, v);
  }
  store_copy<C, kMasked, kStream>(t.param_copy, i, k, p);
}

ZRT_AVX512 inline __mmask16 first_lanes(int64_t n) {
  return static_cast<__mmask16>((1u << n) - 1u);
}

template <int G, int C>
ZRT_AVX512 void range(const RangeArgs& a) {
  const CpuAdamTensor& t = *a.tensor;
  const Scalars16 s = broadcast(*a.scalars);
  int64_t i = a.begin;
  const int64_t end = a.end;
  // Head: up to 15 elements, so that the loads and stores of p below do not split cache lines.
  const auto addr = reinterpret_cast<uintptr_t>(t.param + i);
  const int64_t head =
      std::min<int64_t>(static_cast<int64_t>((64 - (addr & 63)) & 63) / 4, end - i);
  if (head > 0) {
    step16<G, C, true, false>(t, i, first_lanes(head), s);
    i += head;
  }
  // Note [Streaming copy]: the copy is written, never read, so ordinary stores would first read
  // each of its cache lines from memory (read-for-ownership); non-temporal stores skip that read.
  // They need 32-byte alignment, which stays fixed along the loop (32 bytes per 16 elements).
  const bool stream =
      C != kCopyNone && a.streaming_copy &&
      (reinterpret_cast<uintptr_t>(static_cast<uint16_t*>(t.param_copy) + i) & 31) == 0;
  if (stream) {
    for (; i + 16 <= end; i += 16) step16<G, C, false, true>(t, i, 0, s);
    _mm_sfence();
  } else {
    for (; i + 16 <= end; i += 16) step16<G, C, false, false>(t, i, 0, s);
  }
  if (i < end) step16<G, C, true, false>(t, i, first_lanes(end - i), s);
}

template <int G>
void range_for_copy(const RangeArgs& a) {
  if (a.tensor->param_copy == nullptr) return range<G, kCopyNone>(a);
  if (a.tensor->copy_dtype == DType::kBFloat16) return range<G, kCopyBf16>(a);
  return range<G, kCopyF16>(a);
}

}  // namespace

void adam_range_avx512(const RangeArgs& a) {
  switch (a.tensor->grad_dtype) {
    case DType::kFloat32:
      return range_for_copy<kGradF32>(a);
    case DType::kBFloat16:
      return range_for_copy<kGradBf16>(a);
    case DType::kFloat16:
      return range_for_copy<kGradF16>(a);
  }
}

}  // namespace zrt::kernels::detail

#endif  // defined(__x86_64__)
