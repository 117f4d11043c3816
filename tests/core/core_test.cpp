// Unit tests for core/: error macros and exit codes, logging, partition arithmetic, env readers.
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/env.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/shard.h"
#include "core/tool_main.h"

namespace zrt {
namespace {

TEST(Error, CheckThrowsWithValuesInMessage) {
  const int world = 3;
  try {
    ZRT_CHECK(world == 2, "expected world size 2, got ", world);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "expected world size 2, got 3");
    EXPECT_EQ(e.exit_code(), ExitCode::kInput);
  }
}

TEST(Error, TypedChecksCarryTheirExitCodes) {
  EXPECT_THROW(ZRT_CHECK_AS(ConfigError, false, "x"), ConfigError);
  EXPECT_THROW(ZRT_CHECK_AS(CheckpointError, false, "x"), CheckpointError);
  EXPECT_EQ(CheckpointError("x").exit_code(), ExitCode::kCheckpoint);
  EXPECT_EQ(CommError("x").exit_code(), ExitCode::kComm);
  EXPECT_EQ(UsageError("x").exit_code(), ExitCode::kUsage);
  EXPECT_EQ(ConfigError("x").exit_code(), ExitCode::kInput);
  EXPECT_NO_THROW(ZRT_CHECK(true, "never"));
}

TEST(Error, InternalAssertNamesFileAndCondition) {
  try {
    ZRT_INTERNAL_ASSERT(1 + 1 == 3, "math is broken: ", 42);
    FAIL() << "no throw";
  } catch (const InternalError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("core_test.cpp"), std::string::npos) << msg;
    EXPECT_NE(msg.find("1 + 1 == 3"), std::string::npos) << msg;
    EXPECT_NE(msg.find("math is broken: 42"), std::string::npos) << msg;
    EXPECT_EQ(e.exit_code(), ExitCode::kInternal);
  }
  try {
    ZRT_INTERNAL_ASSERT(false);
    FAIL();
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("expected false"), std::string::npos);
  }
}

TEST(ToolMain, MapsExceptionsToExitCodes) {
  EXPECT_EQ(run_tool("t", [] { return 0; }), 0);
  EXPECT_EQ(run_tool("t", []() -> int { throw UsageError("bad flag"); }), 1);
  EXPECT_EQ(run_tool("t", []() -> int { throw ConfigError("bad key"); }), 2);
  EXPECT_EQ(run_tool("t", []() -> int { throw CheckpointError("bad file"); }), 3);
  EXPECT_EQ(run_tool("t", []() -> int { throw CommError("timeout"); }), 4);
  EXPECT_EQ(run_tool("t", []() -> int { throw std::logic_error("oops"); }), 70);
  EXPECT_EQ(run_tool("t",
                     []() -> int {
                       ZRT_INTERNAL_ASSERT(false);
                       return 0;
                     }),
            70);
}

class LogCapture {
 public:
  LogCapture() {
    set_log_sink([this](LogLevel, const std::string& line) { lines.push_back(line); });
  }
  ~LogCapture() {
    set_log_sink(nullptr);
    set_log_rank(0);
    set_log_level(LogLevel::kInfo);
  }
  std::vector<std::string> lines;
};

TEST(Logging, RankZeroOnlyByDefaultAndPrefixesOtherRanks) {
  LogCapture cap;
  set_log_level(LogLevel::kInfo);
  set_log_rank(0);
  ZRT_LOG_INFO("hello ", 1);
  ZRT_LOG_DEBUG("hidden");
  set_log_rank(3);
  ZRT_LOG_INFO("not printed on rank 3");
  ZRT_LOG_WARN_ALL("from every rank");
  ZRT_LOG_ERROR("boom");
  ASSERT_EQ(cap.lines.size(), 3u);
  EXPECT_EQ(cap.lines[0], "[zrt INFO] hello 1");
  EXPECT_EQ(cap.lines[1], "[zrt WARN][rank 3] from every rank");
  EXPECT_EQ(cap.lines[2], "[zrt ERROR][rank 3] boom");
}

TEST(Logging, LevelThresholdAndParsing) {
  LogCapture cap;
  set_log_level(parse_log_level("WARNING"));
  ZRT_LOG_INFO("dropped");
  ZRT_LOG_WARN("kept");
  set_log_level(LogLevel::kOff);
  ZRT_LOG_ERROR("dropped too");
  ASSERT_EQ(cap.lines.size(), 1u);
  EXPECT_EQ(parse_log_level("debug"), LogLevel::kDebug);
  EXPECT_EQ(parse_log_level("Error"), LogLevel::kError);
  EXPECT_THROW(parse_log_level("loud"), ConfigError);
}

