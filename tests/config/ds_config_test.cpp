// DeepSpeedConfig: accelerate's HfDeepSpeedConfig semantics (spec §3.1).
#include "config/ds_config.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace zrt::config {
namespace {

using test::config_error;
using test::J;

TEST(DeepSpeedConfig, FindNodeAndGetValue) {
  DeepSpeedConfig c(J(R"({"optimizer": {"params": {"lr": 0.1, "eps": null}}, "x": 1})"));
  auto [parent, key] = c.find_config_node("optimizer.params.lr");
  ASSERT_NE(parent, nullptr);
  EXPECT_EQ(key, "lr");
  EXPECT_EQ((*parent)["lr"], 0.1);
  EXPECT_EQ(c.find_config_node("scheduler.params.lr").first, nullptr);
  EXPECT_EQ(c.get_value("optimizer.params.lr"), 0.1);
  EXPECT_EQ(c.get_value("optimizer.params.beta", 7), 7);
  EXPECT_EQ(c.get_value("scheduler.params.x", "d"), "d");
  EXPECT_TRUE(c.get_value("optimizer.params.eps", 5).is_null());  // present null: None
  EXPECT_EQ(c.get_value("x"), 1);
}

TEST(DeepSpeedConfig, WalkingThroughANonObjectIsAConfigError) {
  DeepSpeedConfig c(J(R"({"optimizer": "adam"})"));
  EXPECT_EQ(config_error([&] { c.get_value("optimizer.params.lr"); }),
            "cannot look up \"optimizer.params.lr\" in the DeepSpeed config: \"optimizer\" is "
            "'adam', not an object");
}

TEST(DeepSpeedConfig, IsTrueIsFalse) {
  DeepSpeedConfig c(J(R"({"a": true, "b": false, "c": "auto", "d": "false", "e": 0, "f": null})"));
  EXPECT_TRUE(c.is_true("a"));
  EXPECT_FALSE(c.is_false("a"));
  EXPECT_TRUE(c.is_false("b"));
  EXPECT_TRUE(c.is_true("c"));  // strings are truthy
  EXPECT_TRUE(c.is_true("d"));
  EXPECT_TRUE(c.is_false("e"));
  EXPECT_FALSE(c.is_true("f"));
  EXPECT_FALSE(c.is_false("f"));
  EXPECT_FALSE(c.is_true("missing"));
  EXPECT_FALSE(c.is_false("missing"));
  EXPECT_FALSE(c.is_false("g.h"));
}

TEST(DeepSpeedConfig, StageAndOffload) {
  EXPECT_TRUE(DeepSpeedConfig(J(R"({"zero_optimization": {"stage": 2}})")).is_zero2());
  EXPECT_TRUE(DeepSpeedConfig(J(R"({"zero_optimization": {"stage": 3.0}})")).is_zero3());
  EXPECT_FALSE(DeepSpeedConfig(J(R"({"zero_optimization": {"stage": "3"}})")).is_zero3());
  EXPECT_FALSE(DeepSpeedConfig(J("{}")).is_zero2());
  EXPECT_TRUE(DeepSpeedConfig(J(R"({"zero_optimization": {"stage": 2,
      "offload_optimizer": {"device": "cpu"}}})"))
                  .is_offload());
  EXPECT_TRUE(DeepSpeedConfig(J(R"({"zero_optimization": {"stage": 3,
      "offload_param": {"device": "nvme"}}})"))
                  .is_offload());
  // Stage-1 offload is not "offload" for accelerate.
  EXPECT_FALSE(DeepSpeedConfig(J(R"({"zero_optimization": {"stage": 1,
      "offload_optimizer": {"device": "cpu"}}})"))
                   .is_offload());
  EXPECT_FALSE(DeepSpeedConfig(J(R"({"zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "none"}}})"))
                   .is_offload());
}

TEST(DeepSpeedConfig, DeleteSubTree) {
  DeepSpeedConfig c(J(R"({"optimizer": {"type": "AdamW"}, "scheduler": {"type": "WarmupLR"}})"));
  c.del_config_sub_tree("optimizer.type");
  EXPECT_EQ(c.json(), J(R"({"optimizer": {}, "scheduler": {"type": "WarmupLR"}})"));
  c.del_config_sub_tree("lr_scheduler");  // missing, not required: nothing happens
  c.del_config_sub_tree("optimizer");
  EXPECT_EQ(c.json(), J(R"({"scheduler": {"type": "WarmupLR"}})"));
  EXPECT_EQ(config_error([&] { c.del_config_sub_tree("optimizer.params", true); }),
            "Can't find optimizer.params entry in the config: {'scheduler': {'type': "
            "'WarmupLR'}}");
}

TEST(DeepSpeedConfig, ConstructorCopies) {
  Json original = J(R"({"a": {"b": 1}})");
  DeepSpeedConfig c(original);
  c.del_config_sub_tree("a.b");
  EXPECT_EQ(original["a"]["b"], 1);
}

}  // namespace
}  // namespace zrt::config
