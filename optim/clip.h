// Gradient-clipping coefficients of DeepSpeed's three paths (docs/DEEPSPEED.md §2.4), given a
// global L2 norm that was already computed (and reduced across ranks) elsewhere. Plain doubles:
// the engine multiplies the gradients by the result; computing the norm belongs to ZeRO.
#pragma once

namespace zrt::optim {

// ε added to the norm by every clipping formula.
inline constexpr double kClipEpsilon = 1e-6;
// DeepSpeed's stand-in for an inf/NaN global norm.
inline constexpr double kInvalidGradNorm = -1.0;

// Note [Non-finite gradient norm]:
// ZeRO replaces an inf/NaN global norm by -1, which makes its clipping a no-op (the gradients are
// still unscaled). All functions here treat a non-finite or negative norm the same way, in all
// three paths. DeepSpeed differs elsewhere: BF16_Optimizer asserts the norm is > 0, and the
// fp32 path's coefficient becomes 0 (inf) or NaN.

// `norm` when finite, else kInvalidGradNorm.
double sanitize_grad_norm(double norm);

// ZeRO stages 1-3 and the fp16 wrappers: the divisor that unscales and clips in one pass,
// grads *= 1 / combined. With s = loss_scale, C = clip and n = the norm of the SCALED gradients:
// combined = s · max(1, (n/s + ε) / C) when C > 0, else s. Equivalent to unscaling and then
// multiplying by min(1, C / (n/s + ε)). loss_scale must be > 0.
double combined_scale(double norm_of_scaled_grads, double loss_scale, double clip);

// The gradient norm DeepSpeed reports after a ZeRO step (engine.get_global_grad_norm()): the
// scaled norm divided by the loss scale, computed before clipping (-1/s for a non-finite norm).
double unscaled_grad_norm(double norm_of_scaled_grads, double loss_scale);

// BF16_Optimizer (unscaled gradients): coef = C / (n + ε), applied only when < 1; returns the
// multiplier, 1 when no clipping happens (C <= 0, coef >= 1, or a non-finite norm).
double bf16_clip_coefficient(double global_norm, double clip);

// fp32 without a wrapper (DeepSpeed's clip_grad_norm_): min(1, C / (n + ε)); 1 when C <= 0 or
// the norm is not finite. The DP averaging DeepSpeed does leaves n unchanged (equal values).
double fp32_clip_coefficient(double global_norm, double clip);

}  // namespace zrt::optim
