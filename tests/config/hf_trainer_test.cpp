// The HF-Trainer layer: trainer_config_process / finalize (spec §3.3, §3.4), the
// optimizer/scheduler plan (§3.5) and inference mode (§3.6).
#include "config/hf_trainer.h"

#include <gtest/gtest.h>

#include "config/hf_plan.h"
#include "test_util.h"

namespace zrt::config {
namespace {

using test::config_error;
using test::hf_config;
using test::J;

const char* kAllAuto = R"({
  "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
  "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
  "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                            "weight_decay": "auto"}},
  "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto",
      "warmup_max_lr": "auto", "warmup_num_steps": "auto", "total_num_steps": "auto"}},
  "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"},
  "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto",
      "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto"}})";

TEST(HfTrainer, ProcessFillsAutoFromArguments) {
  TrainingArguments args;
  args.per_device_train_batch_size = 4;
  args.gradient_accumulation_steps = 2;
  args.learning_rate = 3e-4;
  args.adam_beta2 = 0.95;
  args.weight_decay = 0.1;
  args.max_grad_norm = 0.5;
  args.bf16 = true;
  auto hf = hf_config(kAllAuto);
  hf.trainer_config_process(args, 8);
  const Json& j = hf.json();
  EXPECT_EQ(j["train_micro_batch_size_per_gpu"], 4);
  EXPECT_EQ(j["gradient_accumulation_steps"], 2);
  EXPECT_EQ(j["train_batch_size"], 64);  // 8 * 4 * 2
  EXPECT_EQ(j["gradient_clipping"], 0.5);
  EXPECT_EQ(j["optimizer"]["params"]["lr"], 3e-4);
  EXPECT_EQ(j["optimizer"]["params"]["betas"], J("[0.9, 0.95]"));
  EXPECT_EQ(j["optimizer"]["params"]["eps"], 1e-8);
  EXPECT_EQ(j["optimizer"]["params"]["weight_decay"], 0.1);
  EXPECT_EQ(j["scheduler"]["params"]["warmup_min_lr"], 0);
  EXPECT_EQ(j["scheduler"]["params"]["warmup_max_lr"], 3e-4);
  EXPECT_EQ(j["scheduler"]["params"]["total_num_steps"], "auto");  // finalize fills it
  EXPECT_EQ(j["fp16"]["enabled"], false);
  EXPECT_EQ(j["bf16"]["enabled"], true);
  EXPECT_FALSE(j.contains("amp"));  // transformers 5 fills no apex "amp" section
  EXPECT_EQ(hf.dtype(), DType::kBFloat16);
  EXPECT_TRUE(hf.mismatches().empty());
}

TEST(HfTrainer, MismatchLinesPrintValuesLikePython) {
  auto hf = hf_config(R"({"train_micro_batch_size_per_gpu": 16, "gradient_accumulation_steps": 1,
      "train_batch_size": 16, "gradient_clipping": 0.5,
      "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "betas": [0.9, 0.95], "eps": 1e-6,
                                                "weight_decay": 0.1}},
      "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_max_lr": 1e-4,
                                                        "total_num_steps": 500,
                                                        "warmup_num_steps": 10}},
      "fp16": {"enabled": true}, "bf16": {"enabled": false}})");
  const TrainingArguments args;
  hf.trainer_config_process(args, 1);
  EXPECT_EQ(hf.mismatches(),
            (std::vector<std::string>{
                "- ds train_micro_batch_size_per_gpu=16 vs hf per_device_train_batch_size=8",
                "- ds train_batch_size=16 vs hf train_batch_size (calculated)=8",
                "- ds gradient_clipping=0.5 vs hf max_grad_norm=1.0",
                "- ds optimizer.params.lr=0.0001 vs hf learning_rate=5e-05",
                "- ds optimizer.params.betas=[0.9, 0.95] vs hf adam_beta1+adam_beta2=[0.9, 0.999]",
                "- ds optimizer.params.eps=1e-06 vs hf adam_epsilon=1e-08",
                "- ds optimizer.params.weight_decay=0.1 vs hf weight_decay=0.0",
                "- ds scheduler.params.warmup_max_lr=0.0001 vs hf learning_rate=5e-05",
                "- ds fp16.enabled=True vs hf fp16|fp16_full_eval=False",
            }));
  EXPECT_EQ(config_error([&] { hf.trainer_config_finalize(args, {}, 1000); }),
            "Please correct the following DeepSpeed config values that mismatch "
            "TrainingArguments values:\n"
            "- ds train_micro_batch_size_per_gpu=16 vs hf per_device_train_batch_size=8\n"
            "- ds train_batch_size=16 vs hf train_batch_size (calculated)=8\n"
            "- ds gradient_clipping=0.5 vs hf max_grad_norm=1.0\n"
            "- ds optimizer.params.lr=0.0001 vs hf learning_rate=5e-05\n"
            "- ds optimizer.params.betas=[0.9, 0.95] vs hf adam_beta1+adam_beta2=[0.9, 0.999]\n"
            "- ds optimizer.params.eps=1e-06 vs hf adam_epsilon=1e-08\n"
            "- ds optimizer.params.weight_decay=0.1 vs hf weight_decay=0.0\n"
            "- ds scheduler.params.warmup_max_lr=0.0001 vs hf learning_rate=5e-05\n"
            "- ds fp16.enabled=True vs hf fp16|fp16_full_eval=False\n"
            "- ds scheduler.params.total_num_steps=500 vs hf num_training_steps (calculated)=1000\n"
            "- ds scheduler.params.warmup_num_steps=10 vs hf warmup_steps=1\n"
            "The easiest method is to set these DeepSpeed config values to 'auto'.");
}

