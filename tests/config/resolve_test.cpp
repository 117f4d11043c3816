// resolve_config: top-level scalars and their code defaults, dtype derivations, "auto" rules,
// keys DeepSpeed removed, unknown and ignored top-level keys, collecting every problem, and the
// dump.
#include <gtest/gtest.h>

#include "config/keys.h"
#include "config/resolved.h"
#include "test_util.h"

namespace zrt::config {
namespace {

using test::J;
using test::resolve;
using test::resolve_error;

TEST(Resolve, CodeDefaultsNotDocsDefaults) {
  const ResolvedConfig rc = resolve(R"({"train_batch_size": 8})");
  EXPECT_EQ(rc.gradient_clipping, 1.0);          // DeepSpeed 0.19 (it was 0.0 until 0.18)
  EXPECT_FALSE(rc.steps_per_print.has_value());  // docs say 10
  EXPECT_FALSE(rc.wall_clock_breakdown);
  EXPECT_FALSE(rc.memory_breakdown);
  EXPECT_FALSE(rc.dump_state);
  EXPECT_FALSE(rc.prescale_gradients);
  EXPECT_EQ(rc.gradient_predivide_factor, 1.0);
  EXPECT_FALSE(rc.zero_allow_untested_optimizer);
  EXPECT_TRUE(rc.zero_force_ds_cpu_optimizer);
  EXPECT_FALSE(rc.dataloader_drop_last);
  EXPECT_EQ(rc.zero.stage, 0);
  EXPECT_EQ(rc.zero.overlap_comm, std::optional<bool>(false));
  EXPECT_EQ(rc.model_dtype, DType::kFloat32);
  EXPECT_FALSE(rc.optimizer.has_value());
  EXPECT_FALSE(rc.scheduler.has_value());
  EXPECT_EQ(rc.checkpoint.tag_validation, ckpt::TagValidation::kWarn);
  EXPECT_FALSE(rc.tensorboard.enabled);
  EXPECT_EQ(rc.tensorboard.output_path, "");
  EXPECT_EQ(rc.csv_monitor.job_name, "DeepSpeedJobName");
  EXPECT_EQ(rc.comm.timeout_seconds, 600.0);
  EXPECT_FALSE(rc.comm.debug_collectives);
}

TEST(Resolve, TopLevelScalars) {
  const ResolvedConfig rc = resolve(R"({"train_batch_size": 8, "gradient_clipping": 1.0,
      "steps_per_print": 10, "wall_clock_breakdown": true, "memory_breakdown": true,
      "dump_state": true, "prescale_gradients": true, "gradient_predivide_factor": 2,
      "zero_allow_untested_optimizer": true, "zero_force_ds_cpu_optimizer": false,
      "dataloader_drop_last": true, "communication_data_type": "BF16",
      "zrt": {"comm_timeout": 30, "debug_collectives": true}})");
  EXPECT_EQ(rc.gradient_clipping, 1.0);
  EXPECT_EQ(rc.steps_per_print, std::optional<int64_t>(10));
  EXPECT_TRUE(rc.wall_clock_breakdown && rc.memory_breakdown && rc.dump_state);
  EXPECT_TRUE(rc.prescale_gradients);
  EXPECT_EQ(rc.gradient_predivide_factor, 2.0);
  EXPECT_TRUE(rc.zero_allow_untested_optimizer);
  EXPECT_FALSE(rc.zero_force_ds_cpu_optimizer);
  EXPECT_TRUE(rc.dataloader_drop_last);
  EXPECT_EQ(rc.communication_data_type, std::optional<DType>(DType::kBFloat16));
  EXPECT_EQ(rc.comm.timeout_seconds, 30.0);
  EXPECT_TRUE(rc.comm.debug_collectives);
}

TEST(Resolve, CommunicationDataType) {
  EXPECT_EQ(resolve(R"({"train_batch_size": 8})").effective_communication_data_type(),
            DType::kFloat32);
  EXPECT_EQ(resolve(R"({"train_batch_size": 8, "fp16": {"enabled": true}})")
                .effective_communication_data_type(),
            DType::kFloat16);
  EXPECT_EQ(resolve(R"({"train_batch_size": 8, "bf16": {"enabled": true},
                        "zero_optimization": {"stage": 1}, "optimizer": {"type": "AdamW"}})")
                .effective_communication_data_type(),
            DType::kBFloat16);
  EXPECT_EQ(resolve(R"({"train_batch_size": 8, "fp16": {"enabled": true},
                        "communication_data_type": "fp32"})")
                .effective_communication_data_type(),
            DType::kFloat32);
  EXPECT_EQ(resolve_error(R"({"train_batch_size": 8, "communication_data_type": "FP8"})"),
            "communication_data_type: Invalid communication_data_type. Supported data types: "
            "['fp16', 'bf16', 'fp32']. Got: fp8");
}

