// zero_optimization (spec §1.6): defaults, stage-dependent defaults, aliases, deprecated keys,
// the legacy bool form, pydantic integer rules, and features ZeroRT does not implement.
#include <gtest/gtest.h>

#include "config/resolved.h"
#include "test_util.h"

namespace zrt::config {
namespace {

using test::resolve;
using test::resolve_error;

// A valid config around a zero_optimization section.
std::string with_zero(const std::string& zero) {
  return R"({"train_batch_size": 8, "optimizer": {"type": "AdamW"}, "zero_optimization": )" + zero +
         "}";
}

TEST(Zero, CodeDefaults) {
  const zero::ZeroOptions z = resolve(with_zero(R"({"stage": 2})")).zero;
  EXPECT_EQ(z.stage, 2);
  EXPECT_TRUE(z.contiguous_gradients);
  EXPECT_TRUE(z.reduce_scatter);
  EXPECT_EQ(z.reduce_bucket_size, 500000000);
  EXPECT_TRUE(z.use_multi_rank_bucket_allreduce);
  EXPECT_TRUE(z.allgather_partitions);
  EXPECT_EQ(z.allgather_bucket_size, 500000000);
  EXPECT_EQ(z.overlap_comm, std::optional<bool>(false));  // stage < 3
  EXPECT_TRUE(z.load_from_fp32_weights);
  EXPECT_EQ(z.offload_param.device, zero::OffloadDevice::kNone);
  EXPECT_EQ(z.offload_optimizer.device, zero::OffloadDevice::kNone);
  EXPECT_EQ(z.sub_group_size, 1000000000);
  EXPECT_EQ(z.prefetch_bucket_size, 50000000);  // docs say 5e8
  EXPECT_EQ(z.param_persistence_threshold, 100000);
  EXPECT_EQ(z.model_persistence_threshold, INT64_MAX);
  EXPECT_EQ(z.max_live_parameters, 1000000000);
  EXPECT_EQ(z.max_reuse_distance, 1000000000);
  EXPECT_FALSE(z.gather_16bit_weights_on_model_save);
  EXPECT_TRUE(z.ignore_unused_parameters);
  EXPECT_FALSE(z.round_robin_gradients);
}

TEST(Zero, OverlapCommDefaultsToTrueOnlyForStage3) {
  EXPECT_EQ(resolve(with_zero(R"({"stage": 3})")).zero.overlap_comm, std::optional<bool>(true));
  EXPECT_EQ(resolve(with_zero(R"({"stage": 1})")).zero.overlap_comm, std::optional<bool>(false));
  EXPECT_EQ(resolve(with_zero(R"({"stage": 3, "overlap_comm": false})")).zero.overlap_comm,
            std::optional<bool>(false));
}

TEST(Zero, AliasesAndFieldNames) {
  const auto a = resolve(with_zero(R"({"stage": 3, "stage3_prefetch_bucket_size": 1000,
      "stage3_param_persistence_threshold": 10, "stage3_model_persistence_threshold": 20,
      "stage3_max_live_parameters": 30, "stage3_max_reuse_distance": 40,
      "stage3_gather_16bit_weights_on_model_save": true,
      "stage3_module_granularity_threshold": 5, "stage3_use_all_reduce_for_fetch_params": true})"));
  EXPECT_EQ(a.zero.prefetch_bucket_size, 1000);
  EXPECT_EQ(a.zero.param_persistence_threshold, 10);
  EXPECT_EQ(a.zero.model_persistence_threshold, 20);
  EXPECT_EQ(a.zero.max_live_parameters, 30);
  EXPECT_EQ(a.zero.max_reuse_distance, 40);
  EXPECT_TRUE(a.zero.gather_16bit_weights_on_model_save);
  EXPECT_EQ(a.zero_extra.module_granularity_threshold, 5);
  EXPECT_TRUE(a.zero_extra.use_all_reduce_for_fetch_params);
  const auto b = resolve(with_zero(R"({"stage": 3, "prefetch_bucket_size": 7,
      "gather_16bit_weights_on_model_save": true})"));
  EXPECT_EQ(b.zero.prefetch_bucket_size, 7);
  EXPECT_TRUE(b.zero.gather_16bit_weights_on_model_save);
  EXPECT_EQ(resolve_error(with_zero(R"({"stage": 3, "prefetch_bucket_size": 7,
      "stage3_prefetch_bucket_size": 8})")),
            "zero_optimization: \"stage3_prefetch_bucket_size\" and \"prefetch_bucket_size\" are "
            "two names of the same setting; give only one");
}

TEST(Zero, IntegralFloatsAcceptedFractionalRejected) {
  EXPECT_EQ(
      resolve(with_zero(R"({"stage": 2, "reduce_bucket_size": 5e8})")).zero.reduce_bucket_size,
      500000000);
  EXPECT_EQ(resolve(with_zero(R"({"stage": 2.0})")).zero.stage, 2);
  // DeepSpeed #6525: HF used to write 0.9 * h * h as a float.
  EXPECT_EQ(resolve_error(with_zero(R"({"stage": 3, "stage3_prefetch_bucket_size": 943718.4})")),
            "zero_optimization.stage3_prefetch_bucket_size: expected a non-negative integer, got "
            "943718.4 (a number with a fractional part)");
}

TEST(Zero, BadValues) {
  EXPECT_EQ(resolve_error(with_zero(R"({"stage": 2, "reduce_bucket_size": -1})")),
            "zero_optimization.reduce_bucket_size: expected a positive integer, got -1");
  EXPECT_EQ(resolve_error(with_zero(R"({"stage": 4})")),
            "zero_optimization.stage: expected 0, 1, 2 or 3, got 4 (DeepSpeedConfig: Maximum "
            "supported ZeRO stage is 3)");
  EXPECT_EQ(resolve_error(with_zero(R"({"stage": -1})")),
            "zero_optimization.stage: expected 0, 1, 2 or 3, got -1");
  EXPECT_EQ(resolve_error(with_zero(R"({"stage": "2"})")),
            "zero_optimization.stage: expected an integer, got \"2\" (a string)");
  EXPECT_EQ(resolve_error(with_zero(R"({"stage": 2, "overlap_comm": 1})")),
            "zero_optimization.overlap_comm: expected true or false, got 1");
  EXPECT_EQ(resolve_error(with_zero(R"({"stage": 2, "sub_group_size": 1e19})")),
            "zero_optimization.sub_group_size: expected a non-negative integer, got 1e+19 (too "
            "large for a 64-bit integer)");
  EXPECT_EQ(resolve_error(with_zero(R"({"stage": 2, "reduce_bucket_size": 18446744073709551615})")),
            "zero_optimization.reduce_bucket_size: expected a positive integer, got "
            "18446744073709551615 (too large for a 64-bit integer)");
  EXPECT_EQ(resolve_error(with_zero(R"("yes")")),
            "zero_optimization: expected an object (or the legacy true/false), got \"yes\" (a "
            "string)");
}

TEST(Zero, UnknownKeysAreErrorsWithSuggestions) {
  EXPECT_EQ(resolve_error(with_zero(R"({"stage": 2, "reduce_bucket_sise": 1})")),
            "zero_optimization.reduce_bucket_sise: unknown key (did you mean "
            "\"reduce_bucket_size\"?)");
  EXPECT_EQ(resolve_error(with_zero(R"({"stage": 3, "stage3_prefetch_bucket": 1})")),
            "zero_optimization.stage3_prefetch_bucket: unknown key (did you mean "
            "\"stage3_prefetch_bucket_size\"?)");
  EXPECT_EQ(resolve_error(with_zero(R"({"stage": 2, "offload_optimizer": {"devise": "cpu"}})")),
            "zero_optimization.offload_optimizer.devise: unknown key (did you mean \"device\"?)");
  EXPECT_EQ(resolve_error(with_zero(R"({"stage": 2, "completely_different": 1})")),
            "zero_optimization.completely_different: unknown key");
}

TEST(Zero, Offload) {
  const auto rc = resolve(with_zero(R"({"stage": 3,
      "offload_optimizer": {"device": "cpu", "pin_memory": true, "ratio": 0.5, "buffer_count": 8},
      "offload_param": {"device": "cpu", "buffer_size": 1e7, "max_in_cpu": 2e9}})"));
  EXPECT_EQ(rc.zero.offload_optimizer.device, zero::OffloadDevice::kCpu);
  EXPECT_TRUE(rc.zero.offload_optimizer.pin_memory);
  EXPECT_EQ(rc.zero.offload_optimizer.ratio, 0.5);
  EXPECT_EQ(rc.zero.offload_optimizer.buffer_count, 8);
  EXPECT_EQ(rc.zero.offload_param.device, zero::OffloadDevice::kCpu);
  EXPECT_EQ(rc.zero.offload_param.buffer_size, 10000000);
  EXPECT_EQ(rc.zero.offload_param.max_in_cpu, 2000000000);
  EXPECT_EQ(resolve_error(with_zero(R"({"stage": 2, "offload_optimizer": {"device": "cpu",
      "ratio": 0.5}})")),
            "zero_optimization.offload_optimizer.ratio: Partial offloading only supported for "
            "ZeRO Stage 3.");
  // Parameters on NVMe (ZeRO-Infinity, stage 3): DeepSpeed's keys and defaults.
  const auto params = resolve(with_zero(R"({"stage": 3, "offload_param": {"device": "nvme",
      "nvme_path": "/local", "max_in_cpu": 0}})"));
  EXPECT_EQ(params.zero.offload_param.device, zero::OffloadDevice::kNvme);
  EXPECT_EQ(params.zero.offload_param.nvme_path, "/local");
  EXPECT_EQ(params.zero.offload_param.buffer_count, 5);
  EXPECT_EQ(params.zero.offload_param.buffer_size, 100000000);
  EXPECT_EQ(params.zero.offload_param.max_in_cpu, 0);
  // Optimizer states on NVMe (ZeRO-Infinity): DeepSpeed's keys and defaults.
  const auto nvme = resolve(with_zero(R"({"stage": 2, "sub_group_size": 1000,
      "offload_optimizer": {"device": "nvme", "nvme_path": "/local", "pipeline_read": true}})"));
  EXPECT_EQ(nvme.zero.offload_optimizer.device, zero::OffloadDevice::kNvme);
  EXPECT_EQ(nvme.zero.offload_optimizer.nvme_path, "/local");
  EXPECT_EQ(nvme.zero.offload_optimizer.buffer_count, 4);
  EXPECT_TRUE(nvme.zero.offload_optimizer.pipeline_read);
  EXPECT_FALSE(nvme.zero.offload_optimizer.pipeline_write);
  EXPECT_EQ(nvme.zero.sub_group_size, 1000);
  for (const std::string& w : nvme.warnings) {
    EXPECT_EQ(w.find("sub_group_size"), std::string::npos) << w;  // it has an effect here
  }
  // Without nvme_path the config resolves, as DeepSpeed's does; the engine refuses to start
  // (optim/swap_space.h, tests/optim/swap_space_test.cpp).
  EXPECT_TRUE(resolve(with_zero(R"({"stage": 3, "offload_optimizer": {"device": "nvme"}})"))
                  .zero.offload_optimizer.nvme_path.empty());
  EXPECT_EQ(resolve_error(with_zero(R"({"stage": 3, "offload_param": {"device": "gpu"}})")),
            "zero_optimization.offload_param.device: expected \"none\", \"cpu\" or \"nvme\", got "
            "\"gpu\" (a string)");
  // offload_param below stage 3 does nothing: warned and reset.
  const auto s2 = resolve(with_zero(R"({"stage": 2, "offload_param": {"device": "cpu"}})"));
  EXPECT_EQ(s2.zero.offload_param.device, zero::OffloadDevice::kNone);
  ASSERT_EQ(s2.warnings.size(), 1u);
  EXPECT_EQ(s2.warnings[0],
            "zero_optimization.offload_param: only ZeRO stage 3 offloads parameters; ignored at "
            "stage 2");
  // CPU offload at stage 1/2 forces contiguous gradients.
  EXPECT_TRUE(resolve(with_zero(R"({"stage": 2, "contiguous_gradients": false,
      "offload_optimizer": {"device": "cpu"}})"))
                  .zero.contiguous_gradients);
}

