// "optimizer" (spec §1.7, §1.10) and "scheduler" (spec §1.8) sections.
#include <gtest/gtest.h>

#include "config/resolved.h"
#include "test_util.h"

namespace zrt::config {
namespace {

using test::resolve;
using test::resolve_error;

std::string with_optimizer(const std::string& optimizer, int stage = 0) {
  return R"({"train_batch_size": 8, "zero_optimization": {"stage": )" + std::to_string(stage) +
         R"(}, "optimizer": )" + optimizer + "}";
}

std::string with_scheduler(const std::string& scheduler) {
  return R"({"train_batch_size": 8, "optimizer": {"type": "AdamW"}, "scheduler": )" + scheduler +
         "}";
}

TEST(Optimizer, AdamMeansAdamWUnlessAdamWModeIsFalse) {
  const auto adam = resolve(with_optimizer(R"({"type": "Adam", "params": {"lr": 0.001,
      "betas": [0.8, 0.99], "eps": 1e-6, "weight_decay": 0.01}})"));
  ASSERT_TRUE(adam.optimizer.has_value());
  EXPECT_EQ(adam.optimizer->kind, optim::OptimizerKind::kAdamW);
  EXPECT_TRUE(adam.optimizer->adam.adam_w_mode);
  EXPECT_EQ(adam.optimizer->type_name, "Adam");
  EXPECT_EQ(adam.optimizer->adam.lr, 0.001);
  EXPECT_EQ(adam.optimizer->adam.beta1, 0.8);
  EXPECT_EQ(adam.optimizer->adam.beta2, 0.99);
  EXPECT_EQ(adam.optimizer->adam.eps, 1e-6);
  EXPECT_EQ(adam.optimizer->adam.weight_decay, 0.01);
  const auto l2 = resolve(with_optimizer(R"({"type": "adam", "params": {"adam_w_mode": false}})"));
  EXPECT_EQ(l2.optimizer->kind, optim::OptimizerKind::kAdam);
  EXPECT_FALSE(l2.optimizer->adam.adam_w_mode);
  // AdamW is AdamW whatever adam_w_mode says.
  const auto adamw =
      resolve(with_optimizer(R"({"type": "ADAMW", "params": {"adam_w_mode": false}})"));
  EXPECT_EQ(adamw.optimizer->kind, optim::OptimizerKind::kAdamW);
}

TEST(Optimizer, AdamDefaults) {
  const auto rc = resolve(with_optimizer(R"({"type": "AdamW"})"));
  const optim::AdamOptions& a = rc.optimizer->adam;
  EXPECT_EQ(a.lr, 1e-3);
  EXPECT_EQ(a.beta1, 0.9);
  EXPECT_EQ(a.beta2, 0.999);
  EXPECT_EQ(a.eps, 1e-8);
  EXPECT_EQ(a.weight_decay, 0.0);
  EXPECT_TRUE(a.bias_correction);
  EXPECT_FALSE(a.torch_adam);
  // torch.optim.AdamW defaults its weight decay to 0.01.
  const auto torch =
      resolve(with_optimizer(R"({"type": "AdamW", "params": {"torch_adam": true}})"));
  EXPECT_EQ(torch.optimizer->adam.weight_decay, 0.01);
}

TEST(Optimizer, Sgd) {
  const auto rc = resolve(with_optimizer(R"({"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9,
      "nesterov": true, "weight_decay": 1e-4}})"));
  EXPECT_EQ(rc.optimizer->kind, optim::OptimizerKind::kSgd);
  EXPECT_EQ(rc.optimizer->sgd.lr, 0.1);
  EXPECT_EQ(rc.optimizer->sgd.momentum, 0.9);
  EXPECT_TRUE(rc.optimizer->sgd.nesterov);
  EXPECT_EQ(rc.optimizer->sgd.weight_decay, 1e-4);
  EXPECT_EQ(resolve_error(with_optimizer(R"({"type": "SGD", "params": {"nesterov": true}})")),
            "optimizer.params.nesterov: Nesterov momentum requires a momentum and zero dampening");
  // Under ZeRO, SGD is an untested optimizer.
  EXPECT_EQ(resolve_error(with_optimizer(R"({"type": "SGD"})", 2)),
            "optimizer.type: You are using an untested ZeRO Optimizer. Please add "
            "<\"zero_allow_untested_optimizer\": true> in the configuration file to use it.");
  const auto allowed = resolve(R"({"train_batch_size": 8, "zero_allow_untested_optimizer": true,
      "zero_optimization": {"stage": 2}, "optimizer": {"type": "SGD"}})");
  ASSERT_EQ(allowed.warnings.size(), 1u);
  EXPECT_EQ(allowed.warnings[0],
            "**** You are using ZeRO with an untested optimizer, proceed with caution *****");
}

