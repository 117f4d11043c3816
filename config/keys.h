// The keys the resolver accepts, section by section. These tables are the single source of
// truth: the resolver uses them to detect unknown keys, supported_keys() lists them for
// config/KEYS.md (a test checks that every one is documented there).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "config/removed_keys.h"

namespace zrt::config::keys {

using KeyList = std::vector<std::string_view>;

// Top-level keys ZeroRT reads.
inline const KeyList kTopLevel = {"train_batch_size",
                                  "train_micro_batch_size_per_gpu",
                                  "gradient_accumulation_steps",
                                  "gradient_clipping",
                                  "steps_per_print",
                                  "wall_clock_breakdown",
                                  "memory_breakdown",
                                  "dump_state",
                                  "prescale_gradients",
                                  "gradient_predivide_factor",
                                  "communication_data_type",
                                  "zero_allow_untested_optimizer",
                                  "zero_force_ds_cpu_optimizer",
                                  "dataloader_drop_last",
                                  "allgather_size",
                                  "fp16",
                                  "bf16",
                                  "bfloat16",
                                  "zero_optimization",
                                  "optimizer",
                                  "scheduler",
                                  "checkpoint",
                                  "data_types",
                                  "tensorboard",
                                  "csv_monitor",
                                  "activation_checkpointing",
                                  "aio",
                                  "gradient_allreduce_op",
                                  "managed_gradient_accumulation",
                                  "sequence_parallel_size",
                                  "data_parallel_size",
                                  "zrt"};

// Top-level DeepSpeed sections ZeroRT does not use: accepted with a warning.
inline const KeyList kIgnoredTopLevel = {"flops_profiler",
                                         "comms_logger",
                                         "wandb",
                                         "comet",
                                         "autotuning",
                                         "timers",
                                         "compile",
                                         "vocabulary_size",
                                         "disable_allgather",
                                         "seq_parallel_communication_data_type",
                                         "pipeline",
                                         "tensor_parallel",
                                         "use_data_before_expert_parallelism",
                                         "weight_quantization"};

// Top-level DeepSpeed keys that act on the Python process or DeepSpeed's own writers: accepted,
// no effect in ZeroRT, each with its reason.
struct NoEffectKey {
  std::string_view key;
  std::string_view reason;
};
inline const std::vector<NoEffectKey> kNoEffectTopLevel = {
    {"log_level",
     "sets DeepSpeed's Python logger; ZeroRT's level is --log_level or ZRT_LOG_LEVEL"},
    {"disable_python_gc", "a Python garbage-collector switch; ZeroRT runs no Python"},
    {"datastates_ckpt",
     "DataStates-LLM's asynchronous checkpoint engine; ZeroRT writes its checkpoints with its own "
     "writer (the same files)"},
};

// Top-level DeepSpeed features that change training results; rejected when enabled
// ("enabled": true inside the section).
inline const KeyList kUnsupportedWhenEnabled = {"data_efficiency", "hybrid_engine",
                                                "torch_autocast", "expert_parallel"};

inline const KeyList kFp16 = {"enabled",
                              "auto_cast",
                              "loss_scale",
                              "initial_scale_power",
                              "loss_scale_window",
                              "hysteresis",
                              "consecutive_hysteresis",
                              "min_loss_scale",
                              "fp16_master_weights_and_grads"};
inline const KeyList kBf16 = {"enabled", "immediate_grad_update", "check_grad_overflow",
                              "bf16_master_weights_and_grads", "bf16_optimizer_states"};

inline const KeyList kZero = {"stage",
                              "contiguous_gradients",
                              "reduce_scatter",
                              "reduce_bucket_size",
                              "use_multi_rank_bucket_allreduce",
                              "allgather_partitions",
                              "allgather_bucket_size",
                              "overlap_comm",
                              "load_from_fp32_weights",
                              "elastic_checkpoint",
                              "offload_param",
                              "offload_optimizer",
                              "sub_group_size",
                              "stage3_prefetch_bucket_size",
                              "prefetch_bucket_size",
                              "stage3_param_persistence_threshold",
                              "param_persistence_threshold",
                              "stage3_model_persistence_threshold",
                              "model_persistence_threshold",
                              "stage3_max_live_parameters",
                              "max_live_parameters",
                              "stage3_max_reuse_distance",
                              "max_reuse_distance",
                              "stage3_gather_16bit_weights_on_model_save",
                              "gather_16bit_weights_on_model_save",
                              "stage3_module_granularity_threshold",
                              "module_granularity_threshold",
                              "stage3_use_all_reduce_for_fetch_params",
                              "use_all_reduce_for_fetch_params",
                              "ignore_unused_parameters",
                              "legacy_stage1",
                              "round_robin_gradients",
                              "zero_hpz_partition_size",
                              "zero_quantized_weights",
                              "zero_quantized_nontrainable_weights",
                              "zero_quantized_gradients",
                              "memory_efficient_linear",
                              "pipeline_loading_checkpoint",
                              "override_module_apply",
                              "log_trace_cache_warnings",
                              "cpu_offload",
                              "cpu_offload_param",
                              "cpu_offload_use_pin_memory",
                              "stage3_gather_fp16_weights_on_model_save",
                              "compute_grad_norm",
                              "allgather_sequential",
                              "stage3_allgather_sequential",
                              "parameter_alignment",
                              "enable_sanity_checks",
                              "save_muon_momentum_buffer_in_memory",
                              "leaf_module",
                              "zenflow"};
inline const KeyList kLeafModule = {"classes", "names", "name_suffixes"};
inline const KeyList kOffloadParam = {"device",      "nvme_path",  "buffer_count",
                                      "buffer_size", "max_in_cpu", "pin_memory"};
inline const KeyList kOffloadOptimizer = {"device",     "nvme_path",     "buffer_count",
                                          "pin_memory", "pipeline_read", "pipeline_write",
                                          "fast_init",  "ratio",
                                          "super_offload", "cpuadam_cores_perc"};

inline const KeyList kOptimizer = {"type", "params", "legacy_fusion"};
inline const KeyList kAdamParams = {"lr",           "betas",           "eps",
                                    "weight_decay", "bias_correction", "adam_w_mode",
                                    "torch_adam",   "amsgrad",         "set_grad_none"};
inline const KeyList kSgdParams = {"lr",           "momentum",       "dampening",
                                   "weight_decay", "nesterov",       "maximize",
                                   "foreach",      "differentiable", "fused"};

inline const KeyList kScheduler = {"type", "params"};
inline const KeyList kWarmupLRParams = {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps",
                                        "warmup_type", "last_batch_iteration"};
inline const KeyList kWarmupDecayLRParams = {"warmup_min_lr",        "warmup_max_lr",
                                             "warmup_num_steps",     "warmup_type",
                                             "last_batch_iteration", "total_num_steps"};
inline const KeyList kWarmupCosineLRParams = {"total_num_steps",  "warmup_min_ratio",
                                              "warmup_num_steps", "cos_min_ratio",
                                              "warmup_type",      "last_batch_iteration"};
inline const KeyList kOneCycleParams = {"cycle_min_lr",
                                        "cycle_max_lr",
                                        "decay_lr_rate",
                                        "cycle_first_step_size",
                                        "cycle_second_step_size",
                                        "cycle_first_stair_count",
                                        "cycle_second_stair_count",
                                        "decay_step_size",
                                        "cycle_momentum",
                                        "cycle_min_mom",
                                        "cycle_max_mom",
                                        "decay_mom_rate",
                                        "last_batch_iteration"};
inline const KeyList kLRRangeTestParams = {"lr_range_test_min_lr", "lr_range_test_step_size",
                                           "lr_range_test_step_rate", "lr_range_test_staircase",
                                           "last_batch_iteration"};

inline const KeyList kCheckpoint = {"tag_validation", "use_node_local_storage", "load_universal",
                                    "parallel_write", "checkpoint_serialization", "writer"};
inline const KeyList kCheckpointWriter = {"type",          "io_buffer_size", "io_buffer_double",
                                          "show_statistics", "data_parallel", "decoupled",
                                          "io_multiplier"};
inline const KeyList kCheckpointParallelWrite = {"pipeline_stage"};
inline const KeyList kDataTypes = {"grad_accum_dtype", "param_dtype", "buffer_dtype",
                                   "keep_in_fp32_modules"};
inline const KeyList kMonitor = {"enabled", "output_path", "job_name"};
inline const KeyList kActivationCheckpointing = {
    "partition_activations", "contiguous_memory_optimization",
    "number_checkpoints",    "synchronize_checkpoint_boundary",
    "cpu_checkpointing",     "profile"};
inline const KeyList kZrt = {"comm_timeout", "debug_collectives"};
// DeepSpeed's asynchronous I/O section (NVMe offload); thread_count is its older name for
// intra_op_parallelism.
inline const KeyList kAio = {"block_size",   "queue_depth",   "intra_op_parallelism",
                             "thread_count", "single_submit", "overlap_events",
                             "use_gds"};

}  // namespace zrt::config::keys

namespace zrt::config {

// Every key the resolver accepts, as dotted paths ("zero_optimization.offload_param.device",
// "scheduler.params.warmup_num_steps"), including the ignored top-level sections, and the keys
// DeepSpeed removed (refused with DeepSpeed's message, kRemovedTopLevel / kRemovedZero).
std::vector<std::string> supported_keys();

}  // namespace zrt::config
