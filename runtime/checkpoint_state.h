// Conversions between the engine's state and the values of DeepSpeed-layout checkpoint files
// (checkpoint/FORMAT.md, "Engine keys"): the torch-layout optimizer state dict, and the
// reassembly of whole per-parameter tensors (fp32 weights, Adam moments) from the partitions of
// any ZeRO stage and world size — the basis of loading at another world size or stage. The
// partition arithmetic itself is checkpoint/reshard.h's; this file knows which keys hold what.
// Pure functions of values; the engine decides what to read and where the results go.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "checkpoint/reshard.h"
#include "checkpoint/value.h"
#include "checkpoint/value_view.h"
#include "optim/optimizer.h"

namespace zrt::runtime {

// torch's optimizer.state_dict() layout: {"state": {i: {...}}, "param_groups": [...]}, plus the
// ZeroRT key "zrt_optimizer" ("FusedAdam" or "SGD"). Steps are Python ints.
ckpt::Value optimizer_state_to_value(const optim::OptimizerState& state);
optim::OptimizerState optimizer_state_from_value(const ckpt::ValueView& value);

// One parameter's whole state, independent of partitioning.
struct FullParamState {
  at::Tensor fp32;     // the fp32 master weights, parameter shape
  at::Tensor exp_avg;  // Adam moments (undefined for SGD or before the first step)
  at::Tensor exp_avg_sq;
  at::Tensor momentum;  // SGD momentum buffer
};

// Everything an optimizer needs, keyed by parameter name, with the saved groups.
struct FullState {
  std::map<std::string, FullParamState> params;
  std::vector<std::vector<std::string>> group_names;  // parameter names of each saved group
  std::vector<optim::ParamGroupState> group_hyper;    // saved hyper-parameters per group
  std::vector<int64_t> group_steps;                   // saved step count per group
  std::string optimizer;                              // "FusedAdam" / "SGD"
  ckpt::Value loss_scaler;                            // the saved loss-scaler dict (or None)
};

// Per saved group, the parameter names and shapes in flattening order (model states
// "param_shapes").
using ParamShapes = std::vector<ckpt::NamedShapes>;
ParamShapes read_param_shapes(const ckpt::ValueView& model_states);

// Reassembles a FullState from a checkpoint written at `world_size` with `zero_stage`:
//   stage 0    `stage0_optimizer`: model states["optimizer"] (fp32_groups_flat + base state);
//   stages 1/2 `optim_files[r]`: single_partition_of_fp32_groups (unpadded) and the padded
//              moments of rank r, concatenated in rank order;
//   stage 3    `optim_files[r]`: fp32_flat_groups and moments, each parameter's pn-sized pieces
//              gathered from every rank.
// Throws CheckpointError naming `context` when sizes do not add up.
FullState reassemble_full_state(int zero_stage, int world_size, const ParamShapes& shapes,
                                const std::vector<ckpt::Value>& optim_files,
                                const ckpt::Value& stage0_optimizer, const std::string& context);

}  // namespace zrt::runtime