TEST(HfTrainer, EqualValuesAreNotMismatches) {
  auto hf = hf_config(R"({"train_micro_batch_size_per_gpu": 8.0, "gradient_clipping": 1,
      "optimizer": {"type": "AdamW", "params": {"lr": 5e-5, "weight_decay": 0}},
      "fp16": {"enabled": 0}, "gradient_accumulation_steps": null})");
  hf.trainer_config_process(TrainingArguments{}, 1);
  EXPECT_TRUE(hf.mismatches().empty());
  EXPECT_TRUE(hf.json()["gradient_accumulation_steps"].is_null());  // null is left alone
}

TEST(HfTrainer, AutoFindBatchSizeRelaxesBatchChecks) {
  auto hf = hf_config(R"({"train_micro_batch_size_per_gpu": 16, "train_batch_size": 16})");
  hf.trainer_config_process(TrainingArguments{}, 1, /*auto_find_batch_size=*/true);
  EXPECT_TRUE(hf.mismatches().empty());
}

TEST(HfTrainer, MissingParentsAreNeverCreated) {
  auto hf = hf_config(R"({"train_batch_size": "auto"})");
  hf.trainer_config_process(TrainingArguments{}, 2);
  EXPECT_EQ(hf.json(), J(R"({"train_batch_size": 16})"));
}

TEST(HfTrainer, SaveOnEachNodeUsesNodeLocalStorage) {
  TrainingArguments args;
  args.save_on_each_node = true;
  auto hf = hf_config("{}");
  hf.trainer_config_process(args, 1);
  EXPECT_EQ(hf.json()["checkpoint"]["use_node_local_storage"], true);
  auto kept = hf_config(R"({"checkpoint": {"tag_validation": "FAIL"}})");
  kept.trainer_config_process(args, 1);
  EXPECT_EQ(kept.json()["checkpoint"],
            J(R"({"tag_validation": "FAIL", "use_node_local_storage": true})"));
}

TEST(HfTrainer, DtypeDecision) {
  auto none = hf_config("{}");
  EXPECT_EQ(config_error([&] { none.dtype(); }),
            "<other: trainer_config_process() wasn't called yet to tell dtype>");
  none.trainer_config_process(TrainingArguments{}, 1);
  EXPECT_EQ(none.dtype(), DType::kFloat32);  // transformers 5: fp16 only when enabled
  auto off = hf_config(R"({"fp16": {"enabled": false}})");
  off.trainer_config_process(TrainingArguments{}, 1);
  EXPECT_EQ(off.dtype(), DType::kFloat32);
  auto auto_off = hf_config(R"({"fp16": {"enabled": "auto"}})");
  auto_off.trainer_config_process(TrainingArguments{}, 1);
  EXPECT_EQ(auto_off.dtype(), DType::kFloat32);  // auto filled with False first
  auto bf = hf_config(R"({"bf16": {"enabled": true}})");
  TrainingArguments args;
  args.bf16 = true;
  bf.trainer_config_process(args, 1);
  EXPECT_EQ(bf.dtype(), DType::kBFloat16);
}