TEST(Resolve, GradAccumDtype) {
  // bf16 without ZeRO accumulates in fp32; with ZeRO in the model dtype.
  EXPECT_EQ(
      resolve(R"({"train_batch_size": 8, "bf16": {"enabled": true}})").effective_grad_accum_dtype(),
      DType::kFloat32);
  EXPECT_EQ(resolve(R"({"train_batch_size": 8, "bf16": {"enabled": true},
                        "zero_optimization": {"stage": 2}, "optimizer": {"type": "AdamW"}})")
                .effective_grad_accum_dtype(),
            DType::kBFloat16);
  EXPECT_EQ(
      resolve(R"({"train_batch_size": 8, "fp16": {"enabled": true}})").effective_grad_accum_dtype(),
      DType::kFloat16);
  EXPECT_EQ(resolve(R"({"train_batch_size": 8, "bf16": {"enabled": true},
                        "zero_optimization": {"stage": 2}, "optimizer": {"type": "AdamW"},
                        "data_types": {"grad_accum_dtype": "torch.float32"}})")
                .effective_grad_accum_dtype(),
            DType::kFloat32);
  // Without ZeRO, ZeroRT's bf16 accumulates in fp32 only (config/README.md: DeepSpeed 0.19
  // accumulates in bf16), and other mixes are DeepSpeed's NotImplementedError. Both are
  // checked only when there is an optimizer (DeepSpeed checks them when it wraps one).
  EXPECT_EQ(resolve_error(R"({"train_batch_size": 8, "bf16": {"enabled": true},
                              "optimizer": {"type": "AdamW"},
                              "data_types": {"grad_accum_dtype": "bf16"}})"),
            "data_types.grad_accum_dtype: Bfloat16 wrapper must use a gradient accumulation type "
            "of fp32, enable ZeRO to use Bfloat16 gradient accumulation");
  EXPECT_CONTAINS(resolve_error(R"({"train_batch_size": 8, "fp16": {"enabled": true},
                                    "optimizer": {"type": "AdamW"},
                                    "data_types": {"grad_accum_dtype": "fp32"}})"),
                  "unsupported mix of model dtype and gradient accumulation type");
  EXPECT_NO_THROW(resolve(R"({"train_batch_size": 8, "fp16": {"enabled": true},
                              "data_types": {"grad_accum_dtype": "fp32"}})"));
  EXPECT_CONTAINS(
      resolve_error(R"({"train_batch_size": 8, "data_types": {"grad_accum_dtype": "int8"}})"),
      "int8 accumulation is not supported by ZeroRT");
}

// A config used directly (zrt::initialize(model, "ds.json")): only the HF Trainer fills "auto".
TEST(Resolve, AutoWithoutTheHfTrainerIsAnErrorSayingWhoFillsIt) {
  EXPECT_EQ(resolve_error(R"({"train_micro_batch_size_per_gpu": "auto"})"),
            "train_micro_batch_size_per_gpu is \"auto\", which only the HF Trainer fills (from "
            "--per_device_train_batch_size); a DeepSpeed config used without it must give the "
            "value");
  EXPECT_EQ(resolve_error(R"({"train_batch_size": 8, "fp16": {"enabled": "auto"}})"),
            "fp16.enabled is \"auto\", which only the HF Trainer fills (from --fp16); a DeepSpeed "
            "config used without it must give the value");
  EXPECT_EQ(resolve_error(R"({"train_batch_size": 8, "fp16": {"enabled": true,
                              "loss_scale": "auto"}})"),
            "fp16.loss_scale is \"auto\", which nothing fills (\"auto\" is an HF-Trainer "
            "placeholder); set a value");
}

