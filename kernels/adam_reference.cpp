// The plain-ATen Adam reference (see adam_reference.h).
#include "kernels/adam_reference.h"

#include <cmath>

#include <ATen/ATen.h>

#include "core/error.h"

namespace zrt::kernels {

void adam_reference_step(const AdamTensors& t, const AdamStepArgs& a) {
  ZRT_CHECK(t.param.scalar_type() == at::kFloat && t.exp_avg.scalar_type() == at::kFloat &&
                t.exp_avg_sq.scalar_type() == at::kFloat,
            "adam_reference_step: param and states must be fp32");
  at::Tensor g = t.grad.to(at::kFloat).reshape(t.param.sizes());
  if (a.grad_scale != 1.0) g = g * a.grad_scale;
  if (!a.adam_w_mode && a.weight_decay != 0.0) g = g.add(t.param, a.weight_decay);

  const double bc1 = a.bias_correction ? 1.0 - std::pow(a.beta1, static_cast<double>(a.step)) : 1.0;
  const double bc2 = a.bias_correction ? 1.0 - std::pow(a.beta2, static_cast<double>(a.step)) : 1.0;

  t.exp_avg.mul_(a.beta1).add_(g, 1.0 - a.beta1);
  t.exp_avg_sq.mul_(a.beta2).addcmul_(g, g, 1.0 - a.beta2);
  const at::Tensor denom = (t.exp_avg_sq.sqrt() / std::sqrt(bc2)).add_(a.eps);
  // Decoupled decay as p + (−lr·λ)·p (DeepSpeedCPUAdam, spec §6.2). torch's p·(1 − lr·λ) rounds the
  // factor 1 − lr·λ to fp32 once and applies that error every step: after k steps p is off by
  // about k·δ relative (δ ≤ 6e-8), more than 1e-6 at k = 100 for most lr·λ. Here the rounding
  // error of the small term lr·λ only touches the decrement.
  if (a.adam_w_mode && a.weight_decay != 0.0) t.param.add_(t.param, -a.lr * a.weight_decay);
  t.param.addcdiv_(t.exp_avg, denom, -a.lr / bc1);
  if (t.param_copy.defined()) t.param_copy.copy_(t.param.reshape(t.param_copy.sizes()));
}

}  // namespace zrt::kernels