// transformers 5: fp16.enabled follows --fp16 / --fp16_full_eval whatever the backend, and no
// "amp" section is filled (DeepSpeed 0.19 removed it); the apex backend itself is refused.
TEST(HfTrainer, Fp16FillIgnoresTheBackendAndAmpIsLeftAlone) {
  TrainingArguments args;
  args.fp16_full_eval = true;
  auto hf = hf_config(R"({"fp16": {"enabled": "auto"}, "amp": {"enabled": "auto"}})");
  hf.trainer_config_process(args, 1);
  EXPECT_EQ(hf.json()["fp16"]["enabled"], true);
  EXPECT_EQ(hf.json()["amp"]["enabled"], "auto");
  EXPECT_EQ(hf.dtype(), DType::kFloat16);
  TrainingArguments apex;
  apex.fp16 = true;
  apex.fp16_backend = "apex";
  EXPECT_THROW(apex.validate(), UsageError);
}

TEST(HfTrainer, FinalizeHiddenSizeKeysAreIntegersUnderZero3) {
  auto hf = hf_config(kAllAuto);
  TrainingArguments args;
  args.warmup_ratio = 0.1;
  hf.trainer_config_process(args, 1);
  ModelDims dims;
  dims.hidden_size = 4096;
  hf.trainer_config_finalize(args, dims, 1000);
  const Json& z = hf.json()["zero_optimization"];
  EXPECT_EQ(z["reduce_bucket_size"], 16777216);
  // int(0.9 * 4096 * 4096) = int(15099494.4) (DeepSpeed #6525: must be an integer).
  EXPECT_TRUE(z["stage3_prefetch_bucket_size"].is_number_integer());
  EXPECT_EQ(z["stage3_prefetch_bucket_size"], 15099494);
  EXPECT_EQ(z["stage3_param_persistence_threshold"], 40960);
  EXPECT_EQ(hf.json()["scheduler"]["params"]["total_num_steps"], 1000);
  EXPECT_EQ(hf.json()["scheduler"]["params"]["warmup_num_steps"], 100);
}

TEST(HfTrainer, FinalizeBelowZero3FillsOnlyReduceBucketSize) {
  auto hf = hf_config(R"({"zero_optimization": {"stage": 2, "reduce_bucket_size": "auto",
      "stage3_prefetch_bucket_size": "auto"}})");
  hf.trainer_config_process(TrainingArguments{}, 1);
  ModelDims dims;
  dims.hidden_sizes = {256, 768, 512};  // the largest is used
  hf.trainer_config_finalize(TrainingArguments{}, dims, 10);
  EXPECT_EQ(hf.json()["zero_optimization"]["reduce_bucket_size"], 589824);
  EXPECT_EQ(hf.json()["zero_optimization"]["stage3_prefetch_bucket_size"], "auto");
}

TEST(HfTrainer, FinalizeWithoutHiddenSize) {
  auto hf = hf_config(kAllAuto);
  hf.trainer_config_process(TrainingArguments{}, 1);
  EXPECT_EQ(config_error([&] { hf.trainer_config_finalize(TrainingArguments{}, {}, 10); }),
            "The model's config file has neither `hidden_size` nor `hidden_sizes` entry, "
            "therefore it's not possible to automatically fill out the following `auto` entries "
            "in the DeepSpeed config file: ['zero_optimization.reduce_bucket_size', "
            "'zero_optimization.stage3_prefetch_bucket_size', "
            "'zero_optimization.stage3_param_persistence_threshold']. You can fix that by "
            "replacing `auto` values for these keys with an integer value of your choice.");
}

TEST(HfTrainer, SecondFinalizeComparesAgainstTheFirstSubstitution) {
  // transformers #29348: eval-before-train finalizes with 0 steps, then training with N.
  auto hf = hf_config(R"({"scheduler": {"type": "WarmupDecayLR",
                          "params": {"total_num_steps": "auto"}}})");
  hf.trainer_config_process(TrainingArguments{}, 1);
  hf.trainer_config_finalize(TrainingArguments{}, {}, 0);
  EXPECT_CONTAINS(config_error([&] { hf.trainer_config_finalize(TrainingArguments{}, {}, 100); }),
                  "- ds scheduler.params.total_num_steps=0 vs hf num_training_steps "
                  "(calculated)=100");
}

