// ResolvedConfig: a DeepSpeed config after parse -> resolve -> validate, as typed option
// structs with DeepSpeed's code defaults (docs/DEEPSPEED.md §1), ready for the runtime.
//
//   Json json = load_config_file(path);                  // config/load.h
//   ResolvedConfig rc = resolve_config(json, {.world_size = 8});
//
// resolve_config() reports every problem at once in one ConfigError (one line per problem,
// each naming its key path). Leftover "auto" values are errors except inside zero_optimization,
// where DeepSpeed drops them and the default applies. HF-Trainer "auto" filling happens before
// this, in config/hf_trainer.h. See config/KEYS.md for every key, default and "auto" rule.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "aio/options.h"
#include "checkpoint/options.h"
#include "comm/options.h"
#include "core/dtype.h"
#include "core/json.h"
#include "optim/options.h"
#include "sched/options.h"
#include "zero/options.h"

namespace zrt::config {

// The batch triad after DeepSpeed's derivation and assertions (spec §1.2).
struct BatchConfig {
  int64_t train_batch_size = 0;
  int64_t train_micro_batch_size_per_gpu = 0;
  int64_t gradient_accumulation_steps = 0;
  int world_size = 1;
};

struct Fp16Config {
  bool enabled = false;
  bool auto_cast = false;
  // Effective loss-scaler settings: the fp16 section's values over DeepSpeed 0.19's defaults
  // (2^16, window 1000, hysteresis 2, min scale 1), whichever keys the section gives.
  optim::LossScaleOptions loss_scale;
};

struct Bf16Config {
  bool enabled = false;
  bool immediate_grad_update = false;
};

// "tensorboard" / "csv_monitor".
struct MonitorConfig {
  bool enabled = false;
  std::string output_path;
  std::string job_name = "DeepSpeedJobName";
};

// zero_optimization keys that ZeroRT accepts but that do not change what ZeroRT does (they tune
// DeepSpeed's Python stage-3 hooks). Kept so that the resolved dump shows every value.
struct ZeroExtraOptions {
  int64_t module_granularity_threshold = 0;
  bool use_all_reduce_for_fetch_params = false;
  bool memory_efficient_linear = true;
  bool pipeline_loading_checkpoint = false;
  bool override_module_apply = true;
  bool log_trace_cache_warnings = false;
  bool legacy_stage1 = false;  // true only at stage 0, where DeepSpeed does not read it
  // false: DeepSpeed skips the gradient norm at stages 1-2 (allowed only without clipping and
  // CPU offload); ZeroRT computes it anyway, the result is the same.
  bool compute_grad_norm = true;
  bool allgather_sequential = false;  // stage3_allgather_sequential; no effect (see KEYS.md)
  // DeepSpeed's zero_optimization.leaf_module (its defaults: the HF sparse MoE block classes).
  std::vector<std::string> leaf_module_classes = {
      "transformers.models.mixtral.modeling_mixtral.MixtralSparseMoeBlock",
      "transformers.models.qwen2_moe.modeling_qwen2_moe.Qwen2MoeSparseMoeBlock",
      "transformers.models.qwen3_moe.modeling_qwen3_moe.Qwen3MoeSparseMoeBlock"};
  std::vector<std::string> leaf_module_names;
  std::vector<std::string> leaf_module_name_suffixes;
};

struct ResolvedConfig {
  BatchConfig batch;
  double gradient_clipping = 1.0;          // DeepSpeed 0.19's code default; 0: no clipping
  std::optional<int64_t> steps_per_print;  // unset: no progress line (code default None)
  bool wall_clock_breakdown = false;
  bool memory_breakdown = false;
  bool dump_state = false;
  bool prescale_gradients = false;
  double gradient_predivide_factor = 1.0;
  std::optional<DType> communication_data_type;  // as configured; see effective_*()
  std::optional<DType> grad_accum_dtype;         // data_types.grad_accum_dtype as configured
  DType model_dtype = DType::kFloat32;           // fp16 / bf16 / fp32
  Fp16Config fp16;
  Bf16Config bf16;
  zero::ZeroOptions zero;  // overlap_comm is always set (its stage-dependent default applied)
  ZeroExtraOptions zero_extra;
  std::optional<optim::OptimizerSpec> optimizer;  // the "optimizer" section
  std::optional<sched::SchedulerSpec> scheduler;  // the "scheduler" section (DeepSpeed types)
  ckpt::CheckpointOptions checkpoint;
  MonitorConfig tensorboard;
  MonitorConfig csv_monitor;
  bool zero_allow_untested_optimizer = false;
  bool zero_force_ds_cpu_optimizer = true;
  bool dataloader_drop_last = false;
  // Ranks per sequence-parallel group (Note [Ulysses sequence parallelism] in
  // zero/sequence_parallel.h); batch.world_size is the job's ranks / this.
  int sequence_parallel_size = 1;
  bool client_optimizer = false;                               // ResolveOptions::client_optimizer
  zero::ActivationCheckpointOptions activation_checkpointing;  // the section of that name
  comm::CommOptions comm;                                      // the ZeroRT "zrt" section
  aio::AioOptions aio;                // the "aio" section (NVMe offload's I/O)
  std::vector<std::string> warnings;  // also logged (rank 0) by resolve_config
  std::vector<std::string> notes;     // also logged at info level