TEST(Zero, DeprecatedKeys) {
  const auto rc = resolve(with_zero(R"({"stage": 3, "cpu_offload": true, "cpu_offload_param": true,
      "stage3_gather_fp16_weights_on_model_save": true})"));
  EXPECT_EQ(rc.zero.offload_optimizer.device, zero::OffloadDevice::kCpu);
  EXPECT_EQ(rc.zero.offload_param.device, zero::OffloadDevice::kCpu);
  EXPECT_TRUE(rc.zero.gather_16bit_weights_on_model_save);
  ASSERT_EQ(rc.warnings.size(), 3u);
  EXPECT_EQ(rc.warnings[0],
            "zero_optimization.cpu_offload: Config parameter cpu_offload is deprecated use "
            "offload_optimizer instead");
  EXPECT_EQ(resolve_error(with_zero(R"({"stage": 2, "cpu_offload": true,
      "offload_optimizer": {"device": "cpu"}})")),
            "zero_optimization: Cannot provide deprecated parameter 'cpu_offload' and replacing "
            "parameter 'offload_optimizer' together");
  EXPECT_EQ(
      resolve_error(with_zero(R"({"stage": 3, "stage3_gather_fp16_weights_on_model_save": true,
      "stage3_gather_16bit_weights_on_model_save": true})")),
      "zero_optimization: Cannot provide deprecated parameter "
      "'stage3_gather_fp16_weights_on_model_save' and replacing parameter "
      "'gather_16bit_weights_on_model_save' together");
}

