// LRScheduler: state dicts (keys, round trip mid-schedule, validation, family mismatch), resume
// construction, explicit step(i), and lr_curve.
#include "sched/lr_scheduler.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "golden.h"

namespace zrt::sched {
namespace {

using test::expect_curve;

std::vector<SchedulerSpec> all_specs() {
  WarmupLROptions warmup;
  warmup.warmup_min_lr = {0.0, 0.01};
  warmup.warmup_max_lr = {1.0};
  warmup.warmup_num_steps = 5;
  WarmupDecayLROptions decay;
  decay.warmup = warmup;
  decay.warmup.warmup_type = WarmupType::kLinear;
  decay.total_num_steps = 12;
  WarmupCosineLROptions cosine;
  cosine.total_num_steps = 12;
  cosine.warmup_num_steps = 4;
  OneCycleOptions one_cycle;
  one_cycle.cycle_min_lr = {0.1};
  one_cycle.cycle_max_lr = {1.0, 2.0};
  one_cycle.cycle_first_step_size = 3;
  one_cycle.cycle_second_step_size = 4;
  one_cycle.decay_lr_rate = 0.5;
  one_cycle.decay_step_size = 2;
  one_cycle.decay_mom_rate = 0.1;
  LRRangeTestOptions range;
  range.lr_range_test_step_size = 3;
  range.lr_range_test_staircase = true;
  HfScheduleOptions linear;
  linear.num_warmup_steps = 3;
  linear.num_training_steps = 12;
  HfScheduleOptions restarts = linear;
  restarts.type = HfScheduleType::kCosineWithRestarts;
  restarts.num_cycles = 2;
  HfScheduleOptions poly = linear;
  poly.type = HfScheduleType::kPolynomial;
  poly.power = 2;
  return {warmup, decay, cosine, one_cycle, range, linear, restarts, poly};
}

const std::vector<double> kBaseLrs = {1e-3, 2e-3};

struct Snapshot {
  std::vector<double> lrs;
  std::optional<std::vector<Betas>> betas;
  int64_t iteration;
  bool operator==(const Snapshot& o) const {
    return lrs == o.lrs && betas == o.betas && iteration == o.iteration;
  }
};

Snapshot snap(const LRScheduler& s) {
  return {s.get_lr(), s.get_momentum(), s.last_batch_iteration()};
}

TEST(LRScheduler, StateRoundTripMidScheduleEqualsUninterrupted) {
  constexpr int kSteps = 20;
  for (const SchedulerSpec& spec : all_specs()) {
    SCOPED_TRACE(schedule_name(spec));
    LRScheduler reference(spec, kBaseLrs);
    std::vector<Snapshot> expected{snap(reference)};
    for (int k = 0; k < kSteps; ++k) {
      reference.step();
      expected.push_back(snap(reference));
    }
    for (int save_at : {0, 1, 3, 4, 7, 13}) {
      SCOPED_TRACE(save_at);
      LRScheduler original(spec, kBaseLrs);
      for (int k = 0; k < save_at; ++k) original.step();
      // Through text, as a checkpoint would carry it.
      const Json state = Json::parse(original.state_dict().dump());
      LRScheduler resumed(spec, kBaseLrs);
      resumed.step();  // some unrelated progress that the load must overwrite
      resumed.load_state_dict(state);
      EXPECT_TRUE(snap(resumed) == expected[save_at]);
      EXPECT_EQ(resumed.get_last_lr(), expected[save_at].lrs);
      for (int k = save_at; k < kSteps; ++k) {
        resumed.step();
        EXPECT_TRUE(snap(resumed) == expected[k + 1]) << "after step " << k + 1;
      }
    }
  }
}

TEST(LRScheduler, DeepSpeedStateDictHasOnlyTheIteration) {
  LRScheduler scheduler(all_specs()[0], kBaseLrs);
  EXPECT_EQ(scheduler.state_dict().dump(), R"({"last_batch_iteration":-1})");
  scheduler.step();
  scheduler.step();
  EXPECT_EQ(scheduler.state_dict().dump(), R"({"last_batch_iteration":1})");
}

TEST(LRScheduler, LambdaLrStateDictKeys) {
  HfScheduleOptions linear;
  linear.num_warmup_steps = 2;
  linear.num_training_steps = 10;
  LRScheduler scheduler(linear, {1.0, 0.5});
  scheduler.step();
  const Json state = scheduler.state_dict();
  std::vector<std::string> keys;
  for (const auto& item : state.items()) keys.push_back(item.key());
  EXPECT_EQ(keys,
            (std::vector<std::string>{"base_lrs", "last_epoch", "_step_count", "verbose",
                                      "_get_lr_called_within_step", "_last_lr", "lr_lambdas"}));
  EXPECT_EQ(state.dump(), R"({"base_lrs":[1.0,0.5],"last_epoch":1,"_step_count":2,"verbose":false,)"
                          R"("_get_lr_called_within_step":false,"_last_lr":[0.5,0.25],)"
                          R"("lr_lambdas":[null,null]})");
}

TEST(LRScheduler, LoadRejectsTheOtherFamily) {
  const std::vector<SchedulerSpec> specs = all_specs();
  LRScheduler ds(specs[0], kBaseLrs);
  LRScheduler hf(specs[5], kBaseLrs);
  try {
    ds.load_state_dict(hf.state_dict());
    FAIL() << "no throw";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("LambdaLR"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("WarmupLR"), std::string::npos) << e.what();
  }
  try {
    hf.load_state_dict(ds.state_dict());
    FAIL() << "no throw";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("DeepSpeed"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("linear"), std::string::npos) << e.what();
  }
}

TEST(LRScheduler, LoadValidatesTypes) {
  const std::vector<SchedulerSpec> specs = all_specs();
  LRScheduler ds(specs[2], kBaseLrs);
  EXPECT_THROW(ds.load_state_dict(Json::parse("[]")), CheckpointError);
  EXPECT_THROW(ds.load_state_dict(Json::parse("{}")), CheckpointError);
  EXPECT_THROW(ds.load_state_dict(Json::parse(R"({"last_batch_iteration": 2.5})")),
               CheckpointError);
  EXPECT_THROW(ds.load_state_dict(Json::parse(R"({"last_batch_iteration": "3"})")),
               CheckpointError);
  EXPECT_THROW(ds.load_state_dict(Json::parse(R"({"last_batch_iteration": -2})")), CheckpointError);
  // A DeepSpeed state of another DeepSpeed schedule loads (one shape for all five).
  ds.load_state_dict(Json::parse(R"({"last_batch_iteration": 5})"));
  EXPECT_EQ(ds.last_batch_iteration(), 5);

  LRScheduler hf(specs[5], kBaseLrs);
  Json good = hf.state_dict();
  Json bad = good;
  bad["base_lrs"] = Json::array({1e-3});  // wrong number of groups
  EXPECT_THROW(hf.load_state_dict(bad), CheckpointError);
  bad = good;
  bad.erase("_last_lr");
  EXPECT_THROW(hf.load_state_dict(bad), CheckpointError);
  bad = good;
  bad["last_epoch"] = "x";
  EXPECT_THROW(hf.load_state_dict(bad), CheckpointError);
  bad = good;
  bad["lr_lambdas"] = Json::array({1, 2});
  EXPECT_THROW(hf.load_state_dict(bad), CheckpointError);
  bad = good;
  bad["_last_lr"] = Json::array({"a", "b"});
  EXPECT_THROW(hf.load_state_dict(bad), CheckpointError);
  // torch >= 2.2 writes verbose as a string and callable objects' dicts in lr_lambdas.
  Json newer = good;
  newer["verbose"] = "deprecated";
  newer["lr_lambdas"] = Json::array({Json::object(), Json::object()});
  newer["_is_initial"] = false;
  EXPECT_NO_THROW(hf.load_state_dict(newer));
}

TEST(LRScheduler, LoadRestoresLambdaLrBaseLrs) {
  HfScheduleOptions constant;
  constant.type = HfScheduleType::kConstant;
  LRScheduler saved(constant, {0.5});
  saved.step();
  LRScheduler resumed(constant, {0.9});  // lr changed in the config: torch ignores it on load
  resumed.load_state_dict(saved.state_dict());
  EXPECT_EQ(resumed.get_lr(), (std::vector<double>{0.5}));
  resumed.step();
  EXPECT_EQ(resumed.get_lr(), (std::vector<double>{0.5}));
  EXPECT_EQ(resumed.state_dict()["_step_count"], 3);
}

TEST(LRScheduler, LoadAtMinusOneRestoresTheConstructionValues) {
  const SchedulerSpec cosine = all_specs()[2];
  LRScheduler scheduler(cosine, {1.0, 3.0});
  for (int k = 0; k < 6; ++k) scheduler.step();
  scheduler.load_state_dict(Json::parse(R"({"last_batch_iteration": -1})"));
  EXPECT_EQ(scheduler.get_lr(), (std::vector<double>{0.0, 0.0}));
  LRScheduler one_cycle(all_specs()[3], kBaseLrs);
  one_cycle.step();
  one_cycle.load_state_dict(Json::parse(R"({"last_batch_iteration": -1})"));
  EXPECT_EQ(*one_cycle.get_momentum(), (std::vector<Betas>{{0.8, 0.99}, {0.8, 0.99}}));
}

TEST(LRScheduler, ConstructedToResumeLeavesTheOptimizerAloneUntilTheFirstStep) {
  WarmupLROptions warmup;
  warmup.warmup_min_lr = {0.0};
  warmup.warmup_max_lr = {1.0};
  warmup.warmup_num_steps = 10;
  warmup.warmup_type = WarmupType::kLinear;
  warmup.last_batch_iteration = 4;
  LRScheduler scheduler(warmup, {0.25});
  EXPECT_EQ(scheduler.last_batch_iteration(), 4);
  EXPECT_EQ(scheduler.get_lr(), (std::vector<double>{0.25}));
  try {
    scheduler.get_last_lr();
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "need to call step() first");
  }
  scheduler.step();
  EXPECT_EQ(scheduler.get_lr(), (std::vector<double>{0.5}));  // i = 5
  EXPECT_EQ(scheduler.get_last_lr(), (std::vector<double>{0.5}));

