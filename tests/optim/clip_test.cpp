// Clipping coefficients of docs/DEEPSPEED.md §2.4 with hand-computed values, and the treatment of
// inf/NaN norms.
#include "optim/clip.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "core/error.h"

namespace zrt::optim {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

TEST(Clip, ZeroCombinedScaleClipsAndUnscales) {
  // Scaled norm 10 at scale 2: true norm 5 > C = 1 → combined = 2 · (5 + 1e-6) / 1.
  EXPECT_DOUBLE_EQ(combined_scale(10.0, 2.0, 1.0), 10.000002);
  // The product with the true gradients equals g · C / (‖g‖ + ε).
  EXPECT_DOUBLE_EQ(10.0 / combined_scale(10.0, 2.0, 1.0), 5.0 * 1.0 / (5.0 + 1e-6));
  // True norm 0.25 < C: no clipping, only unscaling.
  EXPECT_EQ(combined_scale(1.0, 4.0, 1.0), 4.0);
  // Just below the threshold (norm/s + ε < C) the clamp keeps 1; just above it clips.
  EXPECT_EQ(combined_scale(2.0 * (3.0 - 2e-6), 2.0, 3.0), 2.0);
  EXPECT_GT(combined_scale(2.0 * 3.0, 2.0, 3.0), 2.0);
  // Clipping disabled.
  EXPECT_EQ(combined_scale(1e9, 8.0, 0.0), 8.0);
  EXPECT_THROW(combined_scale(1.0, 0.0, 1.0), Error);
}

TEST(Clip, NonFiniteNormMakesClippingANoOp) {
  EXPECT_EQ(sanitize_grad_norm(kInf), -1.0);
  EXPECT_EQ(sanitize_grad_norm(-kInf), -1.0);
  EXPECT_EQ(sanitize_grad_norm(kNan), -1.0);
  EXPECT_EQ(sanitize_grad_norm(3.5), 3.5);
  for (double norm : {kInf, kNan, kInvalidGradNorm}) {
    EXPECT_EQ(combined_scale(norm, 1024.0, 1.0), 1024.0);
    EXPECT_EQ(bf16_clip_coefficient(norm, 1.0), 1.0);
    EXPECT_EQ(fp32_clip_coefficient(norm, 1.0), 1.0);
  }
  EXPECT_EQ(unscaled_grad_norm(kInf, 2.0), -0.5);
}

TEST(Clip, Bf16Coefficient) {
  EXPECT_DOUBLE_EQ(bf16_clip_coefficient(4.0, 1.0), 1.0 / 4.000001);
  EXPECT_EQ(bf16_clip_coefficient(0.5, 1.0), 1.0);  // coef > 1 is not applied
  EXPECT_EQ(bf16_clip_coefficient(0.0, 1.0), 1.0);
  EXPECT_EQ(bf16_clip_coefficient(100.0, 0.0), 1.0);  // disabled
}

TEST(Clip, Fp32Coefficient) {
  EXPECT_DOUBLE_EQ(fp32_clip_coefficient(2.0, 0.5), 0.5 / 2.000001);
  EXPECT_EQ(fp32_clip_coefficient(0.1, 0.5), 1.0);
  EXPECT_EQ(fp32_clip_coefficient(100.0, -1.0), 1.0);
}

TEST(Clip, ReportedNorm) {
  EXPECT_EQ(unscaled_grad_norm(10.0, 2.0), 5.0);
  EXPECT_EQ(unscaled_grad_norm(3.0, 1.0), 3.0);
  EXPECT_THROW(unscaled_grad_norm(1.0, -1.0), Error);
}

}  // namespace
}  // namespace zrt::optim