// After the HF-Trainer layer (ResolveOptions::hf_trainer) the message names the flag to pass.
TEST(Resolve, AutoAfterTheHfLayerNamesTheFlag) {
  auto hf_error = [](const char* text) {
    ResolveOptions options;
    options.hf_trainer = true;
    try {
      resolve_config(Json::parse(text), options);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  EXPECT_EQ(hf_error(R"({"train_micro_batch_size_per_gpu": "auto"})"),
            "train_micro_batch_size_per_gpu is \"auto\": pass --per_device_train_batch_size or "
            "set a number");
  EXPECT_EQ(hf_error(R"({"train_batch_size": 8, "gradient_clipping": "auto"})"),
            "gradient_clipping is \"auto\": pass --max_grad_norm or set a number");
  EXPECT_EQ(hf_error(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW",
                         "params": {"lr": "auto"}}})"),
            "optimizer.params.lr is \"auto\": pass --learning_rate or set a number");
  EXPECT_EQ(hf_error(R"({"train_batch_size": 8, "scheduler": {"type": "WarmupDecayLR",
                         "params": {"total_num_steps": "auto"}}})"),
            "scheduler.params.total_num_steps is \"auto\": pass --num_training_steps (or "
            "--max_steps) or set a number");
  EXPECT_EQ(hf_error(R"({"train_batch_size": 8, "fp16": {"enabled": true, "loss_scale": "auto"}})"),
            "fp16.loss_scale is \"auto\": nothing fills this key from the command line; set a "
            "value");
}

// DeepSpeed's pydantic sections drop "auto"; ZeroRT refuses it there too (config/README.md).
TEST(Resolve, AutoInsideZeroIsAnErrorToo) {
  EXPECT_EQ(resolve_error(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW"},
      "zero_optimization": {"stage": 3, "overlap_comm": "auto", "offload_param": {"device": "auto"}}})"),
            "2 problems in the DeepSpeed config:\n"
            "zero_optimization.overlap_comm is \"auto\", which nothing fills (\"auto\" is an "
            "HF-Trainer placeholder); set a value\n"
            "zero_optimization.offload_param.device is \"auto\", which nothing fills (\"auto\" is "
            "an HF-Trainer placeholder); set a value");
}

TEST(Resolve, UnknownTopLevelKeysWarnWithSuggestion) {
  const ResolvedConfig rc =
      resolve(R"({"train_batch_size": 8, "gradient_cliping": 1.0, "my_custom_key": 1})");
  ASSERT_EQ(rc.warnings.size(), 2u);
  EXPECT_EQ(rc.warnings[0],
            "gradient_cliping: unknown top-level key, ignored (as DeepSpeed does) (did you mean "
            "\"gradient_clipping\"?)");
  EXPECT_EQ(rc.warnings[1], "my_custom_key: unknown top-level key, ignored (as DeepSpeed does)");
  EXPECT_EQ(rc.gradient_clipping, 1.0);
}

TEST(Resolve, IgnoredAndUnsupportedSections) {
  const ResolvedConfig rc = resolve(R"({"train_batch_size": 8,
      "flops_profiler": {"enabled": true}, "comms_logger": {},
      "hybrid_engine": {"enabled": false}})");
  ASSERT_EQ(rc.warnings.size(), 3u);
  EXPECT_EQ(rc.warnings[0], "flops_profiler: DeepSpeed section ignored by ZeroRT");
  EXPECT_EQ(rc.warnings[2], "hybrid_engine: DeepSpeed section ignored by ZeroRT (not enabled)");
  EXPECT_EQ(resolve_error(R"({"train_batch_size": 8, "hybrid_engine": {"enabled": true}})"),
            "hybrid_engine: this DeepSpeed feature is not supported by ZeroRT; set \"enabled\": "
            "false or remove the section");
}