TEST(HfPlan, FourCases) {
  const TrainingArguments args;
  auto both = hf_config(R"({"optimizer": {"type": "AdamW"}, "scheduler": {"type": "WarmupLR"}})");
  auto p1 = deepspeed_optim_sched(both, args, 100);
  EXPECT_EQ(p1.which, OptimSchedCase::kConfigOptimizerConfigScheduler);
  EXPECT_FALSE(p1.hf_optimizer || p1.hf_scheduler);
  EXPECT_FALSE(both.json().contains("zero_allow_untested_optimizer"));

  auto opt_only = hf_config(R"({"optimizer": {"type": "AdamW"}})");
  auto p2 = deepspeed_optim_sched(opt_only, args, 100);
  EXPECT_EQ(p2.which, OptimSchedCase::kConfigOptimizerHfScheduler);
  ASSERT_TRUE(p2.hf_scheduler.has_value());
  EXPECT_EQ(p2.hf_scheduler->type, sched::HfScheduleType::kLinear);
  EXPECT_EQ(p2.hf_scheduler->num_training_steps, 100);

  auto sched_only = hf_config(R"({"scheduler": {"type": "WarmupLR"}})");
  auto p3 = deepspeed_optim_sched(sched_only, args, 100);
  EXPECT_EQ(p3.which, OptimSchedCase::kHfOptimizerConfigScheduler);
  ASSERT_TRUE(p3.hf_optimizer.has_value());
  EXPECT_EQ(p3.hf_optimizer->kind, optim::OptimizerKind::kAdamW);
  EXPECT_EQ(p3.hf_optimizer->adam.lr, 5e-5);
  EXPECT_EQ(sched_only.json()["zero_allow_untested_optimizer"], true);

  auto neither = hf_config("{}");
  auto p4 = deepspeed_optim_sched(neither, args, 100);
  EXPECT_EQ(p4.which, OptimSchedCase::kHfOptimizerHfScheduler);
  EXPECT_TRUE(p4.hf_optimizer && p4.hf_scheduler);
  EXPECT_EQ(neither.json()["zero_allow_untested_optimizer"], true);
}

TEST(HfPlan, AdafactorWithConfigOptimizer) {
  TrainingArguments args;
  args.adafactor = true;
  auto hf = hf_config(R"({"optimizer": {"type": "AdamW"}})");
  EXPECT_EQ(config_error([&] { deepspeed_optim_sched(hf, args, 10); }),
            "--adafactor was passed, but also found `optimizer` configured in the DeepSpeed "
            "config. Only one optimizer can be configured.");
  auto without = hf_config("{}");
  args.optim = "adafactor";
  EXPECT_CONTAINS(config_error([&] { deepspeed_optim_sched(without, args, 10); }),
                  "Adafactor is not implemented by ZeroRT");
}

TEST(HfPlan, OffloadWithHfOptimizerIsANote) {
  auto hf = hf_config(R"({"zero_optimization": {"stage": 2,
      "offload_optimizer": {"device": "cpu"}}})");
  auto plan = deepspeed_optim_sched(hf, TrainingArguments{}, 10);
  ASSERT_EQ(plan.notes.size(), 2u);
  EXPECT_EQ(plan.notes[0],
            "Detected ZeRO Offload and non-DeepSpeed optimizers: This combination should work as "
            "long as the custom optimizer has both CPU and GPU implementation (except LAMB)");
}

TEST(HfPlan, HfSchedule) {
  TrainingArguments args;
  args.lr_scheduler_type = "cosine_with_restarts";
  args.warmup_steps = 5;
  args.lr_scheduler_kwargs = J(R"({"num_cycles": 3})");
  auto s = hf_schedule_from_args(args, 50);
  EXPECT_EQ(s.type, sched::HfScheduleType::kCosineWithRestarts);
  EXPECT_EQ(s.num_cycles, 3.0);
  EXPECT_EQ(s.num_warmup_steps, 5);
  EXPECT_EQ(s.num_training_steps, 50);
  args.lr_scheduler_type = "polynomial";
  args.lr_scheduler_kwargs = J(R"({"power": 2.0, "lr_end": 1e-6})");
  s = hf_schedule_from_args(args, 50);
  EXPECT_EQ(s.power, 2.0);
  EXPECT_EQ(s.lr_end, 1e-6);
  args.lr_scheduler_kwargs = J(R"({"num_cycles": 2})");
  EXPECT_EQ(config_error([&] { hf_schedule_from_args(args, 50); }),
            "lr_scheduler_kwargs.num_cycles: unknown key");
  args.lr_scheduler_type = "inverse_sqrt";
  EXPECT_CONTAINS(config_error([&] { hf_schedule_from_args(args, 50); }),
                  "--lr_scheduler_type inverse_sqrt: not implemented by ZeroRT");
}

