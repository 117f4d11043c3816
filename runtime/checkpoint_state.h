// Conversions between the engine's state and the values of DeepSpeed-layout checkpoint files
// (checkpoint/FORMAT.md, "Engine keys"): the torch-layout optimizer state dict, and stage 0's
// optimizer layouts (written, and read back into whole per-parameter tensors). The ZeRO files of
// stages 1-3 are checkpoint/ds_files.h's; the partition arithmetic is checkpoint/reshard.h's.
// Pure functions of values; the engine decides what to read and where the results go.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "checkpoint/reshard.h"
#include "checkpoint/value.h"
#include "checkpoint/value_view.h"
#include "core/json.h"
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
  // What the checkpoint holds for the loss scaler (or None): DeepSpeed's LossScaler object, an
  // older ZeroRT dict, or the dict of FP16_Optimizer's loss-scale fields at stage 0 (fp16).
  ckpt::Value loss_scaler;
};

// Per saved group, the parameter names and shapes in flattening order (model states
// "param_shapes").
using ParamShapes = std::vector<ckpt::NamedShapes>;

// Note [Stage 0 layouts]
// Without ZeRO, DeepSpeed keeps the optimizer inside the model states ("optimizer") in the layout
// of the optimizer it wraps, which depends on the model dtype:
//   fp32       the torch optimizer's own state_dict (FusedAdam over the module's parameters):
//              {"state": {k: {"step", "exp_avg", "exp_avg_sq"}}, "param_groups": [...]}, one
//              entry per parameter, k numbering them group by group; no fp32 copy (the module's
//              weights are the masters);
//   bf16/fp16  FP16_Optimizer's: "optimizer_state_dict" (FusedAdam over one flat fp32 group per
//              group, k = the group), "fp32_groups_flat" (those flats), "clip_grad"; fp16 adds
//              its loss-scale fields "dynamic_loss_scale", "cur_scale", "cur_iter" and, when
//              dynamic, "last_overflow_iter", "scale_factor", "scale_window".
// The flats hold exactly the group's parameters (no padding). ZeroRT writes these layouts (for
// fp16 also its full "loss_scaler", which DeepSpeed ignores) and reads them, and the plain
// fp32_groups_flat layout with padded flats that older ZeroRT checkpoints hold at every dtype.

// The model states' "optimizer" entry at stage 0 (Note [Stage 0 layouts]) for `model_dtype`:
// `state` the optimizer's (one flat entry per group), `masters` the padded fp32 flat groups,
// `shapes` the groups' parameters in flattening order, `loss_scaler` the scaler's state
// (optim::LossScaler::state_dict()).
ckpt::Value stage0_optimizer_value(const optim::OptimizerState& state,
                                   const std::vector<at::Tensor>& masters,
                                   const ParamShapes& shapes, at::ScalarType model_dtype,
                                   const Json& loss_scaler, double clip_grad);

// Reassembles a FullState from the model states of a stage-0 checkpoint, whose "optimizer" is one
// of Note [Stage 0 layouts] (and whose "module" holds the fp32 layout's masters). Checkpoints of
// stages 1-3 are read by ranges (checkpoint/zero_folder.h). Throws CheckpointError naming
// `context` when sizes do not add up.
FullState reassemble_stage0_state(const ParamShapes& shapes, const ckpt::Value& model_states,
                                  const std::string& context);

}  // namespace zrt::runtime