// aio (NVMe offload's I/O): DeepSpeed's defaults, every key read, thread_count as the older name
// of intra_op_parallelism, page-aligned block sizes, GPUDirect Storage refused.
TEST(Resolve, AioSection) {
  const ResolvedConfig defaults = resolve(R"({"train_batch_size": 8})");
  EXPECT_EQ(defaults.aio.block_size, 1048576);
  EXPECT_EQ(defaults.aio.queue_depth, 8);
  EXPECT_EQ(defaults.aio.thread_count, 1);
  EXPECT_FALSE(defaults.aio.single_submit);
  EXPECT_TRUE(defaults.aio.overlap_events);
  const ResolvedConfig rc = resolve(R"({"train_batch_size": 8, "aio": {"block_size": 262144,
      "queue_depth": 32, "intra_op_parallelism": 2, "single_submit": true,
      "overlap_events": false, "use_gds": false}})");
  EXPECT_TRUE(rc.warnings.empty());
  EXPECT_EQ(rc.aio.block_size, 262144);
  EXPECT_EQ(rc.aio.queue_depth, 32);
  EXPECT_EQ(rc.aio.thread_count, 2);
  EXPECT_TRUE(rc.aio.single_submit);
  EXPECT_FALSE(rc.aio.overlap_events);
  EXPECT_EQ(resolve(R"({"train_batch_size": 8, "aio": {"thread_count": 3}})").aio.thread_count, 3);
  EXPECT_EQ(resolve_error(R"({"train_batch_size": 8, "aio": {"block_size": 1000}})"),
            "aio.block_size: expected a positive multiple of 4096 (O_DIRECT requests are "
            "page-aligned), got 1000");
  EXPECT_NE(resolve_error(R"({"train_batch_size": 8, "aio": {"thread_count": 2,
                "intra_op_parallelism": 4}})")
                .find("aio.thread_count: is the older name of intra_op_parallelism"),
            std::string::npos);
  EXPECT_NE(resolve_error(R"({"train_batch_size": 8, "aio": {"queue_depth": 0}})")
                .find("aio.queue_depth"),
            std::string::npos);
  EXPECT_NE(resolve_error(R"({"train_batch_size": 8, "aio": {"use_gds": true}})")
                .find("aio.use_gds: GPUDirect Storage is not supported"),
            std::string::npos);
  EXPECT_NE(
      resolve_error(R"({"train_batch_size": 8, "aio": {"blocksize": 4096}})").find("blocksize"),
      std::string::npos);
}

// activation_checkpointing: DeepSpeed's defaults, every key read, a wrong type or an unknown key
// an error naming it, notes for the keys that need a model-parallel group.
TEST(Resolve, ActivationCheckpointingSection) {
  const ResolvedConfig defaults = resolve(R"({"train_batch_size": 8})");
  EXPECT_FALSE(defaults.activation_checkpointing.cpu_checkpointing);
  EXPECT_FALSE(defaults.activation_checkpointing.number_checkpoints.has_value());
  const ResolvedConfig rc = resolve(R"({"train_batch_size": 8, "activation_checkpointing": {
      "partition_activations": true, "cpu_checkpointing": true, "profile": true,
      "number_checkpoints": 4, "contiguous_memory_optimization": false,
      "synchronize_checkpoint_boundary": false}})");
  EXPECT_TRUE(rc.warnings.empty());
  EXPECT_TRUE(rc.activation_checkpointing.cpu_checkpointing);
  EXPECT_TRUE(rc.activation_checkpointing.profile);
  EXPECT_TRUE(rc.activation_checkpointing.partition_activations);
  EXPECT_EQ(rc.activation_checkpointing.number_checkpoints, 4);
  int notes = 0;
  for (const std::string& n : rc.notes) notes += n.find("activation_checkpointing.") == 0;
  EXPECT_EQ(notes, 2) << "partition_activations and number_checkpoints have no effect here";
  EXPECT_NE(resolve_error(R"({"train_batch_size": 8,
                "activation_checkpointing": {"cpu_checkpointing": "yes"}})")
                .find("activation_checkpointing.cpu_checkpointing"),
            std::string::npos);
  EXPECT_NE(resolve_error(R"({"train_batch_size": 8,
                "activation_checkpointing": {"cpu_checkpoint": true}})")
                .find("cpu_checkpoint"),
            std::string::npos);
  EXPECT_NE(resolve_error(R"({"train_batch_size": 8,
                "activation_checkpointing": {"number_checkpoints": 0}})")
                .find("number_checkpoints"),
            std::string::npos);
}

