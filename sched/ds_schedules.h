// DeepSpeed's learning-rate schedules (WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle,
// LRRangeTest; deepspeed/runtime/lr_schedules.py as of v0.19.8, checked step by step against it
// by tests/peers/schedule_differential.py) as pure functions of i = last_batch_iteration.
// Formulas and quirks follow docs/DEEPSPEED.md §1.8 with DeepSpeed 0.19's changes (WarmupLR's
// max lr defaults to the groups' lr; warmup_num_steps must be > 0; WarmupCosineLR's cosine is
// clamped at T; OneCycle's stair counts are used); where DeepSpeed would crash we throw
// ConfigError instead.
// Holds no state and touches no optimizer: lr_scheduler.h is the stateful wrapper.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "sched/options.h"

namespace zrt::sched {

// Adam's (beta1, beta2) as OneCycle writes them into a parameter group.
struct Betas {
  double beta1 = 0.0;
  double beta2 = 0.0;
  bool operator==(const Betas& o) const { return beta1 == o.beta1 && beta2 == o.beta2; }
};

// OneCycle overwrites beta2 with this constant in every group (a DeepSpeed quirk).
inline constexpr double kOneCycleBeta2 = 0.99;

// Note [Schedule at i = -1]:
// DeepSpeed schedulers start at last_batch_iteration = -1 and, when built with -1, write an
// initial lr into the optimizer before the first optimizer step (so that step runs with it):
//   WarmupLR / WarmupDecayLR: warmup_min_lr.   LRRangeTest: lr_range_test_min_lr.
//   OneCycle: cycle_min_lr and betas (cycle_min_mom, 0.99).
//   WarmupCosineLR: 0.0 in every group.
// The lr functions below return exactly those values at i = -1; OneCycle's betas at -1 differ
// from its formula, hence one_cycle_initial_betas. Each step() then sets i += 1 and writes the
// values at the new i.

// One value per parameter group from a per-group option: a single value applies to every group,
// otherwise there must be exactly `num_groups` values. ConfigError names `schedule` and `param`.
std::vector<double> per_group_values(const std::vector<double>& values, size_t num_groups,
                                     const char* schedule, const char* param);

// DeepSpeed's warmup length: max(2, warmup_num_steps) (ln(1) would make the log warmup 0/0).
int64_t effective_warmup_steps(int64_t warmup_num_steps);

// Warmup progress after iteration i, for 0 <= i < warmup_steps (warmup_steps >= 2):
// ln(i + 1) / ln(N) for log, i / N for linear.
double warmup_fraction(WarmupType type, int64_t warmup_steps, int64_t i);

// WarmupLR: min + (max - min)·γ with γ = warmup_fraction for i < N, else 1. At i = -1: min.
// An unset warmup_max_lr is each group's lr at construction: `base_lrs` (the overload with a
// group count throws ConfigError for it).
std::vector<double> warmup_lr(const WarmupLROptions& options, size_t num_groups, int64_t i);
std::vector<double> warmup_lr(const WarmupLROptions& options, const std::vector<double>& base_lrs,
                              int64_t i);

// WarmupDecayLR: the WarmupLR warmup, then γ = max(0, (T - i) / max(1, T - N)) for i >= N.
std::vector<double> warmup_decay_lr(const WarmupDecayLROptions& options, size_t num_groups,
                                    int64_t i);
std::vector<double> warmup_decay_lr(const WarmupDecayLROptions& options,
                                    const std::vector<double>& base_lrs, int64_t i);

// WarmupCosineLR's multiplier of each group's base lr for i >= 0: warmup from warmup_min_ratio
// to 1, then cmin + (1 - cmin)·(1 + cos(π·min(1, (i - N + 1)/max(1, T - N))))/2, floored at 0:
// from T on (and when T <= N) it stays at cos_min_ratio (DeepSpeed 0.19).
double warmup_cosine_ratio(const WarmupCosineLROptions& options, int64_t i);

// WarmupCosineLR lrs: base_lrs[g]·ratio for i >= 0; 0.0 in every group for i < 0.
std::vector<double> warmup_cosine_lr(const WarmupCosineLROptions& options,
                                     const std::vector<double>& base_lrs, int64_t i);

// OneCycle's position inside its cycle, for i < S1 + S2: 0 at the cycle's ends, 1 at the peak.
// With a stair count (cycle_first_stair_count, cycle_second_stair_count for the falling half)
// the position moves in that many equal stairs: floor(position·stairs)/stairs.
double one_cycle_scale(const OneCycleOptions& options, int64_t i);

// OneCycle lrs: min + (max - min)·scale during the cycle; afterwards, with d = i - (S1+S2) + 1,
// min / (1 + decay_lr_rate·d / decay_step_size), or min when either of those is 0.
std::vector<double> one_cycle_lr(const OneCycleOptions& options, size_t num_groups, int64_t i);

// OneCycle betas written by step() (cycle_momentum): beta1 = max_mom - (max_mom - min_mom)·scale
// during the cycle; afterwards max_mom·(1 + decay_mom_rate·d / decay_step_size), or max_mom when
// either is 0. beta2 is always kOneCycleBeta2.
std::vector<Betas> one_cycle_betas(const OneCycleOptions& options, size_t num_groups, int64_t i);

// OneCycle betas written at construction: (cycle_min_mom, 0.99). See Note [Schedule at i = -1].
std::vector<Betas> one_cycle_initial_betas(const OneCycleOptions& options, size_t num_groups);

// LRRangeTest: min_lr·(1 + step_rate·k) with k = (i + 1)/step_size, floored when staircase.
std::vector<double> lr_range_test_lr(const LRRangeTestOptions& options, size_t num_groups,
                                     int64_t i);

// Construction-time checks: throws ConfigError for what DeepSpeed rejects or crashes on, and logs
// DeepSpeed's construction warnings (e.g. total_num_steps < warmup_num_steps) once.
void check_options(const WarmupLROptions& options, size_t num_groups);
void check_options(const WarmupDecayLROptions& options, size_t num_groups);
void check_options(const WarmupCosineLROptions& options, size_t num_groups);
void check_options(const OneCycleOptions& options, size_t num_groups);
void check_options(const LRRangeTestOptions& options, size_t num_groups);

}  // namespace zrt::sched
