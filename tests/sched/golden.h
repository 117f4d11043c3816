// Helpers shared by the sched tests: comparing against docs/DEEPSPEED.md §7 golden vectors and
// capturing log lines.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/logging.h"
#include "sched/lr_scheduler.h"

namespace zrt::test {

using sched::LRScheduler;
using sched::SchedulerSpec;


// |actual - expected| <= rel·|expected| (exact zero for expected 0 up to 1e-15).
inline ::testing::AssertionResult near_rel(double actual, double expected, double rel = 1e-7) {
  const double tolerance = expected == 0.0 ? 1e-15 : rel * std::abs(expected);
  if (std::abs(actual - expected) <= tolerance) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "actual " << actual << " vs expected " << expected
                                       << " (tolerance " << tolerance << ")";
}

inline void expect_curve(const std::vector<double>& actual, const std::vector<double>& expected,
                         double rel = 1e-7) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t k = 0; k < expected.size(); ++k) {
    EXPECT_TRUE(near_rel(actual[k], expected[k], rel)) << "at index " << k;
  }
}

// Group 0's lr before any step, then after each of `steps` step() calls (how §7 prints them).
inline std::vector<double> golden_trace(const SchedulerSpec& spec, std::vector<double> base_lrs,
                                        int steps) {
  LRScheduler scheduler(spec, std::move(base_lrs));
  std::vector<double> out{scheduler.get_lr()[0]};
  for (int k = 0; k < steps; ++k) {
    scheduler.step();
    out.push_back(scheduler.get_lr()[0]);
  }
  return out;
}

// Captures log lines for the lifetime of the object.
class LogCapture {
 public:
  LogCapture() {
    set_log_sink([this](LogLevel, const std::string& line) { lines.push_back(line); });
  }
  ~LogCapture() { set_log_sink(nullptr); }
  bool contains(const std::string& text) const {
    for (const std::string& line : lines) {
      if (line.find(text) != std::string::npos) return true;
    }
    return false;
  }
  std::vector<std::string> lines;
};

}  // namespace zrt::test