// Keys DeepSpeed 0.19 removed are errors whatever their value, with DeepSpeed's message.
TEST(Resolve, KeysDeepSpeedRemovedAreErrors) {
  EXPECT_EQ(resolve_error(R"({"train_batch_size": 8, "elasticity": {"enabled": false}})"),
            "elasticity: Elastic training has been removed; the 'elasticity' configuration block "
            "is no longer supported. Set train_batch_size / train_micro_batch_size_per_gpu / "
            "gradient_accumulation_steps directly. See "
            "https://github.com/deepspeedai/DeepSpeed/issues/8489.");
  EXPECT_CONTAINS(resolve_error(R"({"train_batch_size": 8, "sparse_gradients": false})"),
                  "sparse_gradients: Sparse compression of dense torch.nn.Embedding gradients has "
                  "been removed.");
  EXPECT_CONTAINS(resolve_error(R"({"train_batch_size": 8, "nebula": {}})"),
                  "nebula: Nebula checkpointing has been removed.");
  EXPECT_CONTAINS(resolve_error(R"({"train_batch_size": 8,
                                    "zero_optimization": {"mics_shard_size": -1}})"),
                  "zero_optimization.mics_shard_size: MiCS ZeRO-3 sharding has been removed;");
  EXPECT_CONTAINS(resolve_error(R"({"train_batch_size": 8,
                                    "zero_optimization": {"zeropp_loco_param": {}}})"),
                  "zero_optimization.zeropp_loco_param: LoCo-Zero++ has been removed;");
  for (const auto& removed : keys::kRemovedTopLevel) {
    const std::string config = str(R"({"train_batch_size": 8, ")", removed.key, R"(": {}})");
    EXPECT_CONTAINS(resolve_error(config), std::string(removed.key) + ": ");
  }
}

TEST(Resolve, EveryProblemIsReportedOnce) {
  const std::string message = resolve_error(R"({
      "train_batch_size": 8,
      "gradient_clipping": -1,
      "steps_per_print": 0,
      "wall_clock_breakdown": "yes",
      "zero_optimization": {"stage": 2, "reduce_bucket_size": -1, "overlap_com": true},
      "fp16": {"enabled": true, "loss_scale_window": 0},
      "bf16": {"enabled": true}})");
  EXPECT_EQ(message,
            "8 problems in the DeepSpeed config:\n"
            "gradient_clipping: expected a non-negative number, got -1\n"
            "steps_per_print: expected a positive integer, got 0\n"
            "wall_clock_breakdown: expected true or false, got \"yes\" (a string)\n"
            "zero_optimization.overlap_com: unknown key (did you mean \"overlap_comm\"?)\n"
            "zero_optimization.reduce_bucket_size: expected a positive integer, got -1\n"
            "fp16.loss_scale_window must be > 0 when dynamic loss scaling "
            "is enabled (loss_scale=0)\n"
            "bfloat16 and fp16 modes cannot be simultaneously enabled\n"
            "optimizer: zero stage 2 requires an optimizer");
}

TEST(Resolve, MiscSections) {
  const ResolvedConfig rc = resolve(R"({"train_batch_size": 8,
      "checkpoint": {"tag_validation": "fail", "use_node_local_storage": true,
                     "parallel_write": {"pipeline_stage": true}},
      "tensorboard": {"enabled": true, "output_path": "tb/", "job_name": "run1"},
      "csv_monitor": {"enabled": true}})");
  EXPECT_EQ(rc.checkpoint.tag_validation, ckpt::TagValidation::kFail);
  EXPECT_TRUE(rc.checkpoint.use_node_local_storage);
  EXPECT_TRUE(rc.checkpoint.parallel_write_pipeline_stage);
  EXPECT_TRUE(rc.tensorboard.enabled);
  EXPECT_EQ(rc.tensorboard.output_path, "tb/");
  EXPECT_EQ(rc.tensorboard.job_name, "run1");
  EXPECT_TRUE(rc.csv_monitor.enabled);
  EXPECT_EQ(rc.csv_monitor.job_name, "DeepSpeedJobName");
  EXPECT_EQ(resolve(R"({"train_batch_size": 8, "checkpoint": {"tag_validation": "Ignore"}})")
                .checkpoint.tag_validation,
            ckpt::TagValidation::kIgnore);
  EXPECT_EQ(
      resolve_error(R"({"train_batch_size": 8, "checkpoint": {"tag_validation": "warning"}})"),
      "checkpoint.tag_validation: Checkpoint config contains invalid tag_validation value "
      "of WARNING, expecting one of ['WARN', 'IGNORE', 'FAIL']");
  EXPECT_EQ(resolve_error(R"({"train_batch_size": 8,
                              "checkpoint": {"parallel_write": {"pipeline_stage": 1}}})"),
            "checkpoint::parallel_write::pipeline_stage value of '1' is invalid, expecting: true "
            "or false");
  EXPECT_EQ(resolve_error(R"({"train_batch_size": 8, "checkpoint": {"load_universal": true}})"),
            "<no error>");
  EXPECT_EQ(resolve_error(R"({"train_batch_size": 8, "checkpoint": {"load_universal": 1}})"),
            "checkpoint.load_universal: expected true or false, got 1");
  EXPECT_EQ(resolve_error(R"({"train_batch_size": 8, "tensorboard": {"enable": true}})"),
            "tensorboard.enable: unknown key (did you mean \"enabled\"?)");
  EXPECT_EQ(resolve_error(R"({"train_batch_size": 8, "zrt": {"comm_timeout": 0}})"),
            "zrt.comm_timeout: expected a positive number, got 0");
}

