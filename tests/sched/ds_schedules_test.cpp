// DeepSpeed's schedules: the golden vectors of docs/DEEPSPEED.md §7, every boundary step, the
// construction-time values, the quirks of §1.8 and the per-group option rules.
#include "sched/ds_schedules.h"

#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "golden.h"
#include "sched/lr_scheduler.h"

namespace zrt::sched {
namespace {

using test::expect_curve;
using test::golden_trace;
using test::LogCapture;
using test::near_rel;

constexpr double kPi = 3.14159265358979323846;

WarmupLROptions warmup(double min_lr, double max_lr, int64_t n, WarmupType type) {
  WarmupLROptions o;
  o.warmup_min_lr = {min_lr};
  o.warmup_max_lr = {max_lr};
  o.warmup_num_steps = n;
  o.warmup_type = type;
  return o;
}

WarmupCosineLROptions cosine(int64_t total, int64_t n, WarmupType type) {
  WarmupCosineLROptions o;
  o.total_num_steps = total;
  o.warmup_num_steps = n;
  o.warmup_min_ratio = 0.0;
  o.cos_min_ratio = 1e-4;
  o.warmup_type = type;
  return o;
}

OneCycleOptions one_cycle_golden() {
  OneCycleOptions o;
  o.cycle_min_lr = {0.1};
  o.cycle_max_lr = {1.0};
  o.cycle_first_step_size = 4;
  o.decay_lr_rate = 0.5;
  o.decay_step_size = 2;
  return o;
}

// ---- Golden vectors (§7) ------------------------------------------------------------------

TEST(WarmupLR, GoldenLog) {
  expect_curve(golden_trace(warmup(0, 1, 5, WarmupType::kLog), {0.5}, 7),
               {0, 0, 0.43067656, 0.68260619, 0.86135312, 1, 1, 1});
}

TEST(WarmupLR, GoldenLinear) {
  expect_curve(golden_trace(warmup(0, 1, 5, WarmupType::kLinear), {0.5}, 7),
               {0, 0, 0.2, 0.4, 0.6, 0.8, 1, 1});
}

TEST(WarmupDecayLR, GoldenLinear) {
  WarmupDecayLROptions o;
  o.warmup = warmup(0, 1, 4, WarmupType::kLinear);
  o.total_num_steps = 10;
  expect_curve(golden_trace(o, {0.5}, 12), {0, 0, 0.25, 0.5, 0.75, 1.0, 0.83333333, 0.66666667, 0.5,
                                            0.33333333, 0.16666667, 0.0, 0.0});
}

// DeepSpeed 0.19.8's WarmupCosineLR (printed by it): from T on the ratio stays at cos_min_ratio
// (older versions let the cosine rise again).
TEST(WarmupCosineLR, GoldenLinearStaysAtTheFloorAfterTotal) {
  expect_curve(golden_trace(cosine(10, 4, WarmupType::kLinear), {1.0}, 12),
               {0, 0, 0.25, 0.5, 0.75, 0.9330194006220301, 0.7500249999999999, 0.50005,
                0.2500750000000001, 0.06708059937796987, 0.0001, 0.0001, 0.0001},
               1e-12);
}

TEST(WarmupCosineLR, InitSetsEveryGroupToZero) {
  LRScheduler scheduler(cosine(10, 4, WarmupType::kLinear), {1.0, 3.0});
  EXPECT_EQ(scheduler.get_lr(), (std::vector<double>{0.0, 0.0}));  // DeepSpeed 0.19
  scheduler.step();  // i = 0: ratio 0 for every group
  EXPECT_EQ(scheduler.get_lr(), (std::vector<double>{0.0, 0.0}));
  scheduler.step();  // i = 1: 0.25 of each base lr
  EXPECT_EQ(scheduler.get_lr(), (std::vector<double>{0.25, 0.75}));
  EXPECT_EQ(warmup_cosine_lr(cosine(10, 4, WarmupType::kLinear), {1.0, 2.0}, -1),
            (std::vector<double>{0.0, 0.0}));
}

TEST(OneCycle, GoldenLrAndBeta1) {
  const std::vector<double> lr = {0.1,   0.325, 0.55, 0.775,     1.0,        0.775, 0.55,
                                  0.325, 0.1,   0.08, 0.1 / 1.5, 0.1 / 1.75, 0.05};
  const std::vector<double> beta1 = {0.8,   0.875, 0.85, 0.825, 0.8, 0.825, 0.85,
                                     0.875, 0.9,   0.9,  0.9,   0.9, 0.9};
  LRScheduler scheduler(one_cycle_golden(), {0.01});
  for (size_t k = 0; k < lr.size(); ++k) {
    if (k > 0) scheduler.step();
    EXPECT_TRUE(near_rel(scheduler.get_lr()[0], lr[k])) << "step " << k;
    ASSERT_TRUE(scheduler.get_momentum().has_value());
    EXPECT_TRUE(near_rel((*scheduler.get_momentum())[0].beta1, beta1[k])) << "step " << k;
    EXPECT_EQ((*scheduler.get_momentum())[0].beta2, 0.99) << "step " << k;
  }
  // The spec prints 0.066667 and 0.057143 (6 digits): consistent with the exact fractions above.
  EXPECT_NEAR(0.1 / 1.5, 0.066667, 5e-7);
  EXPECT_NEAR(0.1 / 1.75, 0.057143, 5e-7);
}

TEST(LRRangeTest, GoldenContinuousAndStaircase) {
  LRRangeTestOptions o;
  o.lr_range_test_min_lr = {1e-3};
  o.lr_range_test_step_size = 2;
  o.lr_range_test_step_rate = 1.0;
  expect_curve(golden_trace(o, {0.5}, 6), {0.001, 0.0015, 0.002, 0.0025, 0.003, 0.0035, 0.004});
  o.lr_range_test_staircase = true;
  expect_curve(golden_trace(o, {0.5}, 6), {0.001, 0.001, 0.002, 0.002, 0.003, 0.003, 0.004});
}

// ---- Boundaries and quirks -----------------------------------------------------------------

TEST(WarmupLR, BoundaryStepsLog) {
  const WarmupLROptions o = warmup(0.1, 0.9, 8, WarmupType::kLog);
  EXPECT_EQ(warmup_lr(o, 1, -1), (std::vector<double>{0.1}));  // construction: min
  EXPECT_EQ(warmup_lr(o, 1, 0), (std::vector<double>{0.1}));   // ln(1) = 0
  EXPECT_TRUE(near_rel(warmup_lr(o, 1, 7)[0], 0.9));           // last warmup step: ln 8 / ln 8
  EXPECT_TRUE(near_rel(warmup_lr(o, 1, 6)[0], 0.1 + 0.8 * std::log(7.0) / std::log(8.0)));
  EXPECT_EQ(warmup_lr(o, 1, 8), (std::vector<double>{0.9}));        // end of warmup
  EXPECT_EQ(warmup_lr(o, 1, 1000000), (std::vector<double>{0.9}));  // far past: flat
}

TEST(WarmupLR, BoundaryStepsLinear) {
  const WarmupLROptions o = warmup(0.0, 1.0, 8, WarmupType::kLinear);
  EXPECT_EQ(warmup_lr(o, 1, 0)[0], 0.0);
  EXPECT_EQ(warmup_lr(o, 1, 7)[0], 7.0 / 8.0);
  EXPECT_EQ(warmup_lr(o, 1, 8)[0], 1.0);
  EXPECT_EQ(warmup_lr(o, 1, 9)[0], 1.0);
}

TEST(WarmupLR, WarmupStepsBelowTwoActAsTwo) {
  for (int64_t n : {1, 2}) {
    SCOPED_TRACE(n);
    EXPECT_EQ(effective_warmup_steps(n), 2);
    expect_curve(golden_trace(warmup(0, 1, n, WarmupType::kLog), {0.5}, 3), {0, 0, 1, 1});
    expect_curve(golden_trace(warmup(0, 1, n, WarmupType::kLinear), {0.5}, 3), {0, 0, 0.5, 1});
  }
  // DeepSpeed 0.19: "warmup_num_steps must be a positive integer".
  for (int64_t n : {-3, 0}) {
    EXPECT_THROW(LRScheduler(warmup(0, 1, n, WarmupType::kLog), {0.5}), ConfigError) << n;
    EXPECT_THROW(LRScheduler(cosine(10, n, WarmupType::kLog), {0.5}), ConfigError) << n;
  }
}

// DeepSpeed 0.19: an unset warmup_max_lr is each group's lr at construction.
TEST(WarmupLR, MaxLrDefaultsToTheGroupsLr) {
  WarmupLROptions o = warmup(0, 1, 2, WarmupType::kLinear);
  o.warmup_max_lr.clear();
  expect_curve(golden_trace(o, {0.5}, 3), {0, 0, 0.25, 0.5});
  LRScheduler two(o, {0.5, 2.0});
  two.step();
  two.step();
  two.step();
  EXPECT_EQ(two.get_lr(), (std::vector<double>{0.5, 2.0}));
  EXPECT_THROW(warmup_lr(o, 1, 3), ConfigError);  // no group lrs given
  EXPECT_EQ(WarmupDecayLROptions{}.warmup.warmup_max_lr, std::vector<double>{0.001});
}

TEST(WarmupLR, InitOverridesTheOptimizerLr) {
  // The optimizer's configured lr (0.5) is replaced by warmup_min_lr at construction.
  LRScheduler scheduler(warmup(0.01, 1, 5, WarmupType::kLinear), {0.5, 0.7});
  EXPECT_EQ(scheduler.get_lr(), (std::vector<double>{0.01, 0.01}));
  EXPECT_EQ(scheduler.last_batch_iteration(), -1);
}

TEST(WarmupLR, PerGroupValues) {
  WarmupLROptions o = warmup(0, 1, 4, WarmupType::kLinear);
  o.warmup_min_lr = {0.0, 0.1};
  o.warmup_max_lr = {1.0, 2.0};
  EXPECT_EQ(warmup_lr(o, 2, 2), (std::vector<double>{0.5, 0.1 + 1.9 * 0.5}));
  EXPECT_EQ(warmup_lr(o, 2, -1), (std::vector<double>{0.0, 0.1}));
}

TEST(PerGroupValues, BroadcastAndErrors) {
  EXPECT_EQ(per_group_values({0.3}, 3, "S", "p"), (std::vector<double>{0.3, 0.3, 0.3}));
  EXPECT_EQ(per_group_values({0.1, 0.2}, 2, "S", "p"), (std::vector<double>{0.1, 0.2}));
  try {
    per_group_values({0.1, 0.2, 0.3}, 2, "WarmupLR", "warmup_max_lr");
    FAIL() << "no throw";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "WarmupLR: expected 2 values for warmup_max_lr (one per parameter group, or a "
              "single value), got 3");
  }
  EXPECT_THROW(per_group_values({}, 2, "S", "p"), ConfigError);
  EXPECT_THROW(per_group_values({1.0}, 0, "S", "p"), ConfigError);
}

TEST(PerGroupValues, EverySchedulesListsAreChecked) {
  const std::vector<double> two_groups = {1.0, 1.0};
  auto expect_names = [&](const SchedulerSpec& spec, const std::string& param) {
    try {
      LRScheduler scheduler(spec, two_groups);
      FAIL() << "no throw for " << param;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(param), std::string::npos) << e.what();
    }
  };
  WarmupLROptions w = warmup(0, 1, 4, WarmupType::kLog);
  w.warmup_min_lr = {0.0, 0.1, 0.2};
  expect_names(w, "warmup_min_lr");
  WarmupDecayLROptions d;
  d.total_num_steps = 10;
  d.warmup.warmup_max_lr = {1, 2, 3};
  expect_names(d, "warmup_max_lr");
  for (const char* param : {"cycle_min_lr", "cycle_max_lr", "cycle_min_mom", "cycle_max_mom"}) {
    OneCycleOptions o = one_cycle_golden();
    std::vector<double> three = {0.1, 0.2, 0.3};
    if (std::string(param) == "cycle_min_lr") o.cycle_min_lr = three;
    if (std::string(param) == "cycle_max_lr") o.cycle_max_lr = three;
    if (std::string(param) == "cycle_min_mom") o.cycle_min_mom = three;
    if (std::string(param) == "cycle_max_mom") o.cycle_max_mom = three;
    expect_names(o, param);
  }
  LRRangeTestOptions r;
  r.lr_range_test_min_lr = {1e-3, 1e-3, 1e-3};
  expect_names(r, "lr_range_test_min_lr");
  OneCycleOptions missing;  // cycle_min_lr / cycle_max_lr are required
  expect_names(missing, "cycle_min_lr");
}