TEST(Zero, LegacyBooleanForm) {
  const auto on = resolve(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW"},
      "zero_optimization": true, "allgather_size": 1000})");
  EXPECT_EQ(on.zero.stage, 1);
  EXPECT_EQ(on.zero.allgather_bucket_size, 1000);
  EXPECT_EQ(on.warnings.size(), 1u);
  const auto off = resolve(R"({"train_batch_size": 8, "zero_optimization": false})");
  EXPECT_EQ(off.zero.stage, 0);
}

// An "auto" under one of a setting's two names is reported as "auto", and does not make the
// other name a duplicate (DeepSpeed would drop it).
TEST(Zero, AutoUnderOneOfTwoNamesIsAnAutoError) {
  EXPECT_EQ(resolve_error(with_zero(R"({"stage": 3, "stage3_param_persistence_threshold": 10,
      "param_persistence_threshold": "auto"})")),
            "zero_optimization.param_persistence_threshold is \"auto\", which nothing fills "
            "(\"auto\" is an HF-Trainer placeholder); set a value");
}

TEST(Zero, ZeroPlusPlusKeys) {
  const auto on = resolve(with_zero(R"({"stage": 3, "zero_hpz_partition_size": 8,
      "zero_quantized_weights": true, "zero_quantized_gradients": true})"));
  EXPECT_EQ(on.zero.zeropp.hpz_partition_size, 8);
  EXPECT_TRUE(on.zero.zeropp.quantized_weights);
  EXPECT_TRUE(on.zero.zeropp.quantized_gradients);
  EXPECT_TRUE(on.warnings.empty());
  EXPECT_EQ(to_json(on)["zero_optimization"]["zero_hpz_partition_size"], 8);
  EXPECT_EQ(to_json(on)["zero_optimization"]["zero_quantized_gradients"], true);
  // 0 means "no hpZ" to DeepSpeed too; the dump keeps the value written, as DeepSpeed's.
  const auto zero_k = resolve(with_zero(R"({"stage": 3, "zero_hpz_partition_size": 0})"));
  EXPECT_FALSE(zero_k.zero.zeropp.hpz());
  EXPECT_EQ(to_json(zero_k)["zero_optimization"]["zero_hpz_partition_size"], 0);
  EXPECT_CONTAINS(resolve_error(with_zero(R"({"stage": 3, "zero_hpz_partition_size": -2})")),
                  "zero_optimization.zero_hpz_partition_size");
  const auto frozen =
      resolve(with_zero(R"({"stage": 3, "zero_quantized_nontrainable_weights": true})"));
  EXPECT_TRUE(frozen.warnings.empty());
  EXPECT_TRUE(frozen.zero.zeropp.quantized_nontrainable_weights);
  EXPECT_CONTAINS(
      resolve_error(with_zero(R"({"stage": 3, "zero_quantized_nontrainable_weights": true,
                                  "offload_param": {"device": "nvme", "nvme_path": "/tmp"}})")),
      "zero_optimization.zero_quantized_nontrainable_weights: int8 frozen partitions");
  const auto stage2 = resolve(with_zero(R"({"stage": 2, "zero_quantized_gradients": true})"));
  ASSERT_EQ(stage2.warnings.size(), 1u);
  EXPECT_CONTAINS(stage2.warnings[0], "ZeRO++ works on ZeRO stage 3; no effect at stage 2");
  EXPECT_CONTAINS(resolve_error(with_zero(R"({"stage": 3, "zero_quantized_weights": 1})")),
                  "zero_optimization.zero_quantized_weights");
}

