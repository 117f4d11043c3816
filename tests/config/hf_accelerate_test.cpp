// accelerate's rules on the HF Trainer's path (config/hf_accelerate.h), each found by the config
// differential against accelerate 1.15 (tests/peers/config_differential.py).
#include "config/hf_accelerate.h"

#include <gtest/gtest.h>

#include "config/hf_plan.h"
#include "test_util.h"

namespace zrt::config {
namespace {

using test::config_error;
using test::hf_config;
using test::J;

TEST(AcceleratePlugin, NeedsAZeroSection) {
  auto hf = hf_config(R"({"train_batch_size": 8})");
  EXPECT_EQ(config_error([&] { accelerate_plugin_rules(hf); }),
            "Please specify the ZeRO optimization config in the DeepSpeed config.");
}

TEST(AcceleratePlugin, FillsItsOwnDefaultsOverAuto) {
  auto hf = hf_config(R"({"steps_per_print": 10, "zero_optimization": {"stage": "auto",
      "offload_optimizer": {"device": "auto", "nvme_path": "auto"},
      "offload_param": {"device": "auto"},
      "stage3_gather_16bit_weights_on_model_save": "auto", "overlap_comm": "auto"}})");
  accelerate_plugin_rules(hf);
  const Json& j = hf.json();
  EXPECT_EQ(j["gradient_accumulation_steps"], 1);  // added when missing
  EXPECT_FALSE(j.contains("steps_per_print"));     // accelerate writes inf: never prints
  const Json& z = j["zero_optimization"];
  EXPECT_EQ(z["stage"], 2);  // ACCELERATE_DEEPSPEED_ZERO_STAGE's default, not DeepSpeed's 0
  EXPECT_EQ(z["offload_optimizer"]["device"], "none");
  EXPECT_EQ(z["offload_optimizer"]["nvme_path"], "none");
  EXPECT_EQ(z["offload_param"]["device"], "none");
  EXPECT_EQ(z["stage3_gather_16bit_weights_on_model_save"], false);
  EXPECT_EQ(z["overlap_comm"], "auto");  // not the plugin's: left for prepare (an error there)
  EXPECT_TRUE(hf.config().is_zero2());
}

TEST(AccelerateMixedPrecision, CreatesMissingSections) {
  TrainingArguments fp16;
  fp16.fp16 = true;
  auto a = hf_config(R"({"zero_optimization": {}})");
  accelerate_mixed_precision(a, fp16);
  EXPECT_EQ(a.json()["fp16"], J(R"({"enabled": true, "auto_cast": true})"));
  EXPECT_EQ(a.json()["bf16"], J(R"({"enabled": false})"));
  TrainingArguments bf16;
  bf16.bf16 = true;
  auto b = hf_config(R"({"bf16": {"enabled": "auto"}})");
  accelerate_mixed_precision(b, bf16);
  EXPECT_EQ(b.json()["bf16"]["enabled"], true);
  EXPECT_EQ(b.json()["fp16"], J(R"({"enabled": false})"));
  auto none = hf_config(R"({"fp16": {"enabled": "auto"}})");
  accelerate_mixed_precision(none, TrainingArguments{});
  EXPECT_EQ(none.json()["fp16"]["enabled"], false);
  // "bf16" now exists, so DeepSpeed reads it and not an old "bfloat16" section.
  auto alias = hf_config(R"({"bfloat16": {"enabled": true}})");
  accelerate_mixed_precision(alias, TrainingArguments{});
  EXPECT_EQ(alias.json()["bf16"], J(R"({"enabled": false})"));
}

TEST(AccelerateMixedPrecision, TheOtherTypeEnabledIsAnError) {
  TrainingArguments fp16;
  fp16.fp16 = true;
  auto hf = hf_config(R"({"bf16": {"enabled": true}})");
  EXPECT_EQ(config_error([&] { accelerate_mixed_precision(hf, fp16); }),
            "`--mixed_precision` arg cannot be set to `fp16` when `bf16` is set in the DeepSpeed "
            "config file.");
}

TEST(AcceleratePrepare, FillsItsKwargsAndRefusesOtherAutos) {
  TrainingArguments args;
  AcceleratePrepareInputs in;
  in.world_size = 2;
  in.model.hidden_size = 10;
  // Below ZeRO-3 transformers leaves the stage-3 hidden-size keys; accelerate fills them.
  auto hf = hf_config(R"({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
      "train_batch_size": "auto", "gradient_clipping": "auto",
      "zero_optimization": {"stage": 2, "stage3_prefetch_bucket_size": "auto",
      "stage3_param_persistence_threshold": "auto"}})");
  accelerate_prepare_fill(hf, args, in);
  EXPECT_EQ(hf.json()["train_batch_size"], 16);
  EXPECT_EQ(hf.json()["gradient_clipping"], 1.0);
  EXPECT_EQ(hf.json()["zero_optimization"]["stage3_prefetch_bucket_size"], 90);  // int(0.9*h*h)
  EXPECT_EQ(hf.json()["zero_optimization"]["stage3_param_persistence_threshold"], 100);
  auto other = hf_config(R"({"zero_optimization": {"overlap_comm": "auto",
      "prefetch_bucket_size": "auto"}, "fp16": {"loss_scale": "auto"}})");
  EXPECT_EQ(config_error([&] { accelerate_prepare_fill(other, args, in); }),
            "3 \"auto\" values that nothing fills:\n"
            "zero_optimization.overlap_comm is \"auto\", which nothing fills on the HF-Trainer "
            "path (accelerate: \"`zero_optimization.overlap_comm` not found in kwargs\"); set a "
            "value\n"
            "zero_optimization.prefetch_bucket_size is \"auto\", which nothing fills on the "
            "HF-Trainer path (accelerate: \"`zero_optimization.prefetch_bucket_size` not found "
            "in kwargs\"); set a value\n"
            "fp16.loss_scale is \"auto\", which nothing fills on the HF-Trainer path "
            "(accelerate: \"`fp16.loss_scale` not found in kwargs\"); set a value");
}

// The whole HF path: a zero stage of "auto" is accelerate's 2, --bf16 adds the bf16 section,
// and transformers 5 makes the warmup at least one step.
TEST(AcceleratePrepare, ThroughPrepareTrainerConfig) {
  TrainingArguments args;
  args.bf16 = true;
  args.max_steps = 100;
  TrainerConfigOptions options;
  options.world_size = 2;
  options.model.hidden_size = 16;
  const TrainerConfig tc = prepare_trainer_config(
      args, options, DeepSpeedConfig(J(R"({"train_micro_batch_size_per_gpu": "auto",
        "steps_per_print": 5, "zero_optimization": {"stage": "auto"},
        "optimizer": {"type": "AdamW", "params": {"lr": "auto"}},
        "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": "auto"}}})")));
  EXPECT_EQ(tc.resolved.zero.stage, 2);
  EXPECT_TRUE(tc.resolved.bf16.enabled);
  EXPECT_EQ(tc.resolved.batch.gradient_accumulation_steps, 1);
  EXPECT_FALSE(tc.resolved.steps_per_print.has_value());
  EXPECT_EQ(std::get<sched::WarmupLROptions>(*tc.resolved.scheduler).warmup_num_steps, 1);
  EXPECT_EQ(config_error([&] {
              prepare_trainer_config(args, options,
                                     DeepSpeedConfig(J(R"({"train_batch_size": 8})")));
            }),
            "Please specify the ZeRO optimization config in the DeepSpeed config.");
}

}  // namespace
}  // namespace zrt::config
