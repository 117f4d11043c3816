// Kernel building blocks: the host bf16/fp16 conversions against c10's (every fp16 value, a
// sweep of fp32 bit patterns), the Adam scalars, and the kernel thread pool.
#include <atomic>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <gtest/gtest.h>

#include "core/env.h"
#include "core/error.h"
#include "kernels/adam_math.h"
#include "kernels/cpu_thread_pool.h"

namespace zrt::kernels {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Conversions, EveryFp16ValueWidensLikeC10) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float ours = fp16_bits_to_float(static_cast<uint16_t>(h));
    const float theirs =
        static_cast<float>(c10::Half(static_cast<uint16_t>(h), c10::Half::from_bits()));
    if (std::isnan(theirs)) {
      EXPECT_TRUE(std::isnan(ours)) << h;
    } else {
      ASSERT_EQ(std::memcmp(&ours, &theirs, 4), 0) << "fp16 bits " << h;
    }
  }
}

// Every 251st fp32 bit pattern (17 million values, all exponents, both signs) plus the
// neighbourhood of each fp16 rounding boundary.
TEST(Conversions, Fp32RoundsLikeC10) {
  auto check = [](uint32_t u) {
    const float f = from_bits(u);
    const uint16_t half = float_to_fp16_bits(f);
    const uint16_t c10_half = c10::Half(f).x;
    const uint16_t bf16 = float_to_bf16_bits(f);
    const uint16_t c10_bf16 = c10::BFloat16(f).x;
    if (std::isnan(f)) {
      EXPECT_EQ(half & 0x7C00u, 0x7C00u);
      EXPECT_NE(half & 0x03FFu, 0u);
      EXPECT_EQ(bf16, 0x7FC0u);
      return;
    }
    ASSERT_EQ(half, c10_half) << "fp32 bits 0x" << std::hex << u << " (" << f << ")";
    ASSERT_EQ(bf16, c10_bf16) << "fp32 bits 0x" << std::hex << u << " (" << f << ")";
  };
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 251) check(static_cast<uint32_t>(u));
  for (uint32_t e = 0x33000000u; e <= 0x47800000u; e += 0x00800000u) {
    for (uint32_t d = 0; d < 0x4000; d += 7) {
      check(e + 0x1000u - 0x40u + d % 0x80u);  // around the half-way point of dropped bits
      check((e + d * 0x101u) | 0x80000000u);
    }
  }
}

TEST(AdamScalars, BiasCorrectionAndModes) {
  AdamStepArgs a;
  a.lr = 0.1;
  a.beta1 = 0.5;
  a.beta2 = 0.75;
  a.weight_decay = 0.2;
  a.step = 2;
  AdamScalars s = make_adam_scalars(a);
  EXPECT_FLOAT_EQ(s.step_size, static_cast<float>(-0.1 / 0.75));
  EXPECT_FLOAT_EQ(s.bc2_rsqrt, static_cast<float>(1.0 / std::sqrt(1.0 - 0.5625)));
  EXPECT_EQ(s.l2, 0.0f);
  EXPECT_FLOAT_EQ(s.decay, static_cast<float>(-0.1 * 0.2));
  a.adam_w_mode = false;
  a.bias_correction = false;
  s = make_adam_scalars(a);
  EXPECT_FLOAT_EQ(s.step_size, -0.1f);
  EXPECT_EQ(s.bc2_rsqrt, 1.0f);
  EXPECT_FLOAT_EQ(s.l2, 0.2f);
  EXPECT_EQ(s.decay, 0.0f);
}

// One element by hand: t = 1 with bias correction, AdamW, so m̂ = g, v̂ = g², update = g/(|g|+ε).
TEST(AdamScalars, OneElementByHand) {
  AdamStepArgs a;
  a.lr = 0.01;
  a.weight_decay = 0.5;
  a.eps = 0.0;
  a.step = 1;
  float p = 2.0f, m = 0.0f, v = 0.0f;
  adam_update_element(p, -4.0f, m, v, make_adam_scalars(a));
  EXPECT_NEAR(p, 2.0 * (1 - 0.01 * 0.5) + 0.01, 1e-6);
  EXPECT_NEAR(m, -0.4, 1e-7);
  EXPECT_NEAR(v, 0.016, 1e-8);
}

TEST(ThreadPool, RunsEveryIndexOnce) {
  for (const int n : {1, 2, 3, 8}) {
    std::vector<std::atomic<int>> hits(n);
    for (int rep = 0; rep < 50; ++rep) {
      run_on_threads(n, [&](int i) { hits[i].fetch_add(1); });
    }
    for (int i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 50) << "n=" << n << " index " << i;
  }
}

TEST(ThreadPool, PropagatesExceptionsAndStaysUsable) {
  EXPECT_THROW(run_on_threads(3,
                              [](int i) {
                                if (i == 2) throw std::runtime_error("boom");
                              }),
               std::runtime_error);
  std::atomic<int> sum{0};
  run_on_threads(3, [&](int i) { sum += i; });
  EXPECT_EQ(sum.load(), 3);
}

TEST(ThreadPool, NestedCallsRunInline) {
  std::atomic<int> inner{0};
  run_on_threads(2, [&](int) { run_on_threads(3, [&](int) { inner.fetch_add(1); }); });
  EXPECT_EQ(inner.load(), 6);
}

TEST(ThreadPool, ThreadCountFromEnvironment) {
  setenv(env::kNumThreads, "3", 1);
  EXPECT_EQ(cpu_kernel_threads(), 3);
  setenv(env::kNumThreads, "0", 1);
  EXPECT_THROW(cpu_kernel_threads(), ConfigError);
  setenv(env::kNumThreads, "two", 1);
  EXPECT_THROW(cpu_kernel_threads(), ConfigError);
  unsetenv(env::kNumThreads);
  EXPECT_GE(cpu_kernel_threads(), 1);
}

// Note [Kernel thread count]: without ZRT_NUM_THREADS the kernels follow LibTorch's intra-op
// count (at::set_num_threads, OMP_NUM_THREADS); ZRT_NUM_THREADS overrides it.
TEST(ThreadPool, ThreadCountFollowsLibTorch) {
  unsetenv(env::kNumThreads);
  const int before = at::get_num_threads();
  EXPECT_EQ(cpu_kernel_threads(), before);
  at::set_num_threads(1);
  EXPECT_EQ(cpu_kernel_threads(), 1);
  at::set_num_threads(3);
  EXPECT_EQ(cpu_kernel_threads(), 3);
  setenv(env::kNumThreads, "2", 1);
  EXPECT_EQ(cpu_kernel_threads(), 2);
  unsetenv(env::kNumThreads);
  at::set_num_threads(before);
}

}  // namespace
}  // namespace zrt::kernels
