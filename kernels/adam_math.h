// The Adam update of one element, shared by the CPU (scalar and SIMD) and CUDA kernels, and the
// per-step scalars it needs. Header-only, no LibTorch, usable from .cu files (host and device).
// The hyper-parameters follow docs/DEEPSPEED.md §6: DeepSpeedCPUAdam's formulation, which equals
// FusedAdam's up to rounding.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define ZRT_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define ZRT_HOST_DEVICE inline
#endif

namespace zrt::kernels {

// The hyper-parameters of one Adam step of one parameter group, as the optimizer holds them.
struct AdamStepArgs {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool bias_correction = true;
  bool adam_w_mode = true;  // true: decoupled decay (AdamW); false: L2 term added to the gradient
  int64_t step = 1;         // t, the step count *after* incrementing it (>= 1)
  double grad_scale = 1.0;  // g_eff = g · grad_scale, see Note [grad_scale]
};

// Note [grad_scale]:
// The kernels multiply every gradient element by grad_scale before anything else, so the engine
// can fold fp16 loss-scale removal and global-norm clipping into the Adam pass instead of making
// an extra pass over the gradients: grad_scale = clip_coef / loss_scale. DeepSpeed divides the
// gradients by the combined scale in a separate pass; multiplying by the reciprocal may differ in
// the last bit. With grad_scale == 1 the product is exact, so nothing changes.

// The fp32 scalars of one step, computed once per step in double and rounded once.
struct AdamScalars {
  float beta1;
  float one_minus_beta1;
  float beta2;
  float one_minus_beta2;
  float step_size;  // −lr / (1 − β1^t)        (−lr without bias correction)
  float bc2_rsqrt;  // 1 / sqrt(1 − β2^t)      (1 without bias correction)
  float eps;
  float l2;     // λ in L2 mode, else 0
  float decay;  // −lr·λ in AdamW mode, else 0
  float grad_scale;
};

// Note [Adam scalars]:
// β^t is recomputed with pow() from the step count every step rather than tracked by repeated
// multiplication (DeepSpeedCPUAdam tracks it incrementally); this makes a resumed run identical to
// an uninterrupted one whatever the step, and is the more accurate of the two.
inline AdamScalars make_adam_scalars(const AdamStepArgs& a) {
  double bc1 = 1.0;
  double bc2 = 1.0;
  if (a.bias_correction) {
    bc1 = 1.0 - std::pow(a.beta1, static_cast<double>(a.step));
    bc2 = 1.0 - std::pow(a.beta2, static_cast<double>(a.step));
  }
  AdamScalars s;
  s.beta1 = static_cast<float>(a.beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - a.beta1);
  s.beta2 = static_cast<float>(a.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - a.beta2);
  s.step_size = static_cast<float>(-a.lr / bc1);
  s.bc2_rsqrt = static_cast<float>(1.0 / std::sqrt(bc2));
  s.eps = static_cast<float>(a.eps);
  s.l2 = a.adam_w_mode ? 0.0f : static_cast<float>(a.weight_decay);
  s.decay = a.adam_w_mode ? static_cast<float>(-a.lr * a.weight_decay) : 0.0f;
  s.grad_scale = static_cast<float>(a.grad_scale);
  return s;
}

// Note [Adam element math]:
// Every kernel (scalar, AVX2, AVX-512, CUDA) performs exactly this sequence of fp32 operations,
// with the fused multiply-adds written out, so all of them produce the same bits:
//   g  = g_in · grad_scale
//   g  = fma(λ, p, g)                      L2 mode, λ ≠ 0 only
//   m  = fma(β1, m, (1 − β1)·g)
//   v  = fma(β2, v, ((1 − β2)·g)·g)
//   d  = fma(sqrt(v), 1/sqrt(bc2), ε)      ε added after bias-correcting sqrt(v), as in spec §6
//   u  = m / d
//   p  = fma(−lr·λ, p, p)                  AdamW mode, λ ≠ 0 only (decay uses the old p)
//   p  = fma(−lr/bc1, u, p)
// Mathematically this is spec §6.1/§6.2; torch::optim::Adam/AdamW round differently (separate
// multiplies and adds), so they agree to a few ulp per step, not bitwise. The λ ≠ 0 guards matter
// for non-finite p (0·inf is NaN). NaN/inf in g, m or v propagate; nothing is skipped.
ZRT_HOST_DEVICE float fma_f32(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return fmaf(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

ZRT_HOST_DEVICE float sqrt_f32(float x) {
#if defined(__CUDA_ARCH__)
  return sqrtf(x);
#else
  return std::sqrt(x);
#endif
}

ZRT_HOST_DEVICE void adam_update_element(float& p, float g, float& m, float& v,
                                         const AdamScalars& s) {
  g = g * s.grad_scale;
  if (s.l2 != 0.0f) g = fma_f32(s.l2, p, g);
  m = fma_f32(s.beta1, m, s.one_minus_beta1 * g);
  v = fma_f32(s.beta2, v, (s.one_minus_beta2 * g) * g);
  const float d = fma_f32(sqrt_f32(v), s.bc2_rsqrt, s.eps);
  const float u = m / d;
  if (s.decay != 0.0f) p = fma_f32(s.decay, p, p);
  p = fma_f32(s.step_size, u, p);
}

// Round-to-nearest-even fp32 → bf16 bits, the rounding of c10::BFloat16 and Tensor::to(kBFloat16);
// NaN becomes the quiet NaN 0x7FC0.
ZRT_HOST_DEVICE uint16_t float_to_bf16_bits(float f) {
#if defined(__CUDA_ARCH__)
  const uint32_t u = __float_as_uint(f);
  if (isnan(f)) return 0x7FC0u;
#else
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  if (std::isnan(f)) return 0x7FC0u;
#endif
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

ZRT_HOST_DEVICE float bf16_bits_to_float(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
#endif
}

// Host-only IEEE binary16 conversions (the CUDA kernel uses cuda_fp16.h). Round-to-nearest-even
// with subnormals kept, like c10::Half and the F16C instructions; NaN becomes 0x7E00 (signed).
#if !defined(__CUDACC__)
inline uint16_t float_to_fp16_bits(float f) {
  uint32_t x;
  __builtin_memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7FFFFFFFu;
  if (x >= 0x7F800000u) return static_cast<uint16_t>(sign | (x > 0x7F800000u ? 0x7E00u : 0x7C00u));
  if (x >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds to ±inf
  if (x < 0x38800000u) {
    // |f| < 2^-14: the result is subnormal (or zero). Adding 0.5 puts the fp32 ulp at 2^-24, the
    // fp16 subnormal step, so the FPU's own rounding does the work.
    float a;
    __builtin_memcpy(&a, &x, 4);
    a += 0.5f;
    uint32_t ab;
    __builtin_memcpy(&ab, &a, 4);
    return static_cast<uint16_t>(sign | (ab - 0x3F000000u));
  }
  // Normal: re-bias the exponent by −112 and round the 13 dropped mantissa bits to even.
  x += 0xC8000FFFu + ((x >> 13) & 1u);
  return static_cast<uint16_t>(sign | (x >> 13));
}

inline float fp16_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu;
  const uint32_t m = h & 0x3FFu;
  uint32_t u;
  if (e == 0x1F) {
    u = sign | 0x7F800000u | (m << 13);
  } else if (e == 0) {
    const float mag = static_cast<float>(m) * 5.9604644775390625e-8f;  // m · 2^-24, exact
    __builtin_memcpy(&u, &mag, 4);
    u |= sign;
  } else {
    u = sign | ((e + 112u) << 23) | (m << 13);
  }
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
#endif

}  // namespace zrt::kernels
