// The DeepSpeed checkpoint files of ZeRO stages 0-3 as types (Note [DeepSpeed ZeRO files]): what
// the keys of a *_model_states.pt and a *_optim_states.pt hold, read from a file's value and
// written into one. The one home of those keys: the engine's save and load, consolidation
// (consolidate.h), ranged reads of a folder (zero_folder.h), universal conversion and
// `zrt-ckpt verify` all go through these types; the partition arithmetic is reshard.h's and the
// file names are layout.h's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "checkpoint/reshard.h"
#include "checkpoint/value.h"
#include "checkpoint/value_view.h"

namespace zrt::ckpt {

// Note [DeepSpeed ZeRO files]
// A tag folder holds the model states (one "mp_rank_00_model_states.pt" for stages 0-2, one
// "zero_pp_rank_{r}_mp_rank_00_model_states.pt" per rank at stage 3) and, for stages 1-3, one
// "[bf16_]zero_pp_rank_{r}_mp_rank_00_optim_states.pt" per rank (FORMAT.md "Engine keys").
// The stage changes only these keys of the optimizer states' "optimizer_state_dict":
//              fp32 partitions (per group)        base optimizer        partition_count
//   stages 1/2 single_partition_of_fp32_groups   base_optimizer_state  [W per group]
//              (lean: padding dropped; plus group_paddings and param_slice_mappings)
//   stage 3    fp32_flat_groups (padded)          optimizer_state_dict  W
// and the partition layout (Note [Partition layouts]: kFlat for stages 0-2, kPerParam for 3).
// The base optimizer state is torch's optimizer.state_dict() over one flat tensor per group
// (moments padded like the partition); "loss_scaler" is DeepSpeed's object (ds_objects.h).
// Stage 0 keeps its optimizer inside the model states (Note [Stage 0 layouts],
// runtime/checkpoint_state.h).

PartitionLayout ds_partition_layout(int zero_stage);

// The ZeRO stage recorded in an optim-states file's value: an int, or DeepSpeed's pickled
// ZeroStageEnum (read in tolerant mode as ZeroStageEnum(2) or getattr(ZeroStageEnum,
// 'gradients')).
int zero_stage_of(const Value& optim_file, const std::string& context);

// One rank's *_optim_states.pt of stages 1-3.
struct DsOptimStatesFile {
  int zero_stage = 0;
  int world_size = 0;            // partition_count
  std::vector<at::Tensor> fp32;  // per group, this rank's fp32 partition as saved (1-D)
  Value base;  // the base optimizer's torch-layout state dict (None in files cut down to fp32)
  Value loss_scaler;             // as saved (None when absent)
  std::vector<int64_t> group_paddings;  // stages 1/2: per group, this rank's padding (as saved)
  bool dynamic_loss_scale = false;
  double clip_grad = 0.0;

  // The file's value (tensors as they are there: real, or on the meta device for a PtIndex).
  // CheckpointError naming `context` when a key is missing or of the wrong kind, or the stage is
  // not 1-3.
  static DsOptimStatesFile read(const Value& file, const std::string& context);

  // This rank's file from its padded fp32 master partitions (`masters[g]`, the layout's partition
  // of `groups[g]` over `world_size` ranks): stages 1/2 save them lean, with the paddings and the
  // fragment addresses DeepSpeed writes (`fp32` and `group_paddings` are not used). `ds_config` and `ds_version` go into the file as
  // DeepSpeed's engine puts them.
  Value to_value(int rank, const std::vector<NamedShapes>& groups,
                 const std::vector<at::Tensor>& masters, const Value& ds_config,
                 const std::string& ds_version) const;

  // `base` with its key path in errors ("<context>: optimizer_state_dict.base_optimizer_state...").
  ValueView base_view(const std::string& context) const;
  // The base optimizer's state entry of group g (nullptr before the first step).
  const Value* state_of(size_t group) const;
  // Group g's `state` partition ("fp32", or a moment: "exp_avg", "exp_avg_sq",
  // "momentum_buffer"); CheckpointError naming `context` when it is missing.
  at::Tensor partition(size_t group, const std::string& state, const std::string& context) const;
};

// What the model states hold besides the module's tensors and the counters.
struct DsModelStatesFile {
  std::vector<std::string> buffer_names;
  std::vector<NamedShapes> param_shapes;  // per group (stage 3: per sub-group)
  bool inferred_shapes = false;  // no param_shapes (DeepSpeed's stage 0): the module's tensors
  NamedShapes frozen_shapes;
  Value frozen_fragments;  // name -> whole (stages 0-2) or this rank's fragment (3); None if absent
  std::vector<std::pair<std::string, std::string>> shared;  // alias -> owner

  // CheckpointError naming `context` for a malformed entry.
  static DsModelStatesFile read(const Value& file, const std::string& context);
};

// The model states' "param_shapes": per group, the parameter names and shapes in flattening order.
std::vector<NamedShapes> param_shapes_of(const ValueView& model_states);

}  // namespace zrt::ckpt
