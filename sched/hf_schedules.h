// transformers' get_scheduler() schedules (linear, cosine, cosine_with_restarts, polynomial,
// constant, constant_with_warmup): the multiplier that torch's LambdaLR applies to each group's
// base lr, as a pure function of the LambdaLR step. Used when a DeepSpeed config has no
// "scheduler" section and the HF Trainer builds the schedule. No state (see lr_scheduler.h).
#pragma once

#include <cstdint>

#include "sched/options.h"

namespace zrt::sched {

// Multiplier of the base lr at LambdaLR step `step` (>= 0; LambdaLR evaluates step 0 at
// construction). With W = num_warmup_steps, T = num_training_steps:
//   warmup (every type but constant), step < W:  step / max(1, W)
//   linear:                max(0, (T - step) / max(1, T - W))
//   cosine:                p = (step - W) / max(1, T - W); max(0, (1 + cos(2π·num_cycles·p)) / 2)
//                          (not clamped: past T the wave rises again, as in transformers)
//   cosine_with_restarts:  0 once p >= 1, else max(0, (1 + cos(π·((num_cycles·p) mod 1))) / 2)
//   polynomial:            lr_end / lr_init past T, else
//                          ((lr_init - lr_end)·(1 - (step - W)/(T - W))^power + lr_end) / lr_init
//   constant: 1.           constant_with_warmup: 1 after the warmup.
// `lr_init` is the optimizer's initial lr (transformers reads optimizer.defaults["lr"]); only
// polynomial uses it. Throws ConfigError for what check_hf_options rejects.
double hf_lr_lambda(const HfScheduleOptions& options, int64_t step, double lr_init);

// ConfigError for schedules transformers rejects or crashes on: polynomial with
// lr_init <= lr_end (transformers' ValueError text), polynomial with T == W (0/0 at step T),
// negative step counts, an out-of-range type.
void check_hf_options(const HfScheduleOptions& options, double lr_init);

}  // namespace zrt::sched