// The communicator is created from the "zrt" section before the world size is known; it must be
// read as strictly as resolve_config reads it (it once ignored wrong types silently).
TEST(Resolve, CommOptionsAloneAreReadAsStrictlyAsTheWholeConfig) {
  auto comm_error = [](const std::string& text) -> std::string {
    try {
      resolve_comm_options(Json::parse(text));
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(comm_error(R"({"zrt": {"comm_timeout": "30"}})"),
            resolve_error(R"({"train_batch_size": 8, "zrt": {"comm_timeout": "30"}})"));
  EXPECT_CONTAINS(comm_error(R"({"zrt": {"comm_timeout": "30"}})"), "zrt.comm_timeout");
  EXPECT_EQ(comm_error(R"({"zrt": {"comm_timout": 30}})"),
            "zrt.comm_timout: unknown key (did you mean \"comm_timeout\"?)");
  EXPECT_CONTAINS(comm_error(R"({"zrt": {"debug_collectives": 1}})"), "zrt.debug_collectives");
  EXPECT_CONTAINS(comm_error(R"([1, 2])"), "must be a JSON object");
  // The rest of the config is not this function's business: a bad batch size is not reported.
  const comm::CommOptions o = resolve_comm_options(Json::parse(
      R"({"train_batch_size": "many", "zrt": {"comm_timeout": 30, "debug_collectives": true}})"));
  EXPECT_EQ(o.timeout_seconds, 30.0);
  EXPECT_TRUE(o.debug_collectives);
  const ResolvedConfig rc =
      resolve(R"({"train_batch_size": 8, "zrt": {"comm_timeout": 30, "debug_collectives": true}})");
  EXPECT_EQ(rc.comm.timeout_seconds, o.timeout_seconds);
  EXPECT_EQ(rc.comm.debug_collectives, o.debug_collectives);
}

TEST(Resolve, DumpShowsEveryEffectiveValueAndRoundTrips) {
  const ResolvedConfig rc = resolve(R"({"train_micro_batch_size_per_gpu": 2,
      "fp16": {"enabled": true}, "optimizer": {"type": "Adam", "params": {"lr": 3e-4}},
      "zero_optimization": {"stage": 2, "prefetch_bucket_size": 1e6}})",
                                    4);
  const Json dump = to_json(rc);
  EXPECT_EQ(dump["train_batch_size"], 8);
  EXPECT_EQ(dump["gradient_clipping"], 1.0);
  EXPECT_TRUE(dump["steps_per_print"].is_null());
  EXPECT_EQ(dump["communication_data_type"], "fp16");
  EXPECT_EQ(dump["fp16"]["initial_scale_power"], 16);
  EXPECT_EQ(dump["fp16"]["hysteresis"], 2);
  EXPECT_EQ(dump["zero_optimization"]["overlap_comm"], false);
  EXPECT_EQ(dump["zero_optimization"]["stage3_prefetch_bucket_size"], 1000000);
  EXPECT_EQ(dump["optimizer"]["params"]["adam_w_mode"], true);
  EXPECT_EQ(dump["optimizer"]["params"]["lr"], 3e-4);
  EXPECT_EQ(dump["zrt"]["comm_timeout"], 600.0);
  ResolveOptions options;
  options.world_size = 4;
  EXPECT_EQ(to_json(resolve_config(dump, options)), dump);
}

TEST(Resolve, WorldSizeMustBePositive) {
  EXPECT_EQ(resolve_error(R"({"train_batch_size": 8})", 0), "world size must be at least 1, got 0");
}

}  // namespace
}  // namespace zrt::config

