// fp16 (DeepSpeed 0.19's defaults), bf16 / bfloat16, and amp (removed by DeepSpeed 0.19).
#include <gtest/gtest.h>

#include "config/resolved.h"
#include "test_util.h"

namespace zrt::config {
namespace {

using test::resolve;
using test::resolve_error;

constexpr const char* kZero2 =
    R"("optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": 2}, "train_batch_size": 8)";

std::string cfg(const std::string& body) { return "{" + body + "}"; }

// DeepSpeed 0.19's fp16 section is a pydantic model: {"enabled": true} alone gives the
// documented defaults (older versions gave ZeRO's scaler 2^32 and no hysteresis).
TEST(Fp16, OnlyEnabledGivenUsesTheDocumentedDefaults) {
  for (const std::string zero :
       {std::string(kZero2) + ", ", std::string(R"("train_batch_size": 8, )")}) {
    const auto rc = resolve(cfg(zero + R"("fp16": {"enabled": true})"));
    EXPECT_TRUE(rc.fp16.enabled);
    const optim::LossScaleOptions& ls = rc.fp16.loss_scale;
    EXPECT_TRUE(ls.dynamic);
    EXPECT_EQ(ls.initial_scale, 65536.0);
    EXPECT_EQ(ls.scale_window, 1000);
    EXPECT_EQ(ls.hysteresis, 2);
    EXPECT_FALSE(ls.consecutive_hysteresis);
    EXPECT_EQ(ls.min_scale, 1.0);
    EXPECT_EQ(rc.model_dtype, DType::kFloat16);
  }
}

TEST(Fp16, EachKeyOverridesItsDefault) {
  const auto full = resolve(cfg(std::string(kZero2) + R"(, "fp16": {"enabled": true,
      "initial_scale_power": 12, "loss_scale_window": 500, "hysteresis": 4,
      "consecutive_hysteresis": true, "min_loss_scale": 2})"));
  EXPECT_EQ(full.fp16.loss_scale.initial_scale, 4096.0);
  EXPECT_EQ(full.fp16.loss_scale.scale_window, 500);
  EXPECT_EQ(full.fp16.loss_scale.hysteresis, 4);
  EXPECT_TRUE(full.fp16.loss_scale.consecutive_hysteresis);
  EXPECT_EQ(full.fp16.loss_scale.min_scale, 2.0);
  const auto one =
      resolve(cfg(std::string(kZero2) + R"(, "fp16": {"enabled": true, "hysteresis": 1})"));
  EXPECT_EQ(one.fp16.loss_scale.initial_scale, 65536.0);
  EXPECT_EQ(one.fp16.loss_scale.hysteresis, 1);
}

// loss_scale_window and min_loss_scale are integers, > 0 only where dynamic scaling uses them.
TEST(Fp16, WindowAndMinScaleAreIntegersCheckedOnlyWhenDynamicScalingIsOn) {
  EXPECT_EQ(resolve_error(
                cfg(std::string(kZero2) + R"(, "fp16": {"enabled": true, "min_loss_scale": 0.5})")),
            "fp16.min_loss_scale: expected an integer, got 0.5 (a number with a fractional part)");
  EXPECT_EQ(resolve_error(cfg(std::string(kZero2) +
                              R"(, "fp16": {"enabled": true, "loss_scale_window": 0})")),
            "fp16.loss_scale_window must be > 0 when dynamic loss scaling "
            "is enabled (loss_scale=0)");
  EXPECT_EQ(resolve_error(
                cfg(std::string(kZero2) + R"(, "fp16": {"enabled": true, "min_loss_scale": 0})")),
            "fp16.min_loss_scale must be > 0 when dynamic loss scaling is "
            "enabled (loss_scale=0)");
  EXPECT_NO_THROW(resolve(
      cfg(std::string(kZero2) + R"(, "fp16": {"enabled": false, "loss_scale_window": 0})")));
  EXPECT_NO_THROW(
      resolve(cfg(std::string(kZero2) +
                  R"(, "fp16": {"enabled": true, "loss_scale": 8, "min_loss_scale": 0})")));
}

TEST(Fp16, StaticLossScale) {
  const auto rc =
      resolve(cfg(std::string(kZero2) + R"(, "fp16": {"enabled": true, "loss_scale": 128})"));
  EXPECT_FALSE(rc.fp16.loss_scale.dynamic);
  EXPECT_EQ(rc.fp16.loss_scale.static_scale, 128.0);
  EXPECT_TRUE(resolve(cfg(std::string(kZero2) + R"(, "fp16": {"enabled": true, "loss_scale": 0})"))
                  .fp16.loss_scale.dynamic);
  EXPECT_EQ(
      resolve_error(cfg(std::string(kZero2) + R"(, "fp16": {"enabled": true, "loss_scale": -1})")),
      "fp16.loss_scale: expected a non-negative number, got -1");
}

TEST(Fp16, EffectiveLossScaleIsStaticOneWithoutFp16) {
  const auto rc = resolve(cfg(std::string(kZero2) + R"(, "bf16": {"enabled": true})"));
  EXPECT_FALSE(rc.effective_loss_scale().dynamic);
  EXPECT_EQ(rc.effective_loss_scale().static_scale, 1.0);
}

TEST(Fp16, BadValuesAndUnknownKeys) {
  EXPECT_EQ(
      resolve_error(cfg(std::string(kZero2) + R"(, "fp16": {"enabled": true, "hysteresis": 0})")),
      "fp16.hysteresis: expected a positive integer, got 0");
  EXPECT_EQ(resolve_error(cfg(std::string(kZero2) + R"(, "fp16": {"enabled": "true"})")),
            "fp16.enabled: expected true or false, got \"true\" (a string)");
  EXPECT_EQ(resolve_error(cfg(std::string(kZero2) +
                              R"(, "fp16": {"enabled": true, "loss_scale_windows": 10})")),
            "fp16.loss_scale_windows: unknown key (did you mean \"loss_scale_window\"?)");
  EXPECT_EQ(resolve_error(cfg(std::string(kZero2) +
                              R"(, "fp16": {"enabled": true, "initial_scale_power": 2000})")),
            "fp16.initial_scale_power: expected an integer in [0, 127], got 2000");
  // 2^1000 does not fit a float: every scaled loss would be inf.
  EXPECT_EQ(resolve_error(cfg(std::string(kZero2) +
                              R"(, "fp16": {"enabled": true, "initial_scale_power": 1000})")),
            "fp16.initial_scale_power: expected an integer in [0, 127], got 1000");
  EXPECT_CONTAINS(resolve_error(cfg(std::string(kZero2) + R"(, "fp16": {"enabled": true,
      "fp16_master_weights_and_grads": true})")),
                  "fp16.fp16_master_weights_and_grads: not supported by ZeroRT");
  EXPECT_EQ(resolve_error(cfg(std::string(kZero2) + R"(, "fp16": true)")),
            "fp16: expected an object, got true");
}

TEST(Bf16, EnabledAndAlias) {
  const auto rc = resolve(
      cfg(std::string(kZero2) + R"(, "bf16": {"enabled": true, "immediate_grad_update": true})"));
  EXPECT_TRUE(rc.bf16.enabled);
  EXPECT_TRUE(rc.bf16.immediate_grad_update);
  EXPECT_EQ(rc.model_dtype, DType::kBFloat16);
  EXPECT_TRUE(
      resolve(cfg(std::string(kZero2) + R"(, "bfloat16": {"enabled": true})")).bf16.enabled);
  const auto both = resolve(
      cfg(std::string(kZero2) + R"(, "bf16": {"enabled": false}, "bfloat16": {"enabled": true})"));
  EXPECT_FALSE(both.bf16.enabled);
  ASSERT_EQ(both.warnings.size(), 1u);
  EXPECT_CONTAINS(both.warnings[0], "bfloat16: ignored");
}

TEST(Precision, Fp16AndBf16BothOn) {
  EXPECT_EQ(resolve_error(cfg(std::string(kZero2) +
                              R"(, "fp16": {"enabled": true}, "bf16": {"enabled": true})")),
            "bfloat16 and fp16 modes cannot be simultaneously enabled");
}

// DeepSpeed 0.19 removed apex AMP: an "amp" section is an error whatever it says.
TEST(Amp, IsAKeyDeepSpeedRemoved) {
  for (const char* amp : {R"({"enabled": true, "opt_level": "O1"})", R"({"enabled": false})"}) {
    EXPECT_EQ(
        resolve_error(cfg(std::string(kZero2) + R"(, "amp": )" + amp)),
        "amp: NVIDIA Apex AMP integration has been removed. Use DeepSpeed 'fp16', 'bf16', "
        "or 'torch_autocast' instead. See https://github.com/deepspeedai/DeepSpeed/issues/8489.");
  }
}

}  // namespace
}  // namespace zrt::config