TEST(Optimizer, NamesDeepSpeedKnowsButZeroRtDoesNotImplement) {
  EXPECT_EQ(resolve_error(with_optimizer(R"({"type": "Lamb"})")),
            "optimizer.type: \"Lamb\" is a DeepSpeed optimizer that ZeroRT does not implement "
            "(ZeroRT implements Adam, AdamW and SGD)");
  EXPECT_CONTAINS(resolve_error(with_optimizer(R"({"type": "OneBitAdam"})")), "does not implement");
  EXPECT_CONTAINS(resolve_error(with_optimizer(R"({"type": "lion"})")), "does not implement");
  EXPECT_EQ(resolve_error(with_optimizer(R"({"type": "RMSprop"})")),
            "optimizer.type: torch.optim.RMSprop is not implemented by ZeroRT (ZeroRT implements "
            "Adam, AdamW and SGD)");
  EXPECT_EQ(resolve_error(with_optimizer(R"({"type": "sgd"})")),
            "optimizer.type: sgd is not a supported DeepSpeed Optimizer (did you mean \"SGD\"?)");
  EXPECT_EQ(resolve_error(with_optimizer(R"({"type": "AdamWW"})")),
            "optimizer.type: AdamWW is not a supported DeepSpeed Optimizer (did you mean "
            "\"AdamW\"?)");
}

TEST(Optimizer, ParamErrors) {
  EXPECT_EQ(resolve_error(with_optimizer(R"({"type": "AdamW", "params": {"max_grad_norm": 1.0}})")),
            "optimizer.params.max_grad_norm: 'max_grad_norm' is not supported as an optimizer "
            "parameter, please switch to using "
            "the deepspeed parameter 'gradient_clipping' see: "
            "https://www.deepspeed.ai/docs/config-json/#gradient-clipping for more details");
  EXPECT_EQ(resolve_error(with_optimizer(R"({"type": "AdamW", "params": {"betas": [0.9]}})")),
            "optimizer.params.betas: expected a list of two numbers in [0, 1), got [0.9]");
  EXPECT_EQ(resolve_error(with_optimizer(R"({"type": "AdamW", "params": {"lr": -0.1}})")),
            "optimizer.params.lr: expected a non-negative number, got -0.1");
  EXPECT_EQ(resolve_error(with_optimizer(R"({"type": "AdamW", "params": {"learning_rate": 0.1}})")),
            "optimizer.params.learning_rate: unknown key");
  EXPECT_EQ(resolve_error(with_optimizer(R"({"type": "AdamW", "params": {"weight_decy": 0.1}})")),
            "optimizer.params.weight_decy: unknown key (did you mean \"weight_decay\"?)");
  EXPECT_EQ(resolve_error(with_optimizer(R"({"params": {"lr": 0.1}})")),
            "optimizer.type: missing (DeepSpeed would silently build no optimizer from this "
            "section); set \"AdamW\", \"Adam\" or \"SGD\"");
  EXPECT_CONTAINS(resolve_error(with_optimizer(R"({"type": "Adam", "params": {"amsgrad": true}})")),
                  "AMSGrad");
}