namespace zrt::config {
namespace {

using test::resolve;
using test::resolve_error;

// Keys DeepSpeed 0.19.8 reads that earlier tables lacked: each read with DeepSpeed's meaning,
// refused where ZeroRT would compute something else, accepted with a note where it cannot apply
// (tests/peers/ds_config_keys.py checks that every key DeepSpeed reads is accepted).
TEST(Resolve, DeepSpeed019ZeroKeys) {
  const std::string base = R"({"train_batch_size": 8, "gradient_clipping": 0,
                               "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
                               "zero_optimization": )";
  auto zero = [&](const std::string& section) { return base + section + "}"; };
  EXPECT_FALSE(resolve(zero(R"({"stage": 2, "compute_grad_norm": false})"))
                   .zero_extra.compute_grad_norm);
  EXPECT_CONTAINS(resolve_error(zero(R"({"stage": 3, "compute_grad_norm": false})")),
                  "compute_grad_norm=false is supported only with ZeRO Stage 1 or 2");
  EXPECT_CONTAINS(
      resolve_error(R"({"train_batch_size": 8, "gradient_clipping": 1.0,
                       "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
                       "zero_optimization": {"stage": 2, "compute_grad_norm": false}})"),
      "compute_grad_norm=false requires gradient_clipping=0");
  EXPECT_CONTAINS(resolve_error(zero(R"({"stage": 2, "compute_grad_norm": false,
                                         "offload_optimizer": {"device": "cpu"}})")),
                  "does not support optimizer offload");
  EXPECT_TRUE(resolve(zero(R"({"stage": 3, "stage3_allgather_sequential": true})"))
                  .zero_extra.allgather_sequential);
  EXPECT_CONTAINS(resolve_error(zero(R"({"stage": 3, "stage3_allgather_sequential": true,
                                         "allgather_sequential": true})")),
                  "two names of the same setting");
  EXPECT_CONTAINS(resolve_error(zero(R"({"stage": 1, "parameter_alignment": true})")),
                  "zero_optimization.parameter_alignment: true (ZeRO stage 1/2 flat buffers padded");
  resolve(zero(R"({"stage": 3, "parameter_alignment": true, "enable_sanity_checks": true,
                   "save_muon_momentum_buffer_in_memory": true, "zenflow": null})"));
  EXPECT_CONTAINS(resolve_error(zero(R"({"stage": 2, "zenflow": {"topk_ratio": 0.1}})")),
                  "zero_optimization.zenflow: ZenFlow");
  const ResolvedConfig leaf = resolve(zero(
      R"({"stage": 3, "leaf_module": {"classes": "MoeBlock", "names": ["a", "b", "a"]}})"));
  EXPECT_EQ(leaf.zero_extra.leaf_module_classes, std::vector<std::string>{"MoeBlock"});
  EXPECT_EQ(leaf.zero_extra.leaf_module_names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(resolve(zero(R"({"stage": 3})")).zero_extra.leaf_module_classes.size(), 3u);
  EXPECT_CONTAINS(resolve_error(zero(R"({"stage": 3, "leaf_module": {"names": [1]}})")),
                  "zero_optimization.leaf_module.names: expected a list of strings");
  EXPECT_CONTAINS(resolve_error(zero(R"({"stage": 3, "leaf_module": {"name": []}})")),
                  "zero_optimization.leaf_module.name: unknown key");
  resolve(zero(R"({"stage": 3, "offload_optimizer": {"device": "cpu", "super_offload": true,
                                                    "cpuadam_cores_perc": 0.5}})"));
  EXPECT_CONTAINS(resolve_error(zero(R"({"stage": 3, "offload_optimizer": {
                                         "cpuadam_cores_perc": 1.5}})")),
                  "zero_optimization.offload_optimizer.cpuadam_cores_perc: expected a number in");
}