TEST(WarmupDecayLR, BoundarySteps) {
  WarmupDecayLROptions o;
  o.warmup = warmup(0.0, 2.0, 4, WarmupType::kLog);
  o.total_num_steps = 12;
  EXPECT_EQ(warmup_decay_lr(o, 1, -1)[0], 0.0);
  EXPECT_EQ(warmup_decay_lr(o, 1, 0)[0], 0.0);
  EXPECT_TRUE(near_rel(warmup_decay_lr(o, 1, 3)[0], 2.0 * std::log(4.0) / std::log(4.0)));
  EXPECT_EQ(warmup_decay_lr(o, 1, 4)[0], 2.0);         // end of warmup: (12-4)/8
  EXPECT_EQ(warmup_decay_lr(o, 1, 8)[0], 1.0);         // halfway: (12-8)/8
  EXPECT_EQ(warmup_decay_lr(o, 1, 11)[0], 2.0 / 8.0);  // last step
  EXPECT_EQ(warmup_decay_lr(o, 1, 12)[0], 0.0);        // T
  EXPECT_EQ(warmup_decay_lr(o, 1, 500)[0], 0.0);       // past the end: clamped at 0
}

TEST(WarmupDecayLR, TotalBelowWarmupWarnsAndDecaysOverOneStep) {
  WarmupDecayLROptions o;
  o.warmup = warmup(0.0, 1.0, 6, WarmupType::kLinear);
  o.total_num_steps = 4;
  LogCapture log;
  LRScheduler scheduler(o, {1.0});
  EXPECT_TRUE(log.contains("total_num_steps 4 is less than warmup_num_steps 6"));
  // Past the warmup, γ = max(0, (T - i)/max(1, T - N)) = 0.
  EXPECT_EQ(warmup_decay_lr(o, 1, 6)[0], 0.0);
  EXPECT_EQ(warmup_decay_lr(o, 1, 5)[0], 5.0 / 6.0);
}