TEST(HfInference, OnlyZero3AndTheLrSchedulerQuirk) {
  auto z2 = hf_config(R"({"zero_optimization": {"stage": 2}})");
  EXPECT_EQ(config_error([&] { prepare_inference(z2); }),
            "ZeRO inference only makes sense with ZeRO Stage 3 - please adjust your config");
  auto z3 = hf_config(R"({"zero_optimization": {"stage": 3}, "optimizer": {"type": "AdamW"},
      "scheduler": {"type": "WarmupLR"}, "lr_scheduler": {"x": 1}})");
  prepare_inference(z3);
  EXPECT_FALSE(z3.json().contains("optimizer"));
  EXPECT_FALSE(z3.json().contains("lr_scheduler"));
  EXPECT_TRUE(z3.json().contains("scheduler"));  // survives, as in transformers
}

TEST(HfSetup, PrepareTrainerConfigEndToEnd) {
  TrainingArguments args;
  args.per_device_train_batch_size = 2;
  args.gradient_accumulation_steps = 4;
  args.max_steps = 200;
  args.warmup_steps = 20;
  args.bf16 = true;
  TrainerConfigOptions options;
  options.world_size = 4;
  options.model.hidden_size = 1024;
  const TrainerConfig tc = prepare_trainer_config(args, options, DeepSpeedConfig(J(kAllAuto)));
  EXPECT_EQ(tc.resolved.batch.train_batch_size, 32);
  EXPECT_EQ(tc.resolved.model_dtype, DType::kBFloat16);
  EXPECT_EQ(tc.resolved.zero.prefetch_bucket_size, 943718);
  const auto& sched = std::get<sched::WarmupDecayLROptions>(*tc.resolved.scheduler);
  EXPECT_EQ(sched.total_num_steps, 200);  // from max_steps
  EXPECT_EQ(sched.warmup.warmup_num_steps, 20);
  ASSERT_TRUE(tc.plan.has_value());
  EXPECT_EQ(tc.plan->which, OptimSchedCase::kConfigOptimizerConfigScheduler);
  EXPECT_EQ(tc.filled["train_batch_size"], 32);

  TrainerConfigOptions inference = options;
  inference.inference = true;
  const TrainerConfig ti = prepare_trainer_config(args, inference, DeepSpeedConfig(J(kAllAuto)));
  EXPECT_TRUE(ti.resolved.inference_mode());
  EXPECT_FALSE(ti.plan.has_value());

  EXPECT_THROW(prepare_trainer_config(TrainingArguments{}, options), UsageError);  // no config
}

// A mismatch does not hide the config's other errors: all of them in one message.
TEST(HfTrainer, MismatchesAndOtherErrorsAreReportedTogether) {
  TrainingArguments args;
  args.per_device_train_batch_size = 4;
  TrainerConfigOptions options;
  options.world_size = 2;
  const std::string e = config_error([&] {
    prepare_trainer_config(args, options,
                           DeepSpeedConfig(J(R"({"train_micro_batch_size_per_gpu": "four",
                             "zero_optimization": {"stage": 2, "reduce_bucket_size": 0},
                             "bf16": {"enabled": false},
                             "fp16": {"enabled": false, "initial_scale_power": 1000}})")));
  });
  EXPECT_CONTAINS(e, "- ds train_micro_batch_size_per_gpu=four vs hf per_device_train_batch_size=4");
  EXPECT_CONTAINS(e, "The DeepSpeed config also has these problems:");
  EXPECT_CONTAINS(e, "train_micro_batch_size_per_gpu: expected an integer, got \"four\"");
  EXPECT_CONTAINS(e, "zero_optimization.reduce_bucket_size: expected a positive integer, got 0");
  EXPECT_CONTAINS(e, "fp16.initial_scale_power: expected an integer in [0, 127], got 1000");
}

}  // namespace
}  // namespace zrt::config