TEST(Resolve, DeepSpeed019PrecisionCheckpointAndDataTypeKeys) {
  resolve(R"({"train_batch_size": 8, "bf16": {"enabled": true, "check_grad_overflow": false}})");
  EXPECT_CONTAINS(resolve_error(R"({"train_batch_size": 8,
                                    "bf16": {"enabled": true, "bf16_optimizer_states": true}})"),
                  "bf16.bf16_optimizer_states: not supported by ZeroRT");
  EXPECT_CONTAINS(
      resolve_error(R"({"train_batch_size": 8,
                        "bfloat16": {"enabled": true, "bf16_master_weights_and_grads": true}})"),
      "bfloat16.bf16_master_weights_and_grads: not supported by ZeroRT");
  resolve(R"({"train_batch_size": 8, "checkpoint": {"checkpoint_serialization": false,
              "writer": {"type": "fast", "data_parallel": "socket", "io_buffer_size": 1024}}})");
  EXPECT_CONTAINS(resolve_error(R"({"train_batch_size": 8,
                                    "checkpoint": {"writer": {"type": "disk"}}})"),
                  "writer contains invalid value DISK for type, expecting one of ['MOCK', "
                  "'PYTHON', 'FAST']");
  resolve(R"({"train_batch_size": 8, "bf16": {"enabled": true},
              "data_types": {"param_dtype": "bf16", "buffer_dtype": "bf16",
                             "keep_in_fp32_modules": "auto"}})");
  EXPECT_CONTAINS(resolve_error(R"({"train_batch_size": 8, "bf16": {"enabled": true},
                                    "data_types": {"param_dtype": "fp16"}})"),
                  "data_types.param_dtype='fp16' conflicts with the enabled precision mode");
  EXPECT_CONTAINS(resolve_error(R"({"train_batch_size": 8,
                                    "data_types": {"buffer_dtype": "bf16"}})"),
                  "data_types.buffer_dtype: ZeroRT casts floating buffers to the training dtype");
  EXPECT_CONTAINS(resolve_error(R"({"train_batch_size": 8,
                                    "data_types": {"keep_in_fp32_modules": "rotary"}})"),
                  "data_types.keep_in_fp32_modules: must be \"auto\" or a list of name patterns");
}

TEST(Resolve, DeepSpeed019TopLevelKeys) {
  const ResolvedConfig ok = resolve(R"({"train_batch_size": 8, "gradient_allreduce_op": "mean",
      "managed_gradient_accumulation": true, "sequence_parallel_size": 1,
      "data_parallel_size": 2, "log_level": "info", "disable_python_gc": true,
      "datastates_ckpt": {"enabled": false}, "expert_parallel": {"enabled": false}})",
                                    /*world_size=*/2);
  EXPECT_TRUE(ok.warnings.empty() || ok.warnings.size() == 1);  // expert_parallel: ignored
  EXPECT_CONTAINS(resolve_error(R"({"train_batch_size": 8, "gradient_allreduce_op": "sum"})"),
                  "gradient_allreduce_op: 'sum' (gradients summed");
  EXPECT_CONTAINS(resolve_error(R"({"train_batch_size": 8, "gradient_allreduce_op": "max"})"),
                  "Invalid gradient_allreduce_op. Supported operations: ['mean', 'sum']");
  EXPECT_CONTAINS(
      resolve_error(R"({"train_batch_size": 8, "managed_gradient_accumulation": false})"),
      "managed_gradient_accumulation: false");
  EXPECT_CONTAINS(resolve_error(R"({"train_batch_size": 8, "sequence_parallel_size": 2})"),
                  "sequence_parallel_size: 2 does not divide the job's 1 ranks");
  EXPECT_CONTAINS(resolve_error(R"({"train_batch_size": 8, "data_parallel_size": 4})", 2),
                  "data_parallel_size: 4 does not match the job's 2 data-parallel ranks");
  // Ulysses: the batch triad counts the job's ranks / sequence_parallel_size, as DeepSpeed's.
  const ResolvedConfig sp = resolve(R"({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
      "sequence_parallel_size": 2, "data_parallel_size": 2})", /*world_size=*/4);
  EXPECT_EQ(sp.sequence_parallel_size, 2);
  EXPECT_EQ(sp.batch.world_size, 2);
  EXPECT_EQ(sp.batch.gradient_accumulation_steps, 2);
  EXPECT_CONTAINS(resolve_error(R"({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
      "gradient_accumulation_steps": 3, "sequence_parallel_size": 2})", 4),
                  "gradient_acc_step * world_size 8 != 2 * 3 * 2");
  EXPECT_CONTAINS(
      resolve_error(R"({"train_batch_size": 8, "expert_parallel": {"enabled": true}})"),
      "expert_parallel: this DeepSpeed feature is not supported by ZeroRT");
}

}  // namespace
}  // namespace zrt::config
