// Consolidation of a ZeRO checkpoint into one fp32 state dict: DeepSpeed's zero_to_fp32
// (docs/DEEPSPEED.md §4.6) over a ZeroFolder (zero_folder.h: the files typed by ds_files.h, read
// by ranges), from a tag folder or from file values already in memory. Owns only what
// zero_to_fp32 adds to the folder's whole-parameter readers: the result's order, frozen and
// shared parameters, buffers; and stage 0, whose weights are all in the model states.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "checkpoint/ds_files.h"
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
// (`shared_params`: alias -> owner).
// Throws CheckpointError for files that do not fit together: DeepSpeed's "Expected N of
// '*_optim_states.pt' ..." and "... is not a zero checkpoint"; where zero_to_fp32 only compares
// the total ("consumed A numels out of B"), each rank's partition is checked against the size
// param_shapes gives it, naming the file and group.
// Stage 0 (`optim_states` empty, one model-states file): the parameters from the file's fp32
// masters (optimizer.fp32_groups_flat, split in param_shapes order) when it has them, else the
// module's weights as float32; buffers, frozen parameters and aliases as above. DeepSpeed's
// zero_to_fp32 refuses stage 0; its weights are all in that one file, so ZeroRT consolidates it.
NamedTensors consolidate_stage0_fp32(const Value& model_states, const std::string& context,
                                     const ConsolidateOptions& options = {});
NamedTensors consolidate_fp32(const std::vector<Value>& optim_states,
                              const std::vector<Value>& model_states, const std::string& context,
                              const ConsolidateOptions& options = {});

// Reads save_dir/<tag> (tag = the `latest` file when not given) the way zero_to_fp32.py does:
// every *_optim_states.pt and *_model_states.pt in natural order, in tolerant mode so that files
// written by DeepSpeed itself work too; the optimizer files by ranges (memory holds the result,
// not the files).
NamedTensors load_fp32_state_dict(const std::string& save_dir,
                                  const std::optional<std::string>& tag = std::nullopt,
                                  const ConsolidateOptions& options = {});

}  // namespace zrt::ckpt