TEST(WarmupCosineLR, BoundaryStepsLog) {
  WarmupCosineLROptions o = cosine(20, 5, WarmupType::kLog);
  o.warmup_min_ratio = 0.1;
  const std::vector<double> base = {2.0};
  EXPECT_EQ(warmup_cosine_lr(o, base, 0)[0], 2.0 * 0.1);  // ln 1 = 0 → min ratio
  EXPECT_TRUE(near_rel(warmup_cosine_lr(o, base, 4)[0], 2.0 * (0.1 + 0.9 * 1.0)));
  EXPECT_TRUE(
      near_rel(warmup_cosine_lr(o, base, 2)[0], 2.0 * (0.1 + 0.9 * std::log(3.0) / std::log(5.0))));
  // First decay step i = N: s = 1 of S = 15.
  const double wave = (1 + std::cos(kPi * 1 / 15)) / 2;
  EXPECT_TRUE(near_rel(warmup_cosine_lr(o, base, 5)[0], 2.0 * (1e-4 + (1 - 1e-4) * wave)));
  // i = T - 1 is the bottom of the wave, and the ratio stays there (DeepSpeed 0.19).
  EXPECT_TRUE(near_rel(warmup_cosine_lr(o, base, 19)[0], 2.0 * 1e-4));
  EXPECT_EQ(warmup_cosine_lr(o, base, 22)[0], warmup_cosine_lr(o, base, 20)[0]);
  EXPECT_TRUE(near_rel(warmup_cosine_lr(o, base, 34)[0], 2.0 * 1e-4));
}

