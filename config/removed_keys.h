// The keys DeepSpeed 0.19 removed: the presence of one alone is an error with DeepSpeed's own
// message (config/keys.h lists the keys ZeroRT reads).
#pragma once

#include <string_view>
#include <vector>

namespace zrt::config::keys {

// A key DeepSpeed 0.19 removed: its presence alone is an error, with DeepSpeed's message
// (deepspeed/runtime/config.py _REMOVED_TOP_LEVEL_CONFIG_KEYS / _REMOVED_ZERO_CONFIG_KEYS).
struct RemovedKey {
  std::string_view key;
  std::string_view message;
};
inline constexpr std::string_view kRemovedFeaturesIssue =
    "https://github.com/deepspeedai/DeepSpeed/issues/8489";
inline const std::vector<RemovedKey> kRemovedTopLevel = {
    {"nebula",
     "Nebula checkpointing has been removed. A leftover 'nebula' block would be ignored and "
     "checkpoints would silently fall back to local torch.save."},
    {"compression_training",
     "The DeepSpeed compression library has been removed. A leftover 'compression_training' "
     "block would be ignored and the model would train unquantized."},
    {"amp",
     "NVIDIA Apex AMP integration has been removed. Use DeepSpeed 'fp16', 'bf16', or "
     "'torch_autocast' instead."},
    {"quantize_training", "Mixture-of-Quantization (MoQ) / 'quantize_training' has been removed."},
    {"sparse_gradients",
     "Sparse compression of dense torch.nn.Embedding gradients has been removed. A leftover "
     "'sparse_gradients' flag would be ignored and those gradients would be reduced dense."},
    {"eigenvalue",
     "Eigenvalue-based Mixture-of-Quantization (MoQ) has been removed; the standalone "
     "'eigenvalue' configuration block is no longer supported."},
    {"sparse_attention",
     "DeepSpeed Sparse Attention has been removed; the 'sparse_attention' configuration block is "
     "no longer supported."},
    {"elasticity",
     "Elastic training has been removed; the 'elasticity' configuration block is no longer "
     "supported. Set train_batch_size / train_micro_batch_size_per_gpu / "
     "gradient_accumulation_steps directly."},
    {"graph_harvesting",
     "Graph harvesting has been removed; the 'graph_harvesting' configuration option is no "
     "longer supported."},
    {"curriculum_learning",
     "Legacy top-level 'curriculum_learning' has been removed. Use "
     "'data_efficiency.data_sampling.curriculum_learning' instead."},
    {"progressive_layer_drop",
     "Progressive Layer Dropping has been removed; the 'progressive_layer_drop' configuration "
     "block is no longer supported."},
};
inline const std::vector<RemovedKey> kRemovedZero = {
    {"mics_shard_size",
     "MiCS ZeRO-3 sharding has been removed; 'zero_optimization.mics_shard_size' is no longer "
     "supported."},
    {"mics_hierarchical_params_gather",
     "MiCS ZeRO-3 sharding has been removed; "
     "'zero_optimization.mics_hierarchical_params_gather' is no longer supported."},
    {"zeropp_loco_param",
     "LoCo-Zero++ has been removed; 'zero_optimization.zeropp_loco_param' is no longer "
     "supported. Remove this key to use standard ZeRO++ quantized gradients without LoCo error "
     "feedback."},
};

}  // namespace zrt::config::keys
