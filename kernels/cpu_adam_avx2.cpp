// The AVX2 path of the CPU Adam kernel: 8 floats per vector (FMA, F16C for fp16), the unaligned
// head and the tail through the scalar element function, which rounds identically. Compiled with
// target attributes; cpu_adam.cpp calls it only after checking CPUID.
#include <algorithm>

#include "kernels/cpu_adam_impl.h"

#if defined(__x86_64__)

#include <immintrin.h>

#define ZRT_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace zrt::kernels::detail {
namespace {

enum GradKind { kGradF32, kGradBf16, kGradF16 };
enum CopyKind { kCopyNone, kCopyBf16, kCopyF16 };

struct Scalars8 {
  __m256 scale, l2, beta1, one_minus_beta1, beta2, one_minus_beta2, bc2_rsqrt, eps, decay, step;
  bool has_l2, has_decay;
};

ZRT_AVX2 inline Scalars8 broadcast(const AdamScalars& s) {
  Scalars8 b;
  b.scale = _mm256_set1_ps(s.grad_scale);
  b.l2 = _mm256_set1_ps(s.l2);
  b.beta1 = _mm256_set1_ps(s.beta1);
  b.one_minus_beta1 = _mm256_set1_ps(s.one_minus_beta1);
  b.beta2 = _mm256_set1_ps(s.beta2);
  b.one_minus_beta2 = _mm256_set1_ps(s.one_minus_beta2);
  b.bc2_rsqrt = _mm256_set1_ps(s.bc2_rsqrt);
  b.eps = _mm256_set1_ps(s.eps);
  b.decay = _mm256_set1_ps(s.decay);
  b.step = _mm256_set1_ps(s.step_size);
  b.has_l2 = s.l2 != 0.0f;
  b.has_decay = s.decay != 0.0f;
  return b;
}

// Note [Adam element math], 8 lanes at a time.
ZRT_AVX2 inline void adam_math(__m256& p, __m256 g, __m256& m, __m256& v, const Scalars8& s) {
  g = _mm256_mul_ps(g, s.scale);
  if (s.has_l2) g = _mm256_fmadd_ps(s.l2, p, g);
  m = _mm256_fmadd_ps(s.beta1, m, _mm256_mul_ps(s.one_minus_beta1, g));
  v = _mm256_fmadd_ps(s.beta2, v, _mm256_mul_ps(_mm256_mul_ps(s.one_minus_beta2, g), g));
  const __m256 d = _mm256_fmadd_ps(_mm256_sqrt_ps(v), s.bc2_rsqrt, s.eps);
  const __m256 u = _mm256_div_ps(m, d);
  if (s.has_decay) p = _mm256_fmadd_ps(s.decay, p, p);
  p = _mm256_fmadd_ps(s.step, u, p);
}

template <int G>
ZRT_AVX2 inline __m256 load_grad(const void* grad, int64_t i) {
  if constexpr (G == kGradF32) {
    return _mm256_loadu_ps(static_cast<const float*>(grad) + i);
  } else {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(grad) + i));
    if constexpr (G == kGradBf16) {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    } else {
      return _mm256_cvtph_ps(h);
    }
  }
}

// Round-to-nearest-even to bf16 with NaN → 0x7FC0, the rounding of float_to_bf16_bits.
ZRT_AVX2 inline __m128i to_bf16(__m256 p) {
  const __m256i u = _mm256_castps_si256(p);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb);
  r = _mm256_srli_epi32(r, 16);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(p, p, _CMP_UNORD_Q));
  r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC0), nan);
  // Values are < 2^16, so the saturating pack is exact; it works per 128-bit lane, hence the
  // permute gathering the two useful 64-bit quarters.
  const __m256i packed = _mm256_packus_epi32(r, r);
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
}

template <int G, int C, bool kStream>
ZRT_AVX2 inline void step8(const CpuAdamTensor& t, int64_t i, const Scalars8& s) {
  float* pp = t.param + i;
  float* mp = t.exp_avg + i;
  float* vp = t.exp_avg_sq + i;
  __m256 p = _mm256_loadu_ps(pp);
  __m256 m = _mm256_loadu_ps(mp);
  __m256 v = _mm256_loadu_ps(vp);
  adam_math(p, load_grad<G>(t.grad, i), m, v, s);
  _mm256_storeu_ps(pp, p);
  _mm256_storeu_ps(mp, m);
  _mm256_storeu_ps(vp, v);
  if constexpr (C != kCopyNone) {
    const __m128i h = C == kCopyBf16
                          ? to_bf16(p)
                          : _mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    auto* out = reinterpret_cast<__m128i*>(static_cast<uint16_t*>(t.param_copy) + i);
    if constexpr (kStream) {
      _mm_stream_si128(out, h);
    } else {
      _mm_storeu_si128(out, h);
    }
  }
}

template <int G, int C>
ZRT_AVX2 void range(const RangeArgs& a) {
  const CpuAdamTensor& t = *a.tensor;
  const AdamScalars& scalars = *a.scalars;
  const Scalars8 s = broadcast(scalars);
  int64_t i = a.begin;
  const int64_t end = a.end;
  const auto addr = reinterpret_cast<uintptr_t>(t.param + i);
  const int64_t head =
      std::min<int64_t>(static_cast<int64_t>((32 - (addr & 31)) & 31) / 4, end - i);
  adam_scalar_elements(t, i, i + head, scalars);
  i += head;
  // Note [Streaming copy] (cpu_adam_avx512.cpp); 16 bytes per 8 elements here.
  const bool stream =
      C != kCopyNone && a.streaming_copy &&
      (reinterpret_cast<uintptr_t>(static_cast<uint16_t*>(t.param_copy) + i) & 15) == 0;
  if (stream) {
    for (; i + 8 <= end; i += 8) step8<G, C, true>(t, i, s);
    _mm_sfence();
  } else {
    for (; i + 8 <= end; i += 8) step8<G, C, false>(t, i, s);
  }
  adam_scalar_elements(t, i, end, scalars);
}

template <int G>
void range_for_copy(const RangeArgs& a) {
  if (a.tensor->param_copy == nullptr) return range<G, kCopyNone>(a);
  if (a.tensor->copy_dtype == DType::kBFloat16) return range<G, kCopyBf16>(a);
  return range<G, kCopyF16>(a);
}

}  // namespace

void adam_range_avx2(const RangeArgs& a) {
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