  OneCycleOptions one_cycle = std::get<OneCycleOptions>(all_specs()[3]);
  one_cycle.last_batch_iteration = 2;
  LRScheduler resumed(one_cycle, kBaseLrs);
  EXPECT_FALSE(resumed.get_momentum().has_value());
  resumed.step();
  EXPECT_TRUE(resumed.get_momentum().has_value());
}

TEST(LRScheduler, ExplicitStepSetsTheIteration) {
  const SchedulerSpec decay = all_specs()[1];
  LRScheduler jumped(decay, kBaseLrs);
  jumped.step(8);
  LRScheduler walked(decay, kBaseLrs);
  for (int k = 0; k < 9; ++k) walked.step();
  EXPECT_EQ(jumped.get_lr(), walked.get_lr());
  EXPECT_EQ(jumped.last_batch_iteration(), 8);
  jumped.step(-1);  // back to the construction values
  EXPECT_EQ(jumped.get_lr(), LRScheduler(decay, kBaseLrs).get_lr());
}

TEST(LRScheduler, NamesAndGroups) {
  const char* names[] = {"WarmupLR",    "WarmupDecayLR", "WarmupCosineLR",       "OneCycle",
                         "LRRangeTest", "linear",        "cosine_with_restarts", "polynomial"};
  const std::vector<SchedulerSpec> specs = all_specs();
  for (size_t k = 0; k < specs.size(); ++k) {
    LRScheduler scheduler(specs[k], kBaseLrs);
    EXPECT_STREQ(scheduler.name(), names[k]);
    EXPECT_EQ(scheduler.num_groups(), 2u);
    EXPECT_EQ(is_deepspeed_schedule(specs[k]), k < 5);
  }
  EXPECT_THROW(LRScheduler(specs[0], {}), ConfigError);
}

TEST(LrCurve, MatchesTheGoldenConvention) {
  WarmupLROptions warmup;
  warmup.warmup_min_lr = {0.0};
  warmup.warmup_max_lr = {1.0};
  warmup.warmup_num_steps = 5;
  warmup.warmup_type = WarmupType::kLinear;
  expect_curve(lr_curve(warmup, {1.0}, 8), {0, 0, 0.2, 0.4, 0.6, 0.8, 1, 1});
  EXPECT_TRUE(lr_curve(warmup, {1.0}, 0).empty());
  EXPECT_THROW(lr_curve(warmup, {1.0}, -1), Error);
}

}  // namespace
}  // namespace zrt::sched