// T <= N: no decay window; after the warmup the ratio is cos_min_ratio (older DeepSpeed divided
// by zero when T == N).
TEST(WarmupCosineLR, TotalNotAboveWarmupGoesStraightToTheFloor) {
  expect_curve(golden_trace(cosine(2, 1, WarmupType::kLinear), {1.0}, 4), {0, 0, 0.5, 1e-4, 1e-4});
  EXPECT_EQ(warmup_cosine_ratio(cosine(7, 7, WarmupType::kLog), 8), 1e-4);
  EXPECT_NO_THROW(LRScheduler(cosine(3, 7, WarmupType::kLog), {1.0}));  // T < N only warns
}

TEST(WarmupType, UnknownNamesFollowDeepSpeed) {
  EXPECT_EQ(resolve_warmup_type("log", WarmupTypeReader::kWarmupCosineLR), WarmupType::kLog);
  EXPECT_EQ(resolve_warmup_type("linear", WarmupTypeReader::kWarmupLR), WarmupType::kLinear);
  {
    LogCapture log;
    EXPECT_EQ(resolve_warmup_type("exp", WarmupTypeReader::kWarmupLR), WarmupType::kLog);
    EXPECT_TRUE(
        log.contains("Using unknown warmup_type: exp. The increasing function is set to "
                     "default (log)"));
  }
  {
    LogCapture log;  // DeepSpeed 0.19's WarmupCosineLR falls back to log too
    EXPECT_EQ(resolve_warmup_type("exp", WarmupTypeReader::kWarmupCosineLR), WarmupType::kLog);
    EXPECT_TRUE(log.contains("WarmupCosineLR: Using unknown warmup_type: exp."));
  }
  WarmupLROptions bad = warmup(0, 1, 4, WarmupType::kLog);
  bad.warmup_type = static_cast<WarmupType>(7);
  EXPECT_THROW(LRScheduler(bad, {1.0}), ConfigError);
}

