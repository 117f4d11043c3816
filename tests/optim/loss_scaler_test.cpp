// LossScaler: the four golden sequences of docs/DEEPSPEED.md §7, the minimum-scale exception, the
// constructor defaults, the log lines, the static scaler and the state dict.
#include "optim/loss_scaler.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/logging.h"

namespace zrt::optim {
namespace {

LossScaleOptions dynamic(double init, int64_t window, int64_t hysteresis, bool consecutive) {
  LossScaleOptions o;
  o.initial_scale = init;
  o.scale_window = window;
  o.hysteresis = hysteresis;
  o.consecutive_hysteresis = consecutive;
  o.min_scale = 1.0;
  return o;
}

using Trace = std::vector<std::pair<double, int64_t>>;

Trace run(LossScaler& scaler, const std::vector<bool>& overflows) {
  Trace trace;
  for (bool overflow : overflows) {
    scaler.update_scale(overflow);
    trace.emplace_back(scaler.cur_scale(), scaler.cur_hysteresis());
  }
  return trace;
}

class LogCapture {
 public:
  LogCapture() {
    set_log_sink([this](LogLevel, const std::string& line) { lines.push_back(line); });
  }
  ~LogCapture() { set_log_sink(nullptr); }
  std::vector<std::string> lines;
};

TEST(LossScaler, GoldenHysteresis) {
  LossScaler scaler(dynamic(65536, 3, 2, false));
  const Trace expected = {{65536, 1}, {65536, 1}, {65536, 1}, {32768, 1}, {16384, 1}, {16384, 1},
                          {16384, 1}, {16384, 1}, {32768, 2}, {32768, 2}, {32768, 2}};
  EXPECT_EQ(run(scaler, {true, false, false, true, true, false, false, false, false, false, false}),
            expected);
  EXPECT_EQ(scaler.cur_iter(), 11);
  EXPECT_EQ(scaler.last_overflow_iter(), 4);
}

TEST(LossScaler, GoldenConsecutiveHysteresis) {
  LossScaler scaler(dynamic(65536, 3, 2, true));
  const Trace expected = {{65536, 1}, {65536, 2}, {65536, 1}, {32768, 1},
                          {32768, 2}, {32768, 2}, {32768, 2}};
  EXPECT_EQ(run(scaler, {true, false, true, true, false, false, false}), expected);
}

TEST(LossScaler, GoldenMinimumScaleRaises) {
  LossScaleOptions o = dynamic(4, 1000, 1, false);
  LossScaler scaler(o);
  scaler.update_scale(true);
  EXPECT_EQ(scaler.cur_scale(), 2);
  scaler.update_scale(true);
  EXPECT_EQ(scaler.cur_scale(), 1);
  try {
    scaler.update_scale(true);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "Current loss scale already at minimum - cannot decrease scale anymore. Exiting "
              "run.");
  }
  EXPECT_STREQ(kMinLossScaleMessage,
               "Current loss scale already at minimum - cannot decrease scale anymore. Exiting "
               "run.");
}

TEST(LossScaler, MinimumScaleWithoutRaiseStaysAtMinimum) {
  LossScaleOptions o = dynamic(4, 1000, 1, false);
  o.raise_error_at_min_scale = false;
  LossScaler scaler(o);
  for (int k = 0; k < 5; ++k) scaler.update_scale(true);
  EXPECT_EQ(scaler.cur_scale(), 1);
  // Halving is floored at min_scale, which need not be a power of two.
  LossScaleOptions odd = dynamic(3, 1000, 1, false);
  LossScaler floored(odd);
  floored.update_scale(true);
  EXPECT_EQ(floored.cur_scale(), 1.5);
  floored.update_scale(true);
  EXPECT_EQ(floored.cur_scale(), 1.0);
  EXPECT_THROW(floored.update_scale(true), Error);
}

TEST(LossScaler, GoldenGrowthWithoutOverflow) {
  LossScaler scaler(dynamic(65536, 4, 2, false));
  std::vector<double> scales;
  for (int k = 0; k < 9; ++k) {
    scaler.update_scale(false);
    scales.push_back(scaler.cur_scale());
  }
  EXPECT_EQ(scales, (std::vector<double>{65536, 65536, 65536, 65536, 131072, 131072, 131072,
                                         131072, 262144}));
}

// The defaults are those of DeepSpeed 0.19.8's fp16 section ({"enabled": true} alone).
TEST(LossScaler, GoldenDefaults) {
  const LossScaler scaler;
  EXPECT_EQ(scaler.cur_scale(), 65536.0);
  EXPECT_EQ(scaler.scale_window(), 1000);
  EXPECT_EQ(scaler.min_scale(), 1.0);
  EXPECT_EQ(scaler.delayed_shift(), 2);
  EXPECT_EQ(scaler.cur_hysteresis(), 2);
  EXPECT_FALSE(scaler.consecutive_hysteresis());
  EXPECT_TRUE(scaler.dynamic());
  EXPECT_EQ(scaler.cur_iter(), 0);
  EXPECT_EQ(scaler.last_overflow_iter(), -1);
}

TEST(LossScaler, WindowIsMeasuredFromTheLastOverflowAndHasNoUpperBound) {
  LossScaler scaler(dynamic(1024, 2, 1, false));
  scaler.update_scale(false);  // iter 0: stable = 0
  scaler.update_scale(false);  // iter 1: stable = 1, not a multiple of 2
  EXPECT_EQ(scaler.cur_scale(), 1024);
  scaler.update_scale(false);  // iter 2: stable = 2, doubles
  EXPECT_EQ(scaler.cur_scale(), 2048);
  scaler.update_scale(true);   // iter 3: overflow → 1024, window restarts from 3
  EXPECT_EQ(scaler.cur_scale(), 1024);
  scaler.update_scale(false);  // iter 4: stable = 0
  scaler.update_scale(false);  // iter 5: stable = 1
  EXPECT_EQ(scaler.cur_scale(), 1024);
  scaler.update_scale(false);  // iter 6: stable = 2, doubles
  EXPECT_EQ(scaler.cur_scale(), 2048);
  LossScaler unbounded(dynamic(4294967296.0, 1, 1, false));
  for (int k = 0; k < 100; ++k) unbounded.update_scale(false);  // the first update never doubles
  EXPECT_EQ(unbounded.cur_scale(), std::ldexp(1.0, 131));
}

TEST(LossScaler, LogsOverflowLinesLikeDeepSpeed) {
  LogCapture log;
  LossScaler scaler(dynamic(65536, 3, 2, false));
  scaler.update_scale(true);
  scaler.update_scale(true);
  ASSERT_EQ(log.lines.size(), 2u);
  EXPECT_NE(log.lines[0].find("[ZeroRT] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: "
                              "65536, but hysteresis is 2. Reducing hysteresis to 1"),
            std::string::npos)
      << log.lines[0];
  EXPECT_NE(log.lines[1].find("[ZeroRT] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: "
                              "65536, reducing to 32768"),
            std::string::npos)
      << log.lines[1];
}

TEST(LossScaler, StaticScalerNeverChanges) {
  LossScaleOptions o;
  o.dynamic = false;
  o.static_scale = 128;
  LossScaler scaler(o);
  for (bool overflow : {true, true, false, true}) scaler.update_scale(overflow);
  EXPECT_EQ(scaler.cur_scale(), 128);
  EXPECT_FALSE(scaler.dynamic());
  EXPECT_EQ(scaler.state_dict().dump(), R"({"cur_scale":128.0,"dynamic":false})");
}

TEST(LossScaler, InvalidOptionsAreConfigErrors) {
  EXPECT_THROW(LossScaler(dynamic(65536, 0, 1, false)), ConfigError);
  EXPECT_THROW(LossScaler(dynamic(65536, 10, 0, false)), ConfigError);
  EXPECT_THROW(LossScaler(dynamic(0, 10, 1, false)), ConfigError);
  LossScaleOptions o;
  o.dynamic = false;
  o.static_scale = -1;
  EXPECT_THROW(LossScaler{o}, ConfigError);
}

TEST(LossScaler, StateDictKeysAndRoundTrip) {
  const std::vector<bool> pattern = {true,  false, false, true,  true, false, false,
                                     false, false, false, false, true, false, false};
  LossScaler reference(dynamic(65536, 3, 2, false));
  const Trace expected = run(reference, pattern);
  for (size_t save_at : {size_t{0}, size_t{1}, size_t{4}, size_t{9}}) {
    SCOPED_TRACE(save_at);
    LossScaler original(dynamic(65536, 3, 2, false));
    run(original, std::vector<bool>(pattern.begin(), pattern.begin() + save_at));
    const Json state = Json::parse(original.state_dict().dump());
    LossScaler resumed(dynamic(2, 100, 5, true));  // other settings: the saved ones win
    resumed.load_state_dict(state);
    const Trace rest = run(resumed, std::vector<bool>(pattern.begin() + save_at, pattern.end()));
    EXPECT_EQ(rest, Trace(expected.begin() + save_at, expected.end()));
  }
  LossScaler scaler(dynamic(65536, 3, 2, false));
  scaler.update_scale(true);
  EXPECT_EQ(scaler.state_dict().dump(),
            R"({"cur_scale":65536.0,"cur_iter":1,"last_overflow_iter":0,"scale_factor":2.0,)"
            R"("scale_window":3,"min_scale":1.0,"delayed_shift":2,"cur_hysteresis":1,)"
            R"("consecutive_hysteresis":false,"raise_error_at_min_scale":true,"dynamic":true})");
}

TEST(LossScaler, LoadSwitchesBetweenStaticAndDynamic) {
  LossScaleOptions static_options;
  static_options.dynamic = false;
  LossScaler scaler(static_options);
  LossScaler dynamic_scaler(dynamic(1024, 3, 2, false));
  scaler.load_state_dict(dynamic_scaler.state_dict());
  EXPECT_TRUE(scaler.dynamic());
  EXPECT_EQ(scaler.cur_scale(), 1024);
  scaler.load_state_dict(Json::parse(R"({"cur_scale": 8, "dynamic": false})"));
  EXPECT_FALSE(scaler.dynamic());
  EXPECT_EQ(scaler.cur_scale(), 8);
}

TEST(LossScaler, LoadValidatesAndLeavesTheScalerUnchangedOnError) {
  LossScaler scaler(dynamic(65536, 3, 2, false));
  scaler.update_scale(true);
  const Json good = scaler.state_dict();
  auto expect_rejected = [&](Json bad) {
    EXPECT_THROW(scaler.load_state_dict(bad), CheckpointError) << bad.dump();
    EXPECT_EQ(scaler.state_dict(), good);
  };
  Json bad = good;
  bad.erase("cur_iter");
  expect_rejected(bad);
  bad = good;
  bad["cur_scale"] = "65536";
  expect_rejected(bad);
  bad = good;
  bad["cur_scale"] = 0;
  expect_rejected(bad);
  bad = good;
  bad["scale_window"] = 0;
  expect_rejected(bad);
  bad = good;
  bad["scale_window"] = 2.5;
  expect_rejected(bad);
  bad = good;
  bad["dynamic"] = 1;
  expect_rejected(bad);
  bad = good;
  bad["cur_hysteresis"] = 3;  // > delayed_shift
  expect_rejected(bad);
  bad = good;
  bad["last_overflow_iter"] = 1;  // not < cur_iter
  expect_rejected(bad);
  expect_rejected(Json::array());
}

}  // namespace
}  // namespace zrt::optim
