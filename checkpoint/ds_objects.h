// The Python objects DeepSpeed pickles into its checkpoints that ZeroRT writes as DeepSpeed does,
// so that DeepSpeed's engine.load_checkpoint takes ZeroRT's files as they are: the loss scaler of
// the optimizer state (`deepspeed.runtime.fp16.loss_scaler.LossScaler` for a static scale,
// `DynamicLossScaler` for fp16's dynamic one), an instance whose attributes are DeepSpeed's.
// The fragment addresses of ZeRO-1/2's param_slice_mappings are DeepSpeed's dataclass too.
// Reading them never runs DeepSpeed: the strict unpickler knows these classes as plain data
// (pt/unpickle_globals.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include <c10/core/ScalarType.h>

#include "checkpoint/value.h"
#include "core/json.h"

namespace zrt::ckpt {

constexpr const char* kDsLossScalerClass = "deepspeed.runtime.fp16.loss_scaler.LossScaler";
constexpr const char* kDsDynamicLossScalerClass =
    "deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler";
// The dataclass locating a parameter's fragment in a ZeRO-1/2 rank's fp32 partition
// (optimizer_state_dict.param_slice_mappings), which DeepSpeed's ds_to_universal reads as
// `.start` / `.numel`.
constexpr const char* kDsFragmentAddressClass = "deepspeed.utils.tensor_fragment.fragment_address";

// fragment_address(numel, start) as DeepSpeed pickles it.
Value ds_fragment_address_value(int64_t numel, int64_t start);
// (numel, start) of a fragment address: DeepSpeed's object or the dict older ZeroRT files hold.
// CheckpointError naming `where` for anything else.
std::pair<int64_t, int64_t> ds_fragment_address(const Value& saved, const std::string& where);

// ZeroRT's loss-scaler state (optim::LossScaler::state_dict: "cur_scale", "dynamic", and for a
// dynamic scaler "cur_iter", "last_overflow_iter", "scale_factor", "scale_window", "min_scale",
// "delayed_shift", "cur_hysteresis", "consecutive_hysteresis", "raise_error_at_min_scale") as the
// object DeepSpeed pickles: its attributes in DeepSpeed's order, a dynamic one's `dtype` the
// `fp16_dtype` its ZeRO optimizer passes (torch.float16). Throws CheckpointError when a key is
// missing.
Value ds_loss_scaler_value(const Json& state, at::ScalarType fp16_dtype = at::kHalf);

// The inverse, for what a checkpoint holds for the loss scaler: DeepSpeed's LossScaler or
// DynamicLossScaler object, the dict of attributes older ZeroRT checkpoints wrote, or the dict of
// FP16_Optimizer's loss-scale fields (below; the other attributes come from `current`). The
// object's `dtype` (a torch dtype) is dropped; anything else is a CheckpointError naming `where`
// and what was found.
Json ds_loss_scaler_state(const Value& saved, const std::string& where, const Json& current = {});

// DeepSpeed's FP16_Optimizer (fp16 without ZeRO) saves no scaler object but its loss-scale fields
// "dynamic_loss_scale", "cur_scale", "cur_iter" and, when dynamic, "last_overflow_iter",
// "scale_factor", "scale_window". The scaler state they give: `current` (the engine's scaler,
// from its config) with those fields set and the hysteresis refilled. CheckpointError naming
// `where` when one is missing or of the wrong kind.
Json ds_fp16_optimizer_scaler_state(const Value& fields, Json current, const std::string& where);

}  // namespace zrt::ckpt