TEST(Shard, RoundingHelpers) {
  EXPECT_EQ(ceil_div(0, 4), 0);
  EXPECT_EQ(ceil_div(7, 4), 2);
  EXPECT_EQ(ceil_div(8, 4), 2);
  EXPECT_EQ(round_up(7, 4), 8);
  EXPECT_EQ(round_up(0, 6), 0);
  EXPECT_EQ(intersect({0, 10}, {5, 10}), (ShardInfo{5, 5}));
  EXPECT_TRUE(intersect({0, 3}, {5, 10}).empty());
}

// DeepSpeed's stage 1/2 rule: pad to 2·W, equal partitions, padding at the end.
TEST(Shard, FlatPartitionMatchesDeepSpeedPadding) {
  // 10 elements over 3 ranks: alignment 6 → padded 12, P = 4.
  FlatPartition p = make_flat_partition(10, 3);
  EXPECT_EQ(p.padded_numel, 12);
  EXPECT_EQ(p.partition_size, 4);
  EXPECT_EQ(p.partition(0), (ShardInfo{0, 4}));
  EXPECT_EQ(p.partition(2), (ShardInfo{8, 4}));
  EXPECT_EQ(p.valid(2), (ShardInfo{8, 2}));
  EXPECT_EQ(p.padding(0), 0);
  EXPECT_EQ(p.padding(1), 0);
  EXPECT_EQ(p.padding(2), 2);
  // Padding spanning whole partitions: 1 element over 4 ranks → padded 8, P = 2.
  FlatPartition q = make_flat_partition(1, 4);
  EXPECT_EQ(q.padded_numel, 8);
  EXPECT_EQ(q.padding(0), 1);
  EXPECT_EQ(q.padding(1), 2);
  EXPECT_EQ(q.padding(3), 2);
  EXPECT_TRUE(q.valid(3).empty());
  // Already aligned: no padding.
  FlatPartition r = make_flat_partition(16, 2);
  EXPECT_EQ(r.padded_numel, 16);
  EXPECT_EQ(r.padding(1), 0);
  // Sum of valid sizes is always numel.
  for (int w = 1; w <= 5; ++w) {
    for (int64_t n : {0, 1, 7, 17, 1023}) {
      FlatPartition f = make_flat_partition(n, w);
      int64_t total = 0;
      for (int rk = 0; rk < w; ++rk) total += f.valid(rk).size;
      EXPECT_EQ(total, n) << "n=" << n << " w=" << w;
      EXPECT_EQ(f.padded_numel % (2 * w), 0);
    }
  }
}

// DeepSpeed's stage 3 rule: pn = ceil(numel/W) per parameter.
TEST(Shard, ParamShardMatchesStage3Rule) {
  EXPECT_EQ(param_partition_size(10, 4), 3);
  EXPECT_EQ(param_shard(10, 0, 4), (ShardInfo{0, 3}));
  EXPECT_EQ(param_shard(10, 3, 4), (ShardInfo{9, 1}));
  EXPECT_EQ(param_shard(2, 3, 4).size, 0);
  EXPECT_EQ(param_partition_size(0, 3), 0);
  EXPECT_EQ(param_shard(0, 1, 3).size, 0);
}

TEST(Env, TypedReadersNameTheVariable) {
  ::setenv("ZRT_TEST_INT", "42", 1);
  ::setenv("ZRT_TEST_BAD", "4x2", 1);
  ::setenv("ZRT_TEST_BOOL", "on", 1);
  ::setenv("ZRT_TEST_EMPTY", "", 1);
  EXPECT_EQ(env::get_int("ZRT_TEST_INT"), 42);
  EXPECT_FALSE(env::get_int("ZRT_TEST_EMPTY").has_value());
  EXPECT_FALSE(env::get_string("ZRT_TEST_UNSET_XYZ").has_value());
  EXPECT_EQ(env::get_bool("ZRT_TEST_BOOL"), true);
  EXPECT_EQ(env::get_double("ZRT_TEST_INT"), 42.0);
  try {
    env::get_int("ZRT_TEST_BAD");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("ZRT_TEST_BAD='4x2'"), std::string::npos);
  }
  EXPECT_THROW(env::get_bool("ZRT_TEST_INT"), ConfigError);
}

}  // namespace
}  // namespace zrt
