// A plain-ATen reference of the Adam step of docs/DEEPSPEED.md §6: the same mathematics as the
// fused kernels, written as separate tensor operations the way torch.optim.Adam[W] does them.
// Slow (about eight passes over memory) and rounded differently from the kernels; used by the
// tests and the benchmark as the independent check.
#pragma once

#include "kernels/adam_launch.h"
#include "kernels/adam_math.h"

namespace zrt::kernels {

// Updates t.param, t.exp_avg, t.exp_avg_sq in place (any device, fp32) and, when defined,
// writes t.param_copy = t.param converted to its dtype. args.step is t after incrementing.
void adam_reference_step(const AdamTensors& t, const AdamStepArgs& args);

}  // namespace zrt::kernels