// The keyword arguments of the class DeepSpeed 0.19 builds: FusedAdam takes set_grad_none and
// bias_correction; DeepSpeedCPUAdam (ZeRO-Offload, at any stage) has no set_grad_none;
// torch_adam's torch.optim.AdamW has neither.
TEST(Optimizer, KeywordsOfTheClassDeepSpeedBuilds) {
  EXPECT_NO_THROW(resolve(with_optimizer(R"({"type": "AdamW",
      "params": {"set_grad_none": true, "bias_correction": false}})")));
  EXPECT_EQ(resolve_error(R"({"train_batch_size": 8, "zero_optimization": {"stage": 2,
      "offload_optimizer": {"device": "cpu"}}, "optimizer": {"type": "AdamW",
      "params": {"set_grad_none": true, "bias_correction": true}}})"),
            "optimizer.params.set_grad_none: not a parameter of DeepSpeedCPUAdam (the optimizer "
            "DeepSpeed builds with ZeRO-Offload)");
  EXPECT_CONTAINS(resolve_error(R"({"train_batch_size": 8, "zero_optimization": {"stage": 0,
      "offload_optimizer": {"device": "cpu"}}, "optimizer": {"type": "AdamW",
      "params": {"set_grad_none": true}}})"),
                  "not a parameter of DeepSpeedCPUAdam");
  EXPECT_EQ(resolve_error(with_optimizer(R"({"type": "AdamW",
      "params": {"torch_adam": true, "bias_correction": true}})")),
            "optimizer.params.bias_correction: not a parameter of torch.optim.AdamW / "
            "torch.optim.Adam (torch_adam)");
  // The dump leaves bias_correction out for torch_adam, so that it resolves again.
  const auto rc = resolve(with_optimizer(R"({"type": "AdamW", "params": {"torch_adam": true}})"));
  EXPECT_FALSE(to_json(rc)["optimizer"]["params"].contains("bias_correction"));
  EXPECT_NO_THROW(resolve_config(to_json(rc)));
}

TEST(Scheduler, WarmupLR) {
  const auto rc = resolve(with_scheduler(R"({"type": "WarmupLR", "params": {"warmup_min_lr": 0,
      "warmup_max_lr": [0.001, 0.002], "warmup_num_steps": 100, "warmup_type": "linear"}})"));
  ASSERT_TRUE(rc.scheduler.has_value());
  const auto& w = std::get<sched::WarmupLROptions>(*rc.scheduler);
  EXPECT_EQ(w.warmup_min_lr, std::vector<double>{0.0});
  EXPECT_EQ(w.warmup_max_lr, (std::vector<double>{0.001, 0.002}));
  EXPECT_EQ(w.warmup_num_steps, 100);
  EXPECT_EQ(w.warmup_type, sched::WarmupType::kLinear);
  const auto defaults = resolve(with_scheduler(R"({"type": "WarmupLR"})"));
  const auto& d = std::get<sched::WarmupLROptions>(*defaults.scheduler);
  EXPECT_TRUE(d.warmup_max_lr.empty());  // DeepSpeed 0.19: each group's lr
  EXPECT_TRUE(to_json(defaults)["scheduler"]["params"]["warmup_max_lr"].is_null());
  EXPECT_EQ(d.warmup_num_steps, 1000);
  EXPECT_EQ(d.warmup_type, sched::WarmupType::kLog);
  const auto odd =
      resolve(with_scheduler(R"({"type": "WarmupLR", "params": {"warmup_type": "cos"}})"));
  ASSERT_EQ(odd.warnings.size(), 1u);
  EXPECT_CONTAINS(odd.warnings[0], "unknown warmup type \"cos\"");
  EXPECT_EQ(resolve_error(with_scheduler(R"({"type": "WarmupLR", "params": {
      "warmup_num_steps": 0}})")),
            "scheduler.params.warmup_num_steps: expected a positive integer, got 0");
  // WarmupDecayLR keeps its own default of 0.001.
  const auto decay = resolve(with_scheduler(R"({"type": "WarmupDecayLR",
      "params": {"total_num_steps": 10}})"));
  EXPECT_EQ(std::get<sched::WarmupDecayLROptions>(*decay.scheduler).warmup.warmup_max_lr,
            std::vector<double>{0.001});
}

