// transformers' LambdaLR multipliers (see hf_schedules.h).
#include "sched/hf_schedules.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>

#include "core/error.h"

namespace zrt::sched {
namespace {

constexpr double kPi = 3.14159265358979323846;

// Shortest round-trip text of a double ("1e-07", "0.001"), close to Python's repr in messages.
std::string shortest(double value) {
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

double warmup_multiplier(int64_t step, int64_t warmup) {
  return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup));
}

// Fraction of the post-warmup phase done at `step` (>= warmup).
double decay_progress(int64_t step, int64_t warmup, int64_t total) {
  return static_cast<double>(step - warmup) /
         static_cast<double>(std::max<int64_t>(1, total - warmup));
}

}  // namespace

void check_hf_options(const HfScheduleOptions& options, double lr_init) {
  const char* name = hf_schedule_name(options.type);
  ZRT_CHECK_AS(ConfigError, std::string(name) != "?", "invalid HF schedule type value ",
               static_cast<int>(options.type));
  ZRT_CHECK_AS(ConfigError, options.num_warmup_steps >= 0, name,
               " schedule: num_warmup_steps must be >= 0, got ", options.num_warmup_steps);
  ZRT_CHECK_AS(ConfigError, options.num_training_steps >= 0, name,
               " schedule: num_training_steps must be >= 0, got ", options.num_training_steps);
  if (options.type != HfScheduleType::kPolynomial) return;
  ZRT_CHECK_AS(ConfigError, lr_init > options.lr_end, "lr_end (", shortest(options.lr_end),
               ") must be smaller than initial lr (", shortest(lr_init), ")");
  // transformers divides by T - W at step == T (ZeroDivisionError when they are equal).
  ZRT_CHECK_AS(ConfigError, options.num_training_steps != options.num_warmup_steps,
               "polynomial schedule: num_training_steps (", options.num_training_steps,
               ") must differ from num_warmup_steps (", options.num_warmup_steps,
               "): the decay would divide by zero at step ", options.num_training_steps);
}

double hf_lr_lambda(const HfScheduleOptions& options, int64_t step, double lr_init) {
  ZRT_CHECK(step >= 0, "HF schedule step must be >= 0, got ", step);
  check_hf_options(options, lr_init);
  const int64_t warmup = options.num_warmup_steps;
  const int64_t total = options.num_training_steps;
  if (options.type == HfScheduleType::kConstant) return 1.0;
  if (step < warmup) return warmup_multiplier(step, warmup);
  switch (options.type) {
    case HfScheduleType::kConstantWithWarmup:
      return 1.0;
    case HfScheduleType::kLinear:
      return std::max(0.0, static_cast<double>(total - step) /
                               static_cast<double>(std::max<int64_t>(1, total - warmup)));
    case HfScheduleType::kCosine: {
      const double progress = decay_progress(step, warmup, total);
      return std::max(0.0, 0.5 * (1.0 + std::cos(kPi * options.num_cycles * 2.0 * progress)));
    }
    case HfScheduleType::kCosineWithRestarts: {
      const double progress = decay_progress(step, warmup, total);
      if (progress >= 1.0) return 0.0;
      // Python's % on non-negative floats is fmod.
      const double phase = std::fmod(options.num_cycles * progress, 1.0);
      return std::max(0.0, 0.5 * (1.0 + std::cos(kPi * phase)));
    }
    case HfScheduleType::kPolynomial: {
      if (step > total) return options.lr_end / lr_init;
      const double range = lr_init - options.lr_end;
      const double decay_steps = static_cast<double>(total - warmup);
      const double remaining = 1.0 - static_cast<double>(step - warmup) / decay_steps;
      const double decayed = range * std::pow(remaining, options.power) + options.lr_end;
      return decayed / lr_init;
    }
    case HfScheduleType::kConstant:
      break;
  }
  ZRT_INTERNAL_ASSERT(false, "unhandled HF schedule type ", static_cast<int>(options.type));
  return 1.0;
}

}  // namespace zrt::sched
