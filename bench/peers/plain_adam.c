/* plain_adam.c: the physical limit for bench/peers/adam.py. One AdamW step as the plainest
 * single-pass loop a compiler can vectorise: read p, g, m, v once, write p, m, v (and, for bf16
 * gradients, a bf16 copy of p) once, OpenMP-parallel with a static split. No tiling, prefetching,
 * streaming stores or intrinsics: whatever speed it reaches, the compiler and the memory system
 * give for free. adam.py compiles it with
 *
 *   gcc -O3 -march=native -fopenmp -fno-math-errno -shared -fPIC plain_adam.c -o plain_adam.so
 *
 * (-fno-math-errno lets sqrtf vectorise; it changes no result) and calls plain_adamw_step through
 * ctypes. The arithmetic is decoupled AdamW with bias correction, in fp32, with the per-step
 * scalars computed in double and rounded once:
 *   p = p - lr*wd*p;  m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g*g;
 *   p = p - lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps),  bc_i = 1 - b_i^t. */
#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float bf16_to_float(uint16_t b) {
  const uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Round to nearest even, like torch's .to(torch.bfloat16); NaN is not special-cased (the data
 * the benchmark feeds is finite). */
static inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

typedef struct {
  float b1, one_minus_b1, b2, one_minus_b2, step_size, bc2_rsqrt, eps, decay;
} Scalars;

static Scalars make_scalars(int64_t step, double lr, double beta1, double beta2, double eps,
                            double weight_decay) {
  const double bc1 = 1.0 - pow(beta1, (double)step);
  const double bc2 = 1.0 - pow(beta2, (double)step);
  const Scalars s = {.b1 = (float)beta1,
                     .one_minus_b1 = (float)(1.0 - beta1),
                     .b2 = (float)beta2,
                     .one_minus_b2 = (float)(1.0 - beta2),
                     .step_size = (float)(-lr / bc1),
                     .bc2_rsqrt = (float)(1.0 / sqrt(bc2)),
                     .eps = (float)eps,
                     .decay = (float)(1.0 - lr * weight_decay)};
  return s;
}

static inline float update(float* p, float g, float* m, float* v, const Scalars* s) {
  const float mi = s->b1 * *m + s->one_minus_b1 * g;
  const float vi = s->b2 * *v + s->one_minus_b2 * g * g;
  const float pi = *p * s->decay + s->step_size * mi / (sqrtf(vi) * s->bc2_rsqrt + s->eps);
  *m = mi;
  *v = vi;
  *p = pi;
  return pi;
}

/* One step over n elements on `threads` (>= 1) OpenMP threads. grad_bf16 = 0: g is float*, copy
 * is ignored. grad_bf16 = 1: g is bf16 (uint16_t*), and copy (n bf16 values) receives the updated
 * p. */
void plain_adamw_step(float* restrict p, const void* restrict g, int grad_bf16, float* restrict m,
                      float* restrict v, uint16_t* restrict copy, int64_t n, int64_t step,
                      double lr, double beta1, double beta2, double eps, double weight_decay,
                      int threads) {
  const Scalars s = make_scalars(step, lr, beta1, beta2, eps, weight_decay);
  if (!grad_bf16) {
    const float* restrict gf = (const float*)g;
#pragma omp parallel for simd schedule(static) num_threads(threads)
    for (int64_t i = 0; i < n; ++i) update(&p[i], gf[i], &m[i], &v[i], &s);
  } else {
    const uint16_t* restrict gb = (const uint16_t*)g;
#pragma omp parallel for simd schedule(static) num_threads(threads)
    for (int64_t i = 0; i < n; ++i) {
      copy[i] = float_to_bf16(update(&p[i], bf16_to_float(gb[i]), &m[i], &v[i], &s));
    }
  }
}
