// Options of the learning-rate schedules (leaf header: includes only core/).
// DeepSpeed schedules carry DeepSpeed's code defaults (spec/deepspeed.md §1.8); HF schedules carry
// transformers' (get_scheduler). Per-group values are vectors: one entry applies to every group,
// otherwise there must be one entry per parameter group.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace zrt::sched {

enum class WarmupType { kLog, kLinear };

struct WarmupLROptions {
  std::vector<double> warmup_min_lr{0.0};
  std::vector<double> warmup_max_lr{0.001};
  int64_t warmup_num_steps = 1000;
  WarmupType warmup_type = WarmupType::kLog;
  int64_t last_batch_iteration = -1;
};

struct WarmupDecayLROptions {
  WarmupLROptions warmup;
  int64_t total_num_steps = 0;  // required
};

struct WarmupCosineLROptions {
  int64_t total_num_steps = 0;  // required
  double warmup_min_ratio = 0.0;
  int64_t warmup_num_steps = 1000;
  double cos_min_ratio = 0.0001;
  WarmupType warmup_type = WarmupType::kLog;
  int64_t last_batch_iteration = -1;
};

struct OneCycleOptions {
  std::vector<double> cycle_min_lr;  // required
  std::vector<double> cycle_max_lr;  // required
  double decay_lr_rate = 0.0;
  double cycle_first_step_size = 2000;
  std::optional<double> cycle_second_step_size;  // None → cycle_first_step_size
  int64_t cycle_first_stair_count = 0;           // stored, unused (as DeepSpeed)
  std::optional<int64_t> cycle_second_stair_count;
  double decay_step_size = 0;
  bool cycle_momentum = true;
  std::vector<double> cycle_min_mom{0.8};
  std::vector<double> cycle_max_mom{0.9};
  double decay_mom_rate = 0.0;
  int64_t last_batch_iteration = -1;
};

struct LRRangeTestOptions {
  std::vector<double> lr_range_test_min_lr{1e-3};
  double lr_range_test_step_size = 2000;
  double lr_range_test_step_rate = 1.0;
  bool lr_range_test_staircase = false;
  int64_t last_batch_iteration = -1;
};

// transformers' get_scheduler() schedules, used when the config has no "scheduler" section.
enum class HfScheduleType {
  kLinear,
  kCosine,
  kCosineWithRestarts,
  kPolynomial,
  kConstant,
  kConstantWithWarmup,
};

struct HfScheduleOptions {
  HfScheduleType type = HfScheduleType::kLinear;
  int64_t num_warmup_steps = 0;
  int64_t num_training_steps = 0;
  double num_cycles = 0.5;  // cosine: 0.5 (half wave); cosine_with_restarts: set to 1 by default
  double lr_end = 1e-7;     // polynomial
  double power = 1.0;       // polynomial
};

// The resolved "scheduler" section (or the HF fallback).
using SchedulerSpec = std::variant<WarmupLROptions, WarmupDecayLROptions, WarmupCosineLROptions,
                                   OneCycleOptions, LRRangeTestOptions, HfScheduleOptions>;

}  // namespace zrt::sched
