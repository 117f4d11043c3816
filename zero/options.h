// Options of the ZeRO partitioner (leaf header: includes only core/). Defaults are DeepSpeed's
// code defaults for "zero_optimization" (docs/DEEPSPEED.md §1.6), not its documentation's.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "core/dtype.h"

namespace zrt::zero {

enum class OffloadDevice { kNone, kCpu, kNvme };

struct OffloadParamOptions {
  OffloadDevice device = OffloadDevice::kNone;
  std::string nvme_path;
  int64_t buffer_count = 5;
  int64_t buffer_size = 100000000;
  int64_t max_in_cpu = 1000000000;
  bool pin_memory = true;  // DeepSpeed 0.19 (pins CPU buffers of CUDA tensors only)
};

struct OffloadOptimizerOptions {
  OffloadDevice device = OffloadDevice::kNone;
  std::string nvme_path;
  int64_t buffer_count = 4;
  bool pin_memory = true;  // DeepSpeed 0.19 (pins CPU buffers of CUDA tensors only)
  bool pipeline_read = false;
  bool pipeline_write = false;
  bool fast_init = false;
  double ratio = 1.0;
};

// DeepSpeed's "activation_checkpointing" section (docs/DEEPSPEED.md; config/KEYS.md says what each
// key does here). DeepSpeed's code defaults.
struct ActivationCheckpointOptions {
  bool partition_activations = false;            // needs a model-parallel group: no effect
  bool contiguous_memory_optimization = false;   // needs partition_activations: no effect
  std::optional<int64_t> number_checkpoints;     // sizes the contiguous buffers: no effect
  bool synchronize_checkpoint_boundary = false;  // CUDA: synchronizes at each checkpoint
  bool cpu_checkpointing = false;  // the saved inputs of CUDA regions kept on the CPU
  bool profile = false;            // time the recomputes (wall_clock_breakdown's "recompute")
};

// ZeRO++ (zero/zeropp.h, Note [ZeRO++]): DeepSpeed's zero_hpz_partition_size,
// zero_quantized_weights, zero_quantized_nontrainable_weights and zero_quantized_gradients.
struct ZeroPPOptions {
  int64_t hpz_partition_size = 1;  // ranks per secondary partition group; 1: no hpZ
  bool quantized_weights = false;
  // The frozen parameters' partitions in int8 (Note [Quantized frozen partitions] in
  // zero/stage3_layout.cpp).
  bool quantized_nontrainable_weights = false;
  bool quantized_gradients = false;

  bool hpz() const { return hpz_partition_size > 1; }
  bool any() const { return hpz() || quantized_weights || quantized_gradients; }
};

struct ZeroOptions {
  int stage = 0;
  bool contiguous_gradients = true;
  bool reduce_scatter = true;
  int64_t reduce_bucket_size = 500000000;  // elements
  bool use_multi_rank_bucket_allreduce = true;
  bool allgather_partitions = true;
  int64_t allgather_bucket_size = 500000000;  // elements
  std::optional<bool> overlap_comm;           // unset: true iff stage == 3
  bool load_from_fp32_weights = true;
  OffloadParamOptions offload_param;
  OffloadOptimizerOptions offload_optimizer;
  int64_t sub_group_size = 1000000000;
  int64_t prefetch_bucket_size = 50000000;       // stage3_prefetch_bucket_size
  int64_t param_persistence_threshold = 100000;  // stage3_param_persistence_threshold
  int64_t model_persistence_threshold = std::numeric_limits<int64_t>::max();
  int64_t max_live_parameters = 1000000000;  // stage3_max_live_parameters
  int64_t max_reuse_distance = 1000000000;   // stage3_max_reuse_distance
  bool gather_16bit_weights_on_model_save = false;
  bool ignore_unused_parameters = true;
  bool round_robin_gradients = false;
  ZeroPPOptions zeropp;

  bool effective_overlap_comm() const { return overlap_comm.value_or(stage == 3); }
  bool offload_optimizer_enabled() const {
    return offload_optimizer.device != OffloadDevice::kNone;
  }
  bool offload_param_enabled() const { return offload_param.device != OffloadDevice::kNone; }
};

// How gradients travel and accumulate: the config's effective communication_data_type and
// data_types.grad_accum_dtype, prescale_gradients and gradient_predivide_factor. With ZeroOptions,
// everything the ZeRO components read from a config (config/ produces both).
struct GradientOptions {
  DType comm_dtype = DType::kFloat32;
  DType accum_dtype = DType::kFloat32;
  bool prescale = false;          // divide by the world size before reducing
  double predivide_factor = 1.0;  // gradient_predivide_factor
};

// Which model states are partitioned. The ZeRO stage is data: components are composed from
// this policy instead of branching on the stage number (DESIGN.md).
struct StagePolicy {
  bool shard_optimizer = false;  // stage >= 1
  bool shard_grads = false;      // stage >= 2
  bool shard_params = false;     // stage == 3

  static StagePolicy from_stage(int stage) {
    return StagePolicy{stage >= 1, stage >= 2, stage >= 3};
  }
};

}  // namespace zrt::zero