TEST(Scheduler, WarmupDecayAndCosineNeedTotalSteps) {
  const auto decay = resolve(with_scheduler(R"({"type": "WarmupDecayLR", "params": {
      "total_num_steps": 1000, "warmup_num_steps": 10, "warmup_max_lr": 0.01}})"));
  const auto& d = std::get<sched::WarmupDecayLROptions>(*decay.scheduler);
  EXPECT_EQ(d.total_num_steps, 1000);
  EXPECT_EQ(d.warmup.warmup_num_steps, 10);
  EXPECT_EQ(d.warmup.warmup_max_lr, std::vector<double>{0.01});
  EXPECT_EQ(resolve_error(with_scheduler(R"({"type": "WarmupDecayLR", "params": {}})")),
            "scheduler.params.total_num_steps: required by WarmupDecayLR");
  const auto cosine = resolve(with_scheduler(R"({"type": "WarmupCosineLR", "params": {
      "total_num_steps": 100, "warmup_num_steps": 10, "cos_min_ratio": 0.1}})"));
  const auto& c = std::get<sched::WarmupCosineLROptions>(*cosine.scheduler);
  EXPECT_EQ(c.total_num_steps, 100);
  EXPECT_EQ(c.cos_min_ratio, 0.1);
  EXPECT_EQ(c.warmup_min_ratio, 0.0);
  // DeepSpeed 0.19 clamps the cosine: T == N is fine, and an unknown warmup_type falls back to
  // log with a warning (older versions divided by zero and crashed).
  EXPECT_NO_THROW(resolve(with_scheduler(R"({"type": "WarmupCosineLR", "params": {
      "total_num_steps": 10, "warmup_num_steps": 10}})")));
  const auto odd = resolve(with_scheduler(R"({"type": "WarmupCosineLR", "params": {
      "total_num_steps": 100, "warmup_num_steps": 10, "warmup_type": "cos"}})"));
  EXPECT_EQ(std::get<sched::WarmupCosineLROptions>(*odd.scheduler).warmup_type,
            sched::WarmupType::kLog);
  ASSERT_EQ(odd.warnings.size(), 1u);
}

TEST(Scheduler, OneCycleAndRangeTest) {
  const auto one = resolve(with_scheduler(R"({"type": "OneCycle", "params": {"cycle_min_lr": 0.1,
      "cycle_max_lr": 1.0, "cycle_first_step_size": 4, "decay_lr_rate": 0.5,
      "decay_step_size": 2}})"));
  const auto& o = std::get<sched::OneCycleOptions>(*one.scheduler);
  EXPECT_EQ(o.cycle_min_lr, std::vector<double>{0.1});
  EXPECT_EQ(o.cycle_first_step_size, 4.0);
  EXPECT_FALSE(o.cycle_second_step_size.has_value());
  EXPECT_EQ(o.cycle_min_mom, std::vector<double>{0.8});
  EXPECT_EQ(
      resolve_error(with_scheduler(R"({"type": "OneCycle", "params": {"cycle_min_lr": 0.1}})")),
      "scheduler.params.cycle_max_lr: required by OneCycle");
  const auto range = resolve(with_scheduler(R"({"type": "LRRangeTest", "params": {
      "lr_range_test_min_lr": 0.001, "lr_range_test_step_size": 2,
      "lr_range_test_staircase": true}})"));
  const auto& r = std::get<sched::LRRangeTestOptions>(*range.scheduler);
  EXPECT_EQ(r.lr_range_test_step_size, 2.0);
  EXPECT_TRUE(r.lr_range_test_staircase);
  EXPECT_EQ(resolve_error(with_scheduler(R"({"type": "LRRangeTest", "params": {
      "lr_range_test_step_size": 0}})")),
            "scheduler.params.lr_range_test_step_size: expected a positive integer, got 0");
  EXPECT_CONTAINS(resolve_error(with_scheduler(R"({"type": "LRRangeTest", "params": {
      "lr_range_test_step_size": 2.5}})")),
                  "a number with a fractional part");
  // A second half of length 0 is allowed (DeepSpeed 0.19: >= 0).
  EXPECT_NO_THROW(resolve(with_scheduler(R"({"type": "OneCycle", "params": {"cycle_min_lr": 0.1,
      "cycle_max_lr": 1.0, "cycle_second_step_size": 0}})")));
}

TEST(Scheduler, UnknownNames) {
  EXPECT_EQ(resolve_error(with_scheduler(R"({"type": "Warmup"})")),
            "scheduler.type: DeepSpeed does not recognize LR scheduler Warmup (did you mean "
            "\"WarmupLR\"?)");
  EXPECT_EQ(resolve_error(with_scheduler(R"({"type": "StepLR"})")),
            "scheduler.type: torch.optim.lr_scheduler.StepLR is not implemented by ZeroRT (ZeroRT "
            "implements WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle and LRRangeTest)");
  EXPECT_EQ(resolve_error(with_scheduler(R"({"type": "WarmupLR", "params": {"warmup_steps": 5}})")),
            "scheduler.params.warmup_steps: unknown key (did you mean \"warmup_num_steps\"?)");
}

}  // namespace
}  // namespace zrt::config
