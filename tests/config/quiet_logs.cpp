// Keeps the config tests' output readable: the resolver logs its warnings and notes, which the
// tests check through ResolvedConfig instead. Set ZRT_LOG_LEVEL to see them.
#include <cstdlib>

#include <gtest/gtest.h>

#include "core/logging.h"

namespace {

class QuietLogs : public ::testing::Environment {
 public:
  void SetUp() override {
    if (std::getenv("ZRT_LOG_LEVEL") == nullptr) zrt::set_log_level(zrt::LogLevel::kError);
  }
};

const ::testing::Environment* const kQuietLogs = ::testing::AddGlobalTestEnvironment(new QuietLogs);

}  // namespace
