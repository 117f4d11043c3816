// DeepSpeed's five schedules as pure functions (see ds_schedules.h). The arithmetic keeps
// DeepSpeed's order of operations so that results agree to the last bit where it matters.
#include "sched/ds_schedules.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/logging.h"

namespace zrt::sched {
namespace {

constexpr double kPi = 3.14159265358979323846;

void check_iteration(int64_t i, const char* schedule) {
  ZRT_CHECK(i >= -1, schedule, ": last_batch_iteration must be >= -1, got ", i);
}

void check_warmup_type(WarmupType type, const char* schedule) {
  ZRT_CHECK_AS(ConfigError, type == WarmupType::kLog || type == WarmupType::kLinear, schedule,
               ": invalid warmup_type value ", static_cast<int>(type));
}

void check_warmup_steps(int64_t warmup_num_steps, const char* schedule) {
  ZRT_CHECK_AS(ConfigError, warmup_num_steps > 0, schedule,
               ": warmup_num_steps must be a positive integer, got ", warmup_num_steps);
}

// Throwing part of the checks, shared by the pure functions and check_options.
void validate(const WarmupLROptions& o, size_t num_groups, const char* schedule) {
  check_warmup_type(o.warmup_type, schedule);
  check_warmup_steps(o.warmup_num_steps, schedule);
  per_group_values(o.warmup_min_lr, num_groups, schedule, "warmup_min_lr");
  if (!o.warmup_max_lr.empty()) {
    per_group_values(o.warmup_max_lr, num_groups, schedule, "warmup_max_lr");
  }
}

void validate(const WarmupCosineLROptions& o) {
  check_warmup_type(o.warmup_type, "WarmupCosineLR");
  check_warmup_steps(o.warmup_num_steps, "WarmupCosineLR");
}

double second_step_size(const OneCycleOptions& o) {
  return o.cycle_second_step_size.value_or(o.cycle_first_step_size);
}

void validate(const OneCycleOptions& o, size_t num_groups) {
  per_group_values(o.cycle_min_lr, num_groups, "OneCycle", "cycle_min_lr");
  per_group_values(o.cycle_max_lr, num_groups, "OneCycle", "cycle_max_lr");
  per_group_values(o.cycle_min_mom, num_groups, "OneCycle", "cycle_min_mom");
  per_group_values(o.cycle_max_mom, num_groups, "OneCycle", "cycle_max_mom");
  // DeepSpeed divides by the cycle length and by the first half's share of it.
  ZRT_CHECK_AS(ConfigError, o.cycle_first_step_size > 0,
               "OneCycle: cycle_first_step_size must be > 0, got ", o.cycle_first_step_size);
  ZRT_CHECK_AS(ConfigError, second_step_size(o) >= 0,
               "OneCycle: cycle_second_step_size must be >= 0, got ", second_step_size(o));
}

void validate(const LRRangeTestOptions& o, size_t num_groups) {
  per_group_values(o.lr_range_test_min_lr, num_groups, "LRRangeTest", "lr_range_test_min_lr");
  ZRT_CHECK_AS(ConfigError,
               o.lr_range_test_step_size > 0 &&
                   o.lr_range_test_step_size == std::floor(o.lr_range_test_step_size),
               "LRRangeTest: lr_range_test_step_size must be a positive integer, got ",
               o.lr_range_test_step_size);
}

// γ of WarmupLR / WarmupDecayLR; `decay_total` is T for WarmupDecayLR, unset for WarmupLR.
double warmup_gamma(const WarmupLROptions& o, int64_t i, const int64_t* decay_total) {
  const int64_t n = effective_warmup_steps(o.warmup_num_steps);
  if (i < n) return warmup_fraction(o.warmup_type, n, i);
  if (decay_total == nullptr) return 1.0;
  const int64_t t = *decay_total;
  return std::max(0.0,
                  static_cast<double>(t - i) / static_cast<double>(std::max<int64_t>(1, t - n)));
}

// `base_lrs` (the groups' lrs at construction) stand in for an unset warmup_max_lr; without
// them an unset warmup_max_lr is an error.
std::vector<double> warmup_lrs(const WarmupLROptions& o, size_t num_groups,
                               const std::vector<double>* base_lrs, int64_t i,
                               const int64_t* decay_total, const char* schedule) {
  check_iteration(i, schedule);
  validate(o, num_groups, schedule);
  const std::vector<double> min_lrs =
      per_group_values(o.warmup_min_lr, num_groups, schedule, "warmup_min_lr");
  if (i < 0) return min_lrs;
  ZRT_CHECK_AS(ConfigError, !o.warmup_max_lr.empty() || base_lrs != nullptr, schedule,
               ": warmup_max_lr is unset, so it is each group's lr, which is not given here");
  const std::vector<double> max_lrs =
      o.warmup_max_lr.empty()
          ? *base_lrs
          : per_group_values(o.warmup_max_lr, num_groups, schedule, "warmup_max_lr");
  const double gamma = warmup_gamma(o, i, decay_total);
  std::vector<double> lrs(num_groups);
  for (size_t g = 0; g < num_groups; ++g) {
    lrs[g] = min_lrs[g] + (max_lrs[g] - min_lrs[g]) * gamma;
  }
  return lrs;
}

// DeepSpeed skips a decay when the rate or the step size is 0 (math.isclose(x, 0) with its
// default tolerances is exact equality).
bool skip_decay(double rate, double step_size) { return rate == 0.0 || step_size == 0.0; }

}  // namespace

std::vector<double> per_group_values(const std::vector<double>& values, size_t num_groups,
                                     const char* schedule, const char* param) {
  ZRT_CHECK_AS(ConfigError, num_groups >= 1, schedule, ": the optimizer has no parameter groups");
  if (values.size() == 1) return std::vector<double>(num_groups, values[0]);
  ZRT_CHECK_AS(ConfigError, values.size() == num_groups, schedule, ": expected ", num_groups,
               " value", num_groups == 1 ? "" : "s", " for ", param,
               " (one per parameter group, or a single value), got ", values.size());
  return values;
}

int64_t effective_warmup_steps(int64_t warmup_num_steps) {
  return std::max<int64_t>(2, warmup_num_steps);
}

double warmup_fraction(WarmupType type, int64_t warmup_steps, int64_t i) {
  ZRT_INTERNAL_ASSERT(warmup_steps >= 2 && i >= 0, "warmup_steps ", warmup_steps, " i ", i);
  if (type == WarmupType::kLinear) {
    return static_cast<double>(i) / static_cast<double>(warmup_steps);
  }
  // DeepSpeed precomputes 1/ln(N) and multiplies.
  const double inverse_log_warmup = 1.0 / std::log(static_cast<double>(warmup_steps));
  return inverse_log_warmup * std::log(static_cast<double>(i + 1));
}

std::vector<double> warmup_lr(const WarmupLROptions& options, size_t num_groups, int64_t i) {
  return warmup_lrs(options, num_groups, nullptr, i, nullptr, "WarmupLR");
}

std::vector<double> warmup_lr(const WarmupLROptions& options, const std::vector<double>& base_lrs,
                              int64_t i) {
  return warmup_lrs(options, base_lrs.size(), &base_lrs, i, nullptr, "WarmupLR");
}

std::vector<double> warmup_decay_lr(const WarmupDecayLROptions& options, size_t num_groups,
                                    int64_t i) {
  return warmup_lrs(options.warmup, num_groups, nullptr, i, &options.total_num_steps,
                    "WarmupDecayLR");
}

std::vector<double> warmup_decay_lr(const WarmupDecayLROptions& options,
                                    const std::vector<double>& base_lrs, int64_t i) {
  return warmup_lrs(options.warmup, base_lrs.size(), &base_lrs, i, &options.total_num_steps,
                    "WarmupDecayLR");
}

double warmup_cosine_ratio(const WarmupCosineLROptions& options, int64_t i) {
  ZRT_CHECK(i >= 0, "WarmupCosineLR: the ratio is defined for last_batch_iteration >= 0, got ", i);
  validate(options);
  const int64_t n = effective_warmup_steps(options.warmup_num_steps);
  if (i < n) {
    const double r = warmup_fraction(options.warmup_type, n, i);
    return options.warmup_min_ratio + r * (1.0 - options.warmup_min_ratio);
  }
  // DeepSpeed 0.19 clamps the progress at 1: past T (and when T <= N) the ratio stays at
  // cos_min_ratio.
  const double s = static_cast<double>(i - n + 1);
  const double total = static_cast<double>(std::max<int64_t>(1, options.total_num_steps - n));
  const double progress = std::min(1.0, s / total);
  const double wave = (1.0 + std::cos(kPi * progress)) / 2.0;
  return std::max(0.0, options.cos_min_ratio + (1.0 - options.cos_min_ratio) * wave);
}

std::vector<double> warmup_cosine_lr(const WarmupCosineLROptions& options,
                                     const std::vector<double>& base_lrs, int64_t i) {
  check_iteration(i, "WarmupCosineLR");
  validate(options);
  ZRT_CHECK_AS(ConfigError, !base_lrs.empty(),
               "WarmupCosineLR: the optimizer has no parameter groups");
  if (i < 0) return std::vector<double>(base_lrs.size(), 0.0);  // Note [Schedule at i = -1]
  const double ratio = warmup_cosine_ratio(options, i);
  std::vector<double> lrs(base_lrs.size());
  for (size_t g = 0; g < base_lrs.size(); ++g) lrs[g] = base_lrs[g] * ratio;
  return lrs;
}

double one_cycle_scale(const OneCycleOptions& options, int64_t i) {
  const double first = options.cycle_first_step_size;
  const double second = second_step_size(options);
  const double total = first + second;
  const double ratio = first / total;
  const double b = static_cast<double>(i + 1);
  const double cycle = std::floor(1.0 + b / total);
  const double x = 1.0 + b / total - cycle;
  const bool rising = x <= ratio;
  double scale = rising ? x / ratio : (x - 1.0) / (ratio - 1.0);
  // DeepSpeed 0.19: with a stair count the half moves in that many equal stairs.
  const int64_t stairs =
      rising ? options.cycle_first_stair_count
             : options.cycle_second_stair_count.value_or(options.cycle_first_stair_count);
  if (stairs > 0) {
    const double in_cycle = std::fmod(b, total);  // Python's % (both operands positive)
    const double position = in_cycle <= first
                                ? in_cycle * static_cast<double>(stairs) / first
                                : (total - in_cycle) * static_cast<double>(stairs) / second;
    scale = std::floor(position) / static_cast<double>(stairs);
  }
  return scale;
}

std::vector<double> one_cycle_lr(const OneCycleOptions& options, size_t num_groups, int64_t i) {
  check_iteration(i, "OneCycle");
  validate(options, num_groups);
  const std::vector<double> min_lrs =
      per_group_values(options.cycle_min_lr, num_groups, "OneCycle", "cycle_min_lr");
  const std::vector<double> max_lrs =
      per_group_values(options.cycle_max_lr, num_groups, "OneCycle", "cycle_max_lr");
  const double total = options.cycle_first_step_size + second_step_size(options);
  std::vector<double> lrs(num_groups);
  if (static_cast<double>(i) < total) {
    const double scale = one_cycle_scale(options, i);
    for (size_t g = 0; g < num_groups; ++g) lrs[g] = min_lrs[g] + (max_lrs[g] - min_lrs[g]) * scale;
    return lrs;
  }
  if (skip_decay(options.decay_lr_rate, options.decay_step_size)) return min_lrs;
  const double d = static_cast<double>(i) - total + 1.0;
  const double factor = 1.0 + options.decay_lr_rate * (d / options.decay_step_size);
  for (size_t g = 0; g < num_groups; ++g) lrs[g] = min_lrs[g] / factor;
  return lrs;
}

std::vector<Betas> one_cycle_betas(const OneCycleOptions& options, size_t num_groups, int64_t i) {
  check_iteration(i, "OneCycle");
  validate(options, num_groups);
  const std::vector<double> min_moms =
      per_group_values(options.cycle_min_mom, num_groups, "OneCycle", "cycle_min_mom");
  const std::vector<double> max_moms =
      per_group_values(options.cycle_max_mom, num_groups, "OneCycle", "cycle_max_mom");
  const double total = options.cycle_first_step_size + second_step_size(options);
  std::vector<Betas> betas(num_groups);
  if (static_cast<double>(i) < total) {
    const double scale = one_cycle_scale(options, i);
    for (size_t g = 0; g < num_groups; ++g) {
      betas[g] = {max_moms[g] - (max_moms[g] - min_moms[g]) * scale, kOneCycleBeta2};
    }
    return betas;
  }
  const bool skip = skip_decay(options.decay_mom_rate, options.decay_step_size);
  const double d = static_cast<double>(i) - total + 1.0;
  const double factor = skip ? 1.0 : 1.0 + options.decay_mom_rate * (d / options.decay_step_size);
  for (size_t g = 0; g < num_groups; ++g) {
    betas[g] = {skip ? max_moms[g] : max_moms[g] * factor, kOneCycleBeta2};
  }
  return betas;
}

std::vector<Betas> one_cycle_initial_betas(const OneCycleOptions& options, size_t num_groups) {
  validate(options, num_groups);
  const std::vector<double> min_moms =
      per_group_values(options.cycle_min_mom, num_groups, "OneCycle", "cycle_min_mom");
  std::vector<Betas> betas(num_groups);
  for (size_t g = 0; g < num_groups; ++g) betas[g] = {min_moms[g], kOneCycleBeta2};
  return betas;
}

std::vector<double> lr_range_test_lr(const LRRangeTestOptions& options, size_t num_groups,
                                     int64_t i) {
  check_iteration(i, "LRRangeTest");
  validate(options, num_groups);
  const std::vector<double> min_lrs = per_group_values(options.lr_range_test_min_lr, num_groups,
                                                       "LRRangeTest", "lr_range_test_min_lr");
  double interval = static_cast<double>(i + 1) / options.lr_range_test_step_size;
  if (options.lr_range_test_staircase) interval = std::floor(interval);
  const double increase = 1.0 + options.lr_range_test_step_rate * interval;
  std::vector<double> lrs(num_groups);
  for (size_t g = 0; g < num_groups; ++g) lrs[g] = min_lrs[g] * increase;
  return lrs;
}

void check_options(const WarmupLROptions& options, size_t num_groups) {
  validate(options, num_groups, "WarmupLR");
}

void check_options(const WarmupDecayLROptions& options, size_t num_groups) {
  validate(options.warmup, num_groups, "WarmupDecayLR");
  const int64_t n = effective_warmup_steps(options.warmup.warmup_num_steps);
  if (options.total_num_steps < n) {
    ZRT_LOG_WARN("total_num_steps ", options.total_num_steps, " is less than warmup_num_steps ",
                 options.warmup.warmup_num_steps);
  }
}

void check_options(const WarmupCosineLROptions& options, size_t num_groups) {
  ZRT_CHECK_AS(ConfigError, num_groups >= 1,
               "WarmupCosineLR: the optimizer has no parameter groups");
  validate(options);
  const int64_t n = effective_warmup_steps(options.warmup_num_steps);
  if (options.total_num_steps < n) {
    ZRT_LOG_WARN("total_num_steps ", options.total_num_steps, " is less than warmup_num_steps ",
                 options.warmup_num_steps);
  }
}

void check_options(const OneCycleOptions& options, size_t num_groups) {
  validate(options, num_groups);
}

void check_options(const LRRangeTestOptions& options, size_t num_groups) {
  validate(options, num_groups);
}

}  // namespace zrt::sched
