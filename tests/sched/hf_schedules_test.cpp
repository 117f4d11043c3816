// transformers' schedules: hand-computed multipliers at the boundaries (warmup end, last step,
// past the end), LambdaLR's step-0 evaluation at construction, and the polynomial checks.
#include "sched/hf_schedules.h"

#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "golden.h"
#include "sched/lr_scheduler.h"

namespace zrt::sched {
namespace {

using test::near_rel;

HfScheduleOptions hf(HfScheduleType type, int64_t warmup, int64_t total) {
  HfScheduleOptions o;
  o.type = type;
  o.num_warmup_steps = warmup;
  o.num_training_steps = total;
  return o;
}

double lambda(const HfScheduleOptions& o, int64_t step) { return hf_lr_lambda(o, step, 1e-3); }

TEST(HfLinear, Boundaries) {
  const HfScheduleOptions o = hf(HfScheduleType::kLinear, 2, 10);
  EXPECT_EQ(lambda(o, 0), 0.0);
  EXPECT_EQ(lambda(o, 1), 0.5);
  EXPECT_EQ(lambda(o, 2), 1.0);  // end of warmup: (10-2)/8
  EXPECT_EQ(lambda(o, 6), 0.5);
  EXPECT_EQ(lambda(o, 9), 0.125);  // last step
  EXPECT_EQ(lambda(o, 10), 0.0);
  EXPECT_EQ(lambda(o, 11), 0.0);  // past the end: clamped
  // Without warmup, step 0 already runs at the full lr.
  EXPECT_EQ(lambda(hf(HfScheduleType::kLinear, 0, 4), 0), 1.0);
  EXPECT_EQ(lambda(hf(HfScheduleType::kLinear, 0, 4), 3), 0.25);
}

TEST(HfCosine, BoundariesAndRiseAfterTheEnd) {
  const HfScheduleOptions o = hf(HfScheduleType::kCosine, 2, 10);  // num_cycles 0.5
  EXPECT_EQ(lambda(o, 0), 0.0);
  EXPECT_EQ(lambda(o, 1), 0.5);
  EXPECT_EQ(lambda(o, 2), 1.0);
  EXPECT_TRUE(near_rel(lambda(o, 6), 0.5));  // progress 0.5: cos(π/2)
  EXPECT_TRUE(near_rel(lambda(o, 8), 0.5 * (1 + std::cos(3.14159265358979323846 * 0.75))));
  EXPECT_TRUE(std::abs(lambda(o, 10)) < 1e-15);  // progress 1: cos(π) = -1
  EXPECT_TRUE(near_rel(lambda(o, 14), 0.5));     // progress 1.5: rises again
}

TEST(HfCosineWithRestarts, RestartsAndZeroAfterTheEnd) {
  HfScheduleOptions o = hf(HfScheduleType::kCosineWithRestarts, 0, 8);
  o.num_cycles = 2;
  EXPECT_EQ(lambda(o, 0), 1.0);
  EXPECT_TRUE(near_rel(lambda(o, 2), 0.5));  // phase 0.5
  EXPECT_EQ(lambda(o, 4), 1.0);              // phase wraps to 0: restart
  EXPECT_TRUE(near_rel(lambda(o, 6), 0.5));
  EXPECT_TRUE(near_rel(lambda(o, 7), 0.5 * (1 + std::cos(3.14159265358979323846 * 0.75))));
  EXPECT_EQ(lambda(o, 8), 0.0);  // progress >= 1
  EXPECT_EQ(lambda(o, 9), 0.0);
}

TEST(HfPolynomial, BoundariesAndLrEnd) {
  HfScheduleOptions o = hf(HfScheduleType::kPolynomial, 2, 10);
  o.lr_end = 1e-4;
  o.power = 2.0;
  const double lr_init = 1e-3;
  EXPECT_EQ(hf_lr_lambda(o, 0, lr_init), 0.0);
  EXPECT_EQ(hf_lr_lambda(o, 1, lr_init), 0.5);
  EXPECT_TRUE(near_rel(hf_lr_lambda(o, 2, lr_init), 1.0));  // end of warmup
  // step 6: remaining 1 - 4/8 = 0.5 → (0.9e-3·0.25 + 1e-4) / 1e-3 = 0.325
  EXPECT_TRUE(near_rel(hf_lr_lambda(o, 6, lr_init), 0.325));
  EXPECT_TRUE(near_rel(hf_lr_lambda(o, 10, lr_init), 0.1));  // T: lr_end / lr_init
  EXPECT_TRUE(near_rel(hf_lr_lambda(o, 11, lr_init), 0.1));  // past T
}

TEST(HfPolynomial, RejectsLrEndAtOrAboveTheInitialLr) {
  HfScheduleOptions o = hf(HfScheduleType::kPolynomial, 0, 10);
  o.lr_end = 0.01;
  try {
    LRScheduler scheduler(o, {0.001});
    FAIL() << "no throw";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "lr_end (0.01) must be smaller than initial lr (0.001)");
  }
  o.lr_end = 0.001;  // equal is rejected too
  EXPECT_THROW(LRScheduler(o, {0.001}), ConfigError);
  o.lr_end = 1e-7;
  o.num_warmup_steps = 10;  // T == W would divide by zero at step T
  EXPECT_THROW(LRScheduler(o, {0.001}), ConfigError);
}

TEST(HfConstant, WithAndWithoutWarmup) {
  const HfScheduleOptions c = hf(HfScheduleType::kConstant, 5, 10);  // warmup ignored
  EXPECT_EQ(lambda(c, 0), 1.0);
  EXPECT_EQ(lambda(c, 100), 1.0);
  const HfScheduleOptions w = hf(HfScheduleType::kConstantWithWarmup, 4, 0);
  EXPECT_EQ(lambda(w, 0), 0.0);
  EXPECT_EQ(lambda(w, 3), 0.75);
  EXPECT_EQ(lambda(w, 4), 1.0);
  EXPECT_EQ(lambda(w, 1000), 1.0);
}

TEST(HfSchedules, LambdaLrEvaluatesStepZeroAtConstruction) {
  LRScheduler scheduler(hf(HfScheduleType::kLinear, 4, 10), {2e-3, 1e-3});
  EXPECT_EQ(scheduler.last_batch_iteration(), 0);
  EXPECT_EQ(scheduler.get_lr(), (std::vector<double>{0.0, 0.0}));
  scheduler.step();
  EXPECT_EQ(scheduler.get_lr(), (std::vector<double>{0.5e-3, 0.25e-3}));
  scheduler.step(4);
  EXPECT_EQ(scheduler.get_lr(), (std::vector<double>{2e-3, 1e-3}));
  EXPECT_EQ(scheduler.get_last_lr(), scheduler.get_lr());
  EXPECT_FALSE(scheduler.get_momentum().has_value());
  EXPECT_THROW(scheduler.step(-1), Error);
}

TEST(HfSchedules, NamesRoundTrip) {
  for (HfScheduleType type : {HfScheduleType::kLinear, HfScheduleType::kCosine,
                              HfScheduleType::kCosineWithRestarts, HfScheduleType::kPolynomial,
                              HfScheduleType::kConstant, HfScheduleType::kConstantWithWarmup}) {
    EXPECT_EQ(parse_hf_schedule_type(hf_schedule_name(type)), type);
    EXPECT_STREQ(schedule_name(hf(type, 0, 10)), hf_schedule_name(type));
  }
  EXPECT_FALSE(parse_hf_schedule_type("inverse_sqrt").has_value());
  EXPECT_STREQ(hf_schedule_name(HfScheduleType::kCosineWithRestarts), "cosine_with_restarts");
}

TEST(HfSchedules, NegativeStepCountsAreConfigErrors) {
  EXPECT_THROW(LRScheduler(hf(HfScheduleType::kLinear, -1, 10), {1.0}), ConfigError);
  EXPECT_THROW(LRScheduler(hf(HfScheduleType::kLinear, 0, -10), {1.0}), ConfigError);
}

}  // namespace
}  // namespace zrt::sched
