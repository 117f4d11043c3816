// The batch triad (spec §1.2): all six derivation cases and every assertion message.
#include "config/batch.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace zrt::config {
namespace {

using test::config_error;
using test::resolve;
using test::resolve_error;

struct TriadCase {
  std::optional<int64_t> tbs, mbs, gas;
  int world;
  int64_t want_tbs, want_mbs, want_gas;
};

TEST(Batch, SixDerivationCases) {
  const TriadCase cases[] = {
      {32, 4, 2, 4, 32, 4, 2},                        // all given
      {32, 4, std::nullopt, 4, 32, 4, 2},             // GAS = (32 // 4) // 4
      {32, std::nullopt, 2, 4, 32, 4, 2},             // MBS = (32 // 4) // 2
      {std::nullopt, 4, 2, 4, 32, 4, 2},              // TBS = 4 * 2 * 4
      {32, std::nullopt, std::nullopt, 4, 32, 8, 1},  // GAS = 1, MBS = 32 // 4
      {std::nullopt, 4, std::nullopt, 4, 16, 4, 1},   // TBS = 4 * 4, GAS = 1
  };
  for (const auto& c : cases) {
    const BatchConfig b = resolve_batch(c.tbs, c.mbs, c.gas, c.world);
    EXPECT_EQ(b.train_batch_size, c.want_tbs);
    EXPECT_EQ(b.train_micro_batch_size_per_gpu, c.want_mbs);
    EXPECT_EQ(b.gradient_accumulation_steps, c.want_gas);
    EXPECT_EQ(b.world_size, c.world);
  }
}

TEST(Batch, NeitherTrainNorMicroGiven) {
  const std::string want =
      "Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided";
  EXPECT_EQ(config_error([] { resolve_batch(std::nullopt, std::nullopt, 4, 1); }), want);
  EXPECT_EQ(config_error([] { resolve_batch(std::nullopt, std::nullopt, std::nullopt, 1); }), want);
  EXPECT_EQ(resolve_error("{}"), want);
}

TEST(Batch, AssertionMessagesInDeepSpeedOrder) {
  EXPECT_EQ(config_error([] { resolve_batch(0, 2, 1, 1); }),
            "Train batch size: 0 has to be greater than 0");
  EXPECT_EQ(config_error([] { resolve_batch(8, -2, 1, 1); }),
            "Micro batch size per gpu: -2 has to be greater than 0");
  EXPECT_EQ(config_error([] { resolve_batch(8, 2, 0, 1); }),
            "Gradient accumulation steps: 0 has to be greater than 0");
  EXPECT_EQ(config_error([] { resolve_batch(8, 2, 3, 1); }),
            "Check batch related parameters. train_batch_size is not equal to "
            "micro_batch_per_gpu * gradient_acc_step * world_size 8 != 2 * 3 * 1");
}

TEST(Batch, FloorDivisionMakesNonDivisibleCombosFail) {
  // The spec's example: TBS=8, MBS=2, W=8 -> GAS = (8 // 2) // 8 = 0.
  EXPECT_EQ(config_error([] { resolve_batch(8, 2, std::nullopt, 8); }),
            "Gradient accumulation steps: 0 has to be greater than 0");
  // TBS=10, MBS=3, W=1 -> GAS = 3, 3 * 3 != 10.
  EXPECT_EQ(config_error([] { resolve_batch(10, 3, std::nullopt, 1); }),
            "Check batch related parameters. train_batch_size is not equal to "
            "micro_batch_per_gpu * gradient_acc_step * world_size 10 != 3 * 3 * 1");
  // TBS only, not divisible by W: MBS = 10 // 4 = 2, 2 * 1 * 4 != 10.
  EXPECT_EQ(config_error([] { resolve_batch(10, std::nullopt, std::nullopt, 4); }),
            "Check batch related parameters. train_batch_size is not equal to "
            "micro_batch_per_gpu * gradient_acc_step * world_size 10 != 2 * 1 * 4");
}

TEST(Batch, ZeroDivisorsReportTheirOwnAssertionNotACrash) {
  EXPECT_EQ(config_error([] { resolve_batch(8, 0, std::nullopt, 1); }),
            "Micro batch size per gpu: 0 has to be greater than 0");
  EXPECT_EQ(config_error([] { resolve_batch(8, std::nullopt, 0, 1); }),
            "Gradient accumulation steps: 0 has to be greater than 0");
}

TEST(Batch, OverflowIsAConfigError) {
  EXPECT_CONTAINS(config_error([] { resolve_batch(std::nullopt, INT64_MAX / 2, 4, 1); }),
                  "overflows a 64-bit integer");
}

TEST(Batch, PythonFloorDivision) {
  EXPECT_EQ(floor_div(7, 2), 3);
  EXPECT_EQ(floor_div(-7, 2), -4);
  EXPECT_EQ(floor_div(7, -2), -4);
  EXPECT_EQ(floor_div(-8, 2), -4);
}

TEST(Batch, ThroughResolveConfigWithWorldSize) {
  const ResolvedConfig rc =
      resolve(R"({"train_batch_size": 64, "gradient_accumulation_steps": 2})", 8);
  EXPECT_EQ(rc.batch.train_micro_batch_size_per_gpu, 4);
  EXPECT_EQ(rc.batch.world_size, 8);
  // Integral floats are integers (pydantic-v2 rule applied everywhere).
  EXPECT_EQ(resolve(R"({"train_micro_batch_size_per_gpu": 4.0})").batch.train_batch_size, 4);
  EXPECT_EQ(resolve_error(R"({"train_micro_batch_size_per_gpu": 2.5})"),
            "train_micro_batch_size_per_gpu: expected an integer, got 2.5 (a number with a "
            "fractional part)");
  EXPECT_EQ(resolve_error(R"({"train_batch_size": "8"})"),
            "train_batch_size: expected an integer, got \"8\" (a string)");
}

}  // namespace
}  // namespace zrt::config
