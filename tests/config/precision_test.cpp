// fp16 (with the dynamic-loss-scale defaults trap of spec §1.4), bf16 / bfloat16 and amp.
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

TEST(Fp16, OnlyEnabledGivenUsesScalerConstructorDefaultsUnderZero) {
  const auto rc = resolve(cfg(std::string(kZero2) + R"(, "fp16": {"enabled": true})"));
  EXPECT_TRUE(rc.fp16.enabled);
  EXPECT_FALSE(rc.fp16.dynamic_args_given);
  const optim::LossScaleOptions& ls = rc.fp16.loss_scale;
  EXPECT_TRUE(ls.dynamic);
  EXPECT_EQ(ls.initial_scale, 4294967296.0);  // 2^32, not the documented 2^16
  EXPECT_EQ(ls.scale_window, 1000);
  EXPECT_EQ(ls.hysteresis, 1);  // not the documented 2
  EXPECT_FALSE(ls.consecutive_hysteresis);
  EXPECT_EQ(ls.min_scale, 1.0);
  EXPECT_EQ(rc.model_dtype, DType::kFloat16);
}

TEST(Fp16, OnlyEnabledGivenWithoutZeroStartsAt2To16) {
  const auto rc = resolve(R"({"train_batch_size": 8, "fp16": {"enabled": true}})");
  EXPECT_EQ(rc.fp16.loss_scale.initial_scale, 65536.0);
  EXPECT_EQ(rc.fp16.loss_scale.scale_window, 1000);
}

TEST(Fp16, AnyDynamicKeyBringsTheJsonDefaults) {
  const auto rc =
      resolve(cfg(std::string(kZero2) + R"(, "fp16": {"enabled": true, "min_loss_scale": 0.5})"));
  EXPECT_TRUE(rc.fp16.dynamic_args_given);
  EXPECT_EQ(rc.fp16.loss_scale.initial_scale, 65536.0);
  EXPECT_EQ(rc.fp16.loss_scale.hysteresis, 2);
  EXPECT_EQ(rc.fp16.loss_scale.min_scale, 0.5);
  const auto full = resolve(cfg(std::string(kZero2) + R"(, "fp16": {"enabled": true,
      "initial_scale_power": 12, "loss_scale_window": 500, "hysteresis": 4,
      "consecutive_hysteresis": true, "min_loss_scale": 2})"));
  EXPECT_EQ(full.fp16.loss_scale.initial_scale, 4096.0);
  EXPECT_EQ(full.fp16.loss_scale.scale_window, 500);
  EXPECT_EQ(full.fp16.loss_scale.hysteresis, 4);
  EXPECT_TRUE(full.fp16.loss_scale.consecutive_hysteresis);
  EXPECT_EQ(full.fp16.loss_scale.min_scale, 2.0);
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

TEST(Amp, EnabledIsRejectedWithDeepSpeedsReason) {
  EXPECT_EQ(
      resolve_error(cfg(std::string(kZero2) + R"(, "amp": {"enabled": true, "opt_level": "O1"})")),
      "amp.enabled: Amp and ZeRO are not currently compatible, please use (legacy) fp16 "
      "mode which performs similar to amp opt_mode=O2");
  EXPECT_EQ(resolve_error(R"({"train_batch_size": 8, "amp": {"enabled": true},
                              "fp16": {"enabled": true}})"),
            "amp.enabled: Cannot enable both amp with (legacy) fp16 or bfloat16 mode");
  EXPECT_CONTAINS(resolve_error(R"({"train_batch_size": 8, "amp": {"enabled": true}})"),
                  "NVIDIA apex AMP is not supported by ZeroRT");
  // Disabled amp with apex arguments is fine.
  EXPECT_NO_THROW(
      resolve(R"({"train_batch_size": 8, "amp": {"enabled": false, "opt_level": "O2"}})"));
}

}  // namespace
}  // namespace zrt::config