TEST(OneCycle, BoundariesAndDecay) {
  OneCycleOptions o = one_cycle_golden();
  o.cycle_second_step_size = 6;  // asymmetric cycle: T = 10, peak after S1 = 4 batches
  o.decay_mom_rate = 0.1;
  // Peak at i = S1 - 1 (b = 4 = S1), start again at i = T - 1.
  EXPECT_TRUE(near_rel(one_cycle_lr(o, 1, 3)[0], 1.0));
  EXPECT_TRUE(near_rel(one_cycle_lr(o, 1, 6)[0], 0.1 + 0.9 * (1.0 - 3.0 / 6.0)));
  EXPECT_TRUE(near_rel(one_cycle_lr(o, 1, 9)[0], 0.1));
  EXPECT_TRUE(near_rel(one_cycle_betas(o, 1, 3)[0].beta1, 0.8));
  // Decay phase: d = i - T + 1.
  EXPECT_TRUE(near_rel(one_cycle_lr(o, 1, 10)[0], 0.1 / (1 + 0.5 * 1 / 2.0)));
  EXPECT_TRUE(near_rel(one_cycle_lr(o, 1, 109)[0], 0.1 / (1 + 0.5 * 100 / 2.0)));
  EXPECT_TRUE(near_rel(one_cycle_betas(o, 1, 10)[0].beta1, 0.9 * (1 + 0.1 * 1 / 2.0)));
  EXPECT_EQ(one_cycle_betas(o, 1, 10)[0].beta2, 0.99);
  EXPECT_EQ(one_cycle_initial_betas(o, 2), (std::vector<Betas>{{0.8, 0.99}, {0.8, 0.99}}));
  // The formula at i = -1 gives max_mom; construction writes min_mom instead.
  EXPECT_TRUE(near_rel(one_cycle_betas(o, 1, -1)[0].beta1, 0.9));
  // No decay when decay_step_size is 0.
  o.decay_step_size = 0;
  EXPECT_EQ(one_cycle_lr(o, 1, 50)[0], 0.1);
  EXPECT_EQ(one_cycle_betas(o, 1, 50)[0].beta1, 0.9);
}

