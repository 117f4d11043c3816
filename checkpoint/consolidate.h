// Consolidation of a ZeRO checkpoint into one fp32 state dict: DeepSpeed's zero_to_fp32 algorithm
// (spec/deepspeed.md §4.6) over already-read file contents, plus a directory-level helper that
// reads the files itself. Owns only what zero_to_fp32 adds to the partition arithmetic of
// reshard.h (which keys, param_shapes order, its consistency checks, frozen and shared parameters,
// buffers); reading files is pt_file.h's job and loading at another world size the engine's.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "checkpoint/value.h"

namespace zrt::ckpt {

struct ConsolidateOptions {
  bool exclude_frozen_parameters = false;
};

// `optim_states[r]`: the dict of rank r's *_optim_states.pt (files in natural order are rank
// order). `model_states`: the *_model_states.pt dicts: stages 1/2 have one (rank 0's metadata is
// used), stage 3 one per rank in rank order. `context` names the checkpoint in errors.
//
// Result order, as DeepSpeed builds it: buffers (from rank 0's `module`, named in `buffer_names`,
// cast to float32), then frozen parameters (their saved dtype, as DeepSpeed leaves them), then
// trainable parameters in `param_shapes` order (float32), then shared aliases
// (`shared_params`: alias -> owner). Tensors may be views of one merged buffer per group.
// Throws CheckpointError for files that do not fit together (DeepSpeed's messages where it has
// them: "Expected N of '*_optim_states.pt' ...", "consumed A numels out of B - something is
// wrong", "... is not a zero checkpoint").
// Stage 0 (`optim_states` empty, one model-states file): the parameters from the file's fp32
// masters (optimizer.fp32_groups_flat, split in param_shapes order) when it has them, else the
// module's weights as float32; buffers, frozen parameters and aliases as above. DeepSpeed's
// zero_to_fp32 refuses stage 0; its weights are all in that one file, so ZeroRT consolidates it.
NamedTensors consolidate_stage0_fp32(const Value& model_states, const std::string& context,
                                     const ConsolidateOptions& options = {});
NamedTensors consolidate_fp32(const std::vector<Value>& optim_states,
                              const std::vector<Value>& model_states, const std::string& context,
                              const ConsolidateOptions& options = {});

// The ZeRO stage recorded in an optim-states dict: an int, or DeepSpeed's pickled ZeroStageEnum
// (read in tolerant mode as ZeroStageEnum(2) or getattr(ZeroStageEnum, 'gradients')).
int zero_stage_of(const Value& optim_state, const std::string& context);

// Reads save_dir/<tag> (tag = the `latest` file when not given) the way zero_to_fp32.py does:
// every *_optim_states.pt and *_model_states.pt in natural order, in tolerant mode so that files
// written by DeepSpeed itself work too, then consolidate_fp32.
NamedTensors load_fp32_state_dict(const std::string& save_dir,
                                  const std::optional<std::string>& tag = std::nullopt,
                                  const ConsolidateOptions& options = {});

}  // namespace zrt::ckpt
