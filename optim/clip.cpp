// Clipping coefficients (see clip.h).
#include "optim/clip.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace zrt::optim {
namespace {

// See Note [Non-finite gradient norm].
bool usable(double norm) { return std::isfinite(norm) && norm >= 0.0; }

// min(1, C / (n + ε)), the common form of the bf16 and fp32 coefficients.
double clip_multiplier(double norm, double clip) {
  if (clip <= 0.0 || !usable(norm)) return 1.0;
  return std::min(1.0, clip / (norm + kClipEpsilon));
}

}  // namespace

double sanitize_grad_norm(double norm) { return std::isfinite(norm) ? norm : kInvalidGradNorm; }

double combined_scale(double norm_of_scaled_grads, double loss_scale, double clip) {
  ZRT_CHECK(loss_scale > 0.0, "loss scale must be > 0, got ", loss_scale);
  if (clip <= 0.0 || !usable(norm_of_scaled_grads)) return loss_scale;
  const double ratio = ((norm_of_scaled_grads / loss_scale) + kClipEpsilon) / clip;
  return std::max(ratio, 1.0) * loss_scale;
}

double unscaled_grad_norm(double norm_of_scaled_grads, double loss_scale) {
  ZRT_CHECK(loss_scale > 0.0, "loss scale must be > 0, got ", loss_scale);
  return sanitize_grad_norm(norm_of_scaled_grads) / loss_scale;
}

double bf16_clip_coefficient(double global_norm, double clip) {
  return clip_multiplier(global_norm, clip);
}

double fp32_clip_coefficient(double global_norm, double clip) {
  return clip_multiplier(global_norm, clip);
}

}  // namespace zrt::optim
