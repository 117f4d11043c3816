// ZRT_FAULT_INJECT parsing (the fault campaign's switch): valid plans, and a ConfigError naming
// the bad part for anything else.
#include "runtime/fault_injection.h"

#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "core/error.h"

namespace zrt::runtime {
namespace {

std::string config_error_of(const char* value) {
  ::setenv("ZRT_FAULT_INJECT", value, 1);
  std::string message = "<no ConfigError>";
  try {
    fault_plan_from_env();
  } catch (const ConfigError& e) {
    message = e.what();
  }
  ::unsetenv("ZRT_FAULT_INJECT");
  return message;
}

TEST(FaultInjection, PlansParse) {
  ::unsetenv("ZRT_FAULT_INJECT");
  EXPECT_FALSE(fault_plan_from_env().has_value());
  ::setenv("ZRT_FAULT_INJECT", "kill_in_save:rank=1:op=7", 1);
  auto plan = fault_plan_from_env();
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->kind, FaultPlan::Kind::kKillInSave);
  EXPECT_EQ(plan->rank, 1);
  EXPECT_EQ(plan->at, 7);
  ::setenv("ZRT_FAULT_INJECT", "kill_at_step:rank=0:step=12", 1);
  plan = fault_plan_from_env();
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->kind, FaultPlan::Kind::kKillAtStep);
  EXPECT_EQ(plan->at, 12);
  ::unsetenv("ZRT_FAULT_INJECT");
}

TEST(FaultInjection, BadPlansAreConfigErrors) {
  EXPECT_NE(config_error_of("explode").find("unknown fault 'explode'"), std::string::npos);
  EXPECT_NE(config_error_of("kill_in_save:rank").find("bad field 'rank'"), std::string::npos);
  EXPECT_NE(config_error_of("kill_in_save:color=3").find("unknown field 'color'"),
            std::string::npos);
  EXPECT_NE(config_error_of("kill_in_save:op=seven").find("'op=seven' needs an integer"),
            std::string::npos);
  EXPECT_NE(config_error_of("kill_at_step:step=3x").find("'step=3x' needs an integer"),
            std::string::npos);
}

}  // namespace
}  // namespace zrt::runtime
