// The bundled examples/configs (HF-style configs full of "auto") through the whole HF-Trainer
// path, with the flags a user would pass; plus the round trip of the resolved dump.
#include <string>

#include <gtest/gtest.h>

#include "config/hf_plan.h"
#include "config/load.h"
#include "test_util.h"

namespace zrt::config {
namespace {

std::string example(const std::string& name) {
  return std::string(ZRT_SOURCE_DIR) + "/examples/configs/" + name + ".json";
}

TrainerConfig prepare(const std::string& name, TrainingArguments args, int world_size,
                      std::optional<int64_t> hidden_size = 1024, bool inference = false) {
  args.deepspeed = example(name);
  TrainerConfigOptions options;
  options.world_size = world_size;
  options.num_training_steps = 1000;
  options.model.hidden_size = hidden_size;
  options.inference = inference;
  return prepare_trainer_config(args, options);
}

void expect_round_trip(const TrainerConfig& tc, int world_size) {
  const Json dump = to_json(tc.resolved);
  ResolveOptions options;
  options.world_size = world_size;
  options.client_optimizer = tc.resolved.client_optimizer;
  EXPECT_EQ(to_json(resolve_config(dump, options)), dump);
}

TEST(Examples, Zero0) {
  TrainingArguments args;
  args.warmup_ratio = 0.1;
  const auto tc = prepare("zero0", args, 2);
  EXPECT_EQ(tc.resolved.zero.stage, 0);
  EXPECT_EQ(tc.resolved.batch.train_batch_size, 16);
  EXPECT_EQ(tc.resolved.model_dtype, DType::kFloat32);
  EXPECT_EQ(tc.resolved.gradient_clipping, 1.0);
  EXPECT_EQ(std::get<sched::WarmupLROptions>(*tc.resolved.scheduler).warmup_num_steps, 100);
  expect_round_trip(tc, 2);
}

TEST(Examples, Zero1Bf16) {
  TrainingArguments args;
  args.bf16 = true;
  const auto tc = prepare("zero1", args, 4);
  EXPECT_EQ(tc.resolved.zero.stage, 1);
  EXPECT_EQ(tc.resolved.model_dtype, DType::kBFloat16);
  EXPECT_EQ(std::get<sched::WarmupDecayLROptions>(*tc.resolved.scheduler).total_num_steps, 1000);
  expect_round_trip(tc, 4);
}

TEST(Examples, Zero2Fp16) {
  TrainingArguments args;
  args.fp16 = true;
  args.per_device_train_batch_size = 4;
  args.gradient_accumulation_steps = 8;
  const auto tc = prepare("zero2", args, 8);
  const ResolvedConfig& rc = tc.resolved;
  EXPECT_EQ(rc.zero.stage, 2);
  EXPECT_EQ(rc.batch.train_batch_size, 256);
  EXPECT_EQ(rc.zero.allgather_bucket_size, 200000000);
  EXPECT_EQ(rc.zero.reduce_bucket_size, 1048576);  // hidden_size^2
  EXPECT_TRUE(rc.fp16.enabled);
  EXPECT_EQ(rc.fp16.loss_scale.initial_scale, 65536.0);
  EXPECT_EQ(rc.fp16.loss_scale.hysteresis, 2);
  EXPECT_EQ(rc.optimizer->adam.lr, 5e-5);
  // accelerate silences DeepSpeed's progress line under the Trainer (steps_per_print = inf).
  EXPECT_FALSE(rc.steps_per_print.has_value());
  expect_round_trip(tc, 8);
}

TEST(Examples, Zero2OffloadUsesHfOptimizerAndSchedule) {
  const auto tc = prepare("zero2_offload", TrainingArguments{}, 2);
  EXPECT_EQ(tc.resolved.zero.offload_optimizer.device, zero::OffloadDevice::kCpu);
  EXPECT_TRUE(tc.resolved.zero_allow_untested_optimizer);
  EXPECT_FALSE(tc.resolved.optimizer.has_value());
  EXPECT_TRUE(tc.resolved.client_optimizer);
  ASSERT_TRUE(tc.plan.has_value());
  EXPECT_EQ(tc.plan->which, OptimSchedCase::kHfOptimizerHfScheduler);
  EXPECT_EQ(tc.plan->hf_scheduler->num_training_steps, 1000);
  expect_round_trip(tc, 2);
}

TEST(Examples, Zero3) {
  TrainingArguments args;
  args.warmup_steps = 50;
  const auto tc = prepare("zero3", args, 8, 4096);
  const ResolvedConfig& rc = tc.resolved;
  EXPECT_EQ(rc.zero.stage, 3);
  EXPECT_EQ(rc.zero.reduce_bucket_size, 16777216);
  EXPECT_EQ(rc.zero.prefetch_bucket_size, 15099494);
  EXPECT_EQ(rc.zero.param_persistence_threshold, 40960);
  EXPECT_TRUE(rc.zero.gather_16bit_weights_on_model_save);
  EXPECT_EQ(rc.zero.effective_overlap_comm(), true);
  EXPECT_FALSE(rc.inference_mode());
  expect_round_trip(tc, 8);
}

TEST(Examples, Zero3OffloadCosine) {
  TrainingArguments args;
  args.bf16 = true;
  args.warmup_ratio = 0.05;
  const auto tc = prepare("zero3_offload", args, 16, 2048);
  const ResolvedConfig& rc = tc.resolved;
  EXPECT_EQ(rc.zero.offload_param.device, zero::OffloadDevice::kCpu);
  EXPECT_EQ(rc.zero.offload_optimizer.device, zero::OffloadDevice::kCpu);
  const auto& cosine = std::get<sched::WarmupCosineLROptions>(*rc.scheduler);
  EXPECT_EQ(cosine.total_num_steps, 1000);
  EXPECT_EQ(cosine.warmup_num_steps, 50);
  EXPECT_EQ(cosine.warmup_type, sched::WarmupType::kLinear);
  expect_round_trip(tc, 16);
}

// ZeRO-Infinity's optimizer offload: masters and moments on NVMe, streamed in sub-groups of 4M
// elements with pipelined reads and writes, DeepSpeed's aio section.
TEST(Examples, Zero3Nvme) {
  TrainingArguments args;
  args.bf16 = true;
  const auto tc = prepare("zero3_nvme", args, 2, 2048);
  const ResolvedConfig& rc = tc.resolved;
  EXPECT_EQ(rc.zero.offload_optimizer.device, zero::OffloadDevice::kNvme);
  EXPECT_EQ(rc.zero.offload_optimizer.nvme_path, "/local_nvme");
  EXPECT_EQ(rc.zero.offload_optimizer.buffer_count, 9);
  EXPECT_TRUE(rc.zero.offload_optimizer.pipeline_read);
  EXPECT_TRUE(rc.zero.offload_optimizer.pipeline_write);
  EXPECT_EQ(rc.zero.sub_group_size, 4194304);
  EXPECT_EQ(rc.zero.offload_param.device, zero::OffloadDevice::kNvme);
  EXPECT_EQ(rc.zero.offload_param.nvme_path, "/local_nvme");
  EXPECT_EQ(rc.zero.offload_param.max_in_cpu, 0);
  EXPECT_EQ(rc.aio.queue_depth, 8);
  EXPECT_TRUE(rc.warnings.empty()) << rc.warnings.front();
  expect_round_trip(tc, 2);
}

TEST(Examples, Bf16Zero2NeedsBf16Flag) {
  TrainingArguments args;
  args.bf16 = true;
  const auto tc = prepare("bf16_zero2", args, 2);
  EXPECT_EQ(tc.resolved.model_dtype, DType::kBFloat16);
  EXPECT_EQ(tc.plan->which, OptimSchedCase::kConfigOptimizerHfScheduler);
  EXPECT_CONTAINS(test::config_error([] { prepare("bf16_zero2", TrainingArguments{}, 2); }),
                  "- ds bf16.enabled=True vs hf bf16|bf16_full_eval=False");
}

TEST(Examples, Fp16Zero2AdamIsAdamW) {
  TrainingArguments args;
  args.fp16 = true;
  const auto tc = prepare("fp16_zero2", args, 2);
  EXPECT_EQ(tc.resolved.optimizer->type_name, "Adam");
  EXPECT_EQ(tc.resolved.optimizer->kind, optim::OptimizerKind::kAdamW);
  EXPECT_EQ(tc.resolved.effective_communication_data_type(), DType::kFloat16);
  expect_round_trip(tc, 2);
}

TEST(Examples, Zero3Inference) {
  TrainingArguments args;
  args.bf16 = true;
  const auto tc = prepare("zero3_inference", args, 2, 4096, /*inference=*/true);
  EXPECT_TRUE(tc.resolved.inference_mode());
  EXPECT_EQ(tc.resolved.zero.offload_param.device, zero::OffloadDevice::kCpu);
  expect_round_trip(tc, 2);
}

TEST(Examples, InferenceWithZero2ConfigIsRejected) {
  EXPECT_EQ(test::config_error(
                [] { prepare("zero2", TrainingArguments{}, 1, 1024, /*inference=*/true); }),
            "ZeRO inference only makes sense with ZeRO Stage 3 - please adjust your config");
}

}  // namespace
}  // namespace zrt::config