// DeepSpeed 0.19 uses the stair counts (printed by its OneCycle): 2 stairs up, 3 down.
TEST(OneCycle, StairCounts) {
  OneCycleOptions stairs = one_cycle_golden();
  stairs.cycle_first_stair_count = 2;
  stairs.cycle_second_stair_count = 3;
  expect_curve(golden_trace(stairs, {0.01}, 15),
               {0.1, 0.1, 0.55, 0.55, 1.0, 0.7, 0.4, 0.1, 0.1, 0.08, 0.06666666666666667,
                0.05714285714285715, 0.05, 0.044444444444444446, 0.04, 0.03636363636363637},
               1e-12);
  // The falling half uses the first count when the second is unset.
  stairs.cycle_second_stair_count.reset();
  EXPECT_TRUE(near_rel(one_cycle_lr(stairs, 1, 5)[0], 0.55));  // position 1.5 of 2 → 1/2
}

TEST(OneCycle, MomentumOffOrOptimizerWithoutBetas) {
  OneCycleOptions o = one_cycle_golden();
  o.cycle_momentum = false;
  LRScheduler no_cycling(o, {1.0});
  EXPECT_FALSE(no_cycling.get_momentum().has_value());
  no_cycling.step();
  EXPECT_FALSE(no_cycling.get_momentum().has_value());
  LogCapture log;
  LRScheduler sgd(one_cycle_golden(), {1.0}, /*optimizer_has_betas=*/false);
  EXPECT_TRUE(log.contains("cycle_momentum is disabled"));
  sgd.step();
  EXPECT_FALSE(sgd.get_momentum().has_value());
  EXPECT_TRUE(near_rel(sgd.get_lr()[0], 0.325));
}

TEST(OneCycle, InvalidCycleSizes) {
  OneCycleOptions o = one_cycle_golden();
  o.cycle_first_step_size = 0;
  EXPECT_THROW(LRScheduler(o, {1.0}), ConfigError);
  o.cycle_first_step_size = 4;
  o.cycle_second_step_size = -1;
  EXPECT_THROW(LRScheduler(o, {1.0}), ConfigError);
  o.cycle_second_step_size = 0;  // allowed: the cycle only rises
  EXPECT_NO_THROW(LRScheduler(o, {1.0}));
}

TEST(LRRangeTest, BoundariesAndErrors) {
  LRRangeTestOptions o;  // defaults: min 1e-3, step 2000, rate 1
  EXPECT_EQ(lr_range_test_lr(o, 1, -1)[0], 1e-3);
  EXPECT_TRUE(near_rel(lr_range_test_lr(o, 1, 1999)[0], 2e-3));
  o.lr_range_test_staircase = true;
  EXPECT_EQ(lr_range_test_lr(o, 1, 1998)[0], 1e-3);
  EXPECT_EQ(lr_range_test_lr(o, 1, 1999)[0], 2e-3);
  o.lr_range_test_step_size = 0;
  EXPECT_THROW(LRScheduler(o, {1.0}), ConfigError);
}

TEST(DeepSpeedSchedules, IterationBelowMinusOneIsRejected) {
  EXPECT_THROW(warmup_lr(warmup(0, 1, 4, WarmupType::kLog), 1, -2), Error);
  LRScheduler scheduler(warmup(0, 1, 4, WarmupType::kLog), {1.0});
  EXPECT_THROW(scheduler.step(-2), Error);
}

}  // namespace
}  // namespace zrt::sched
