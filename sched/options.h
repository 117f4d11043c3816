// Options of the learning-rate schedules (leaf header: includes only core/).
// DeepSpeed schedules carry DeepSpeed's code defaults (docs/DEEPSPEED.md §1.8); HF schedules carry
// transformers' (get_scheduler). Per-group values are vectors: one entry applies to every group,
// otherwise there must be one entry per parameter group.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/error.h"
#include "core/logging.h"

namespace zrt::sched {

enum class WarmupType { kLog, kLinear };

struct WarmupLROptions {
  std::vector<double> warmup_min_lr{0.0};
  // Empty: each group's lr at construction (DeepSpeed 0.19's WarmupLR default, None).
  std::vector<double> warmup_max_lr;
  int64_t warmup_num_steps = 1000;  // > 0 (DeepSpeed 0.19 refuses 0 and negatives)
  WarmupType warmup_type = WarmupType::kLog;
  int64_t last_batch_iteration = -1;
};

struct WarmupDecayLROptions {
  // WarmupDecayLR's own default for warmup_max_lr is 0.001.
  WarmupLROptions warmup{{0.0}, {0.001}, 1000, WarmupType::kLog, -1};
  int64_t total_num_steps = 0;  // required
};

struct WarmupCosineLROptions {
  int64_t total_num_steps = 0;  // required
  double warmup_min_ratio = 0.0;
  int64_t warmup_num_steps = 1000;  // > 0
  double cos_min_ratio = 0.0001;
  WarmupType warmup_type = WarmupType::kLog;
  int64_t last_batch_iteration = -1;
};

struct OneCycleOptions {
  std::vector<double> cycle_min_lr;  // required
  std::vector<double> cycle_max_lr;  // required
  double decay_lr_rate = 0.0;
  double cycle_first_step_size = 2000;              // > 0
  std::optional<double> cycle_second_step_size;     // None → cycle_first_step_size; >= 0
  int64_t cycle_first_stair_count = 0;              // > 0: the first half rises in that many stairs
  std::optional<int64_t> cycle_second_stair_count;  // None → cycle_first_stair_count
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
                            // (transformers' default there; the resolver must fill it)
  double lr_end = 1e-7;     // polynomial
  double power = 1.0;       // polynomial
};

// The resolved "scheduler" section (or the HF fallback).
using SchedulerSpec = std::variant<WarmupLROptions, WarmupDecayLROptions, WarmupCosineLROptions,
                                   OneCycleOptions, LRRangeTestOptions, HfScheduleOptions>;

// ---------------------------------------------------------------------------------------------
// Names as written in configs. Inline so that config/ can use them without linking zrt_sched.

inline const char* warmup_type_name(WarmupType type) {
  return type == WarmupType::kLinear ? "linear" : "log";
}

// Which schedule reads a "warmup_type" (the two readers differ on unknown names).
enum class WarmupTypeReader { kWarmupLR, kWarmupCosineLR };

// DeepSpeed's reading of "warmup_type" (docs/DEEPSPEED.md §1.8): "log" or "linear". An unknown
// name makes every warmup schedule warn and fall back to log (DeepSpeed 0.19; older
// WarmupCosineLR crashed on it). `reader` names the schedule in the warning.
inline WarmupType resolve_warmup_type(const std::string& text, WarmupTypeReader reader) {
  if (text == "log") return WarmupType::kLog;
  if (text == "linear") return WarmupType::kLinear;
  ZRT_LOG_WARN(reader == WarmupTypeReader::kWarmupCosineLR ? "WarmupCosineLR: " : "",
               "Using unknown warmup_type: ", text,
               ". The increasing function is set to default (log)");
  return WarmupType::kLog;
}

// transformers' SchedulerType values.
inline const char* hf_schedule_name(HfScheduleType type) {
  switch (type) {
    case HfScheduleType::kLinear:
      return "linear";
    case HfScheduleType::kCosine:
      return "cosine";
    case HfScheduleType::kCosineWithRestarts:
      return "cosine_with_restarts";
    case HfScheduleType::kPolynomial:
      return "polynomial";
    case HfScheduleType::kConstant:
      return "constant";
    case HfScheduleType::kConstantWithWarmup:
      return "constant_with_warmup";
  }
  return "?";
}

inline std::optional<HfScheduleType> parse_hf_schedule_type(const std::string& text) {
  for (HfScheduleType type : {HfScheduleType::kLinear, HfScheduleType::kCosine,
                              HfScheduleType::kCosineWithRestarts, HfScheduleType::kPolynomial,
                              HfScheduleType::kConstant, HfScheduleType::kConstantWithWarmup}) {
    if (text == hf_schedule_name(type)) return type;
  }
  return std::nullopt;
}

}  // namespace zrt::sched