TEST(Zero, FeaturesZeroRtDoesNotImplement) {
  EXPECT_CONTAINS(resolve_error(with_zero(R"({"stage": 2, "elastic_checkpoint": true})")),
                  "not supported by ZeroRT");
  EXPECT_EQ(resolve_error(with_zero(R"({"stage": 1, "legacy_stage1": true})")),
            "zero_optimization.legacy_stage1: The deprecated version of ZeRO Stage 1 is not "
            "supported in deepspeed >= 0.5.9");
  // DeepSpeed reads legacy_stage1 only when it builds a ZeRO optimizer.
  const auto stage0 = resolve(R"({"train_batch_size": 8,
      "zero_optimization": {"stage": 0, "legacy_stage1": true}})");
  EXPECT_EQ(to_json(stage0)["zero_optimization"]["legacy_stage1"], true);
  // MiCS and LoCo are keys DeepSpeed 0.19 removed: errors whatever the value.
  EXPECT_CONTAINS(resolve_error(with_zero(R"({"stage": 3, "mics_shard_size": -1})")),
                  "zero_optimization.mics_shard_size: MiCS ZeRO-3 sharding has been removed;");
  EXPECT_CONTAINS(
      resolve_error(with_zero(R"({"stage": 3, "zeropp_loco_param": {"err_beta": 0.8}})")),
      "zero_optimization.zeropp_loco_param: LoCo-Zero++ has been removed;");
}

