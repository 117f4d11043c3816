// DeepSpeed's batch-size triad (docs/DEEPSPEED.md §1.2): train_batch_size (TBS),
// train_micro_batch_size_per_gpu (MBS) and gradient_accumulation_steps (GAS) on W data-parallel
// ranks. Missing values are derived with Python's floor division, then DeepSpeed's assertions
// run in DeepSpeed's order with DeepSpeed's messages.
#pragma once

#include <cstdint>
#include <optional>

#include "config/resolved.h"

namespace zrt::config {

// Derives and checks the triad. Throws ConfigError with DeepSpeed's message, e.g.
// "Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided" or
// "Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu *
// gradient_acc_step * world_size 8 != 2 * 3 * 1".
BatchConfig resolve_batch(std::optional<int64_t> train_batch_size,
                          std::optional<int64_t> train_micro_batch_size_per_gpu,
                          std::optional<int64_t> gradient_accumulation_steps, int world_size);

// Python's a // b (rounds toward negative infinity). b must not be 0.
int64_t floor_div(int64_t a, int64_t b);

}  // namespace zrt::config