  bool zero_enabled() const { return zero.stage > 0; }
  // Explicit communication_data_type, else fp16 / bf16 when enabled, else fp32 (spec §1.3).
  DType effective_communication_data_type() const;
  // Explicit grad_accum_dtype, else fp32 for bf16 without ZeRO, else the model dtype.
  DType effective_grad_accum_dtype() const;
  // The effective dtypes above with prescale_gradients and gradient_predivide_factor: what the
  // ZeRO components take beside `zero`.
  zero::GradientOptions gradient_options() const;
  // ZeRO-3 with no optimizer at all: parameter partitioning only (spec §5.5).
  bool inference_mode() const;
  // fp16.loss_scale when fp16 is on; a static scale of 1 otherwise (bf16, fp32).
  optim::LossScaleOptions effective_loss_scale() const;
};

struct ResolveOptions {
  // The job's ranks; the batch triad's data-parallel world is this / sequence_parallel_size.
  int world_size = 1;
  // The program supplies its own optimizer when the config has none (the HF Trainer does).
  bool client_optimizer = false;
  // The config went through the HF-Trainer layer (prepare_trainer_config): a leftover "auto" is
  // reported with the flag that fills it. Otherwise (a config used directly, as DeepSpeed's
  // deepspeed.initialize reads it) the message says that only the HF Trainer fills "auto".
  bool hf_trainer = false;
};

// Types, applies defaults and validates. Throws ConfigError listing every problem.
ResolvedConfig resolve_config(const Json& config, const ResolveOptions& options = {});

// The communicator options alone (the environment's ZRT_COMM_TIMEOUT / ZRT_DEBUG_COLLECTIVES, then
// the config's "zrt" section), parsed exactly as resolve_config parses them, for creating the
// communicator before the world size (and so the rest of the config) is known. Throws
// ConfigError for a bad "zrt" section or environment value; the rest of the config is not read.
comm::CommOptions resolve_comm_options(const Json& config);

// The ZeRO stage alone (the "zero_optimization" section, or its legacy boolean, read exactly as
// resolve_config reads it): the one answer to "is this ZeRO-3?" before the world size is known.
// Throws ConfigError for a bad section; the rest of the config is not read.
int resolve_zero_stage(const Json& config);
// The config's sequence_parallel_size when it is usable: a positive integer that divides
// `world_size` (any positive integer when world_size is 0); else 1, resolve_config reporting a bad
// value with the config's other problems. The one reading for the layers that need K before the
// config is resolved (the HF "auto" fill, the Trainer's sampler, zrt-train).
int sequence_parallel_size(const Json& config, int world_size = 0);

// The resolved config as a DeepSpeed JSON config with every effective value written out
// (defaults included, "auto" gone, aliases and deprecated keys replaced by their canonical
// names). Resolving the dump again gives the same ResolvedConfig.
Json to_json(const ResolvedConfig& resolved);

// Logs to_json(resolved) at debug level on rank 0 (ZRT_LOG_LEVEL=debug shows it; zrt-config
// prints it on demand). Call it once, after resolution.
void log_resolved_config(const ResolvedConfig& resolved);

}  // namespace zrt::config