TEST(Zero, StageRules) {
  EXPECT_EQ(resolve_error(with_zero(R"({"stage": 2, "allgather_bucket_size": 3})")),
            "zero_optimization.allgather_bucket_size: allgather_bucket_size must be a multiple of "
            "nccl_start_alignment_factor, 2 (got 3)");
  EXPECT_EQ(resolve_error(R"({"train_batch_size": 8, "zero_optimization": {"stage": 1}})"),
            "optimizer: zero stage 1 requires an optimizer");
  ResolveOptions client;
  client.client_optimizer = true;
  EXPECT_NO_THROW(resolve_config(test::J(R"({"train_batch_size": 8,
      "zero_optimization": {"stage": 1}})"),
                                 client));
  EXPECT_EQ(resolve_error(with_zero(R"({"stage": 2})")), "<no error>");
  EXPECT_EQ(resolve_error(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW"},
      "gradient_predivide_factor": 2.0, "zero_optimization": {"stage": 2}})"),
            "gradient_predivide_factor: gradient_predivide_factor != 1.0 is not yet supported "
            "with ZeRO-2 with reduce scatter enabled");
  EXPECT_EQ(resolve_error(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW"},
      "prescale_gradients": true, "zero_optimization": {"stage": 2}})"),
            "prescale_gradients: pre-scale gradients is not yet supported with ZeRO-2 with "
            "reduce scatter enabled");
  // DeepSpeed 0.19 checks both at stage 2 only.
  EXPECT_NO_THROW(resolve(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW"},
      "prescale_gradients": true, "gradient_predivide_factor": 2.0,
      "zero_optimization": {"stage": 1}})"));
  EXPECT_NO_THROW(resolve(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW"},
      "prescale_gradients": true, "zero_optimization": {"stage": 2, "reduce_scatter": false}})"));
}

TEST(Zero, InferenceModeIsStage3WithoutAnyOptimizer) {
  EXPECT_TRUE(
      resolve(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3}})").inference_mode());
  EXPECT_FALSE(resolve(with_zero(R"({"stage": 3})")).inference_mode());
  ResolveOptions client;
  client.client_optimizer = true;
  EXPECT_FALSE(resolve_config(test::J(R"({"train_batch_size": 8,
      "zero_optimization": {"stage": 3}})"),
                              client)
                   .inference_mode());
}

// sub_group_size bounds nothing in ZeroRT (config/KEYS.md): accepted with a warning saying so,
// and only when given.
TEST(ZeroSection, SubGroupSizeIsAcceptedWithAWarningThatItHasNoEffect) {
  auto warned = [](const ResolvedConfig& rc) {
    for (const auto& w : rc.warnings) {
      if (w.find("zero_optimization.sub_group_size: accepted, no effect") != std::string::npos) {
        return true;
      }
    }
    return false;
  };
  const ResolvedConfig set = resolve(
      R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "sub_group_size": 1e8}})");
  EXPECT_EQ(set.zero.sub_group_size, 100000000);
  EXPECT_TRUE(warned(set));
  EXPECT_FALSE(warned(resolve(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3}})")));
}

// resolve_zero_stage: the stage before the HF-Trainer layer has filled "auto" values, read as
// resolve_config reads it; a bad stage is still an error.
TEST(Zero, StageAloneBeforeAutoValuesAreFilled) {
  EXPECT_EQ(resolve_zero_stage(Json::object()), 0);
  EXPECT_EQ(resolve_zero_stage(Json::parse(R"({"zero_optimization": {"stage": 3,
      "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
      "offload_param": {"device": "auto", "nvme_path": "auto"}}})")),
            3);
  EXPECT_EQ(resolve_zero_stage(Json::parse(R"({"zero_optimization": {"stage": 2}})")), 2);
  EXPECT_THROW(resolve_zero_stage(Json::parse(R"({"zero_optimization": {"stage": "auto"}})")),
               ConfigError);
  EXPECT_THROW(resolve_zero_stage(Json::parse(R"({"zero_optimization": {"stage": 4}})")),
               ConfigError);
  EXPECT_THROW(resolve_zero_stage(Json::parse(R"({"zero_optimization": {"stagee": 3}})")),
               ConfigError);
}

}  // namespace
}  // namespace zrt::config
