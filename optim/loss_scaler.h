// The fp16 loss scaler of DeepSpeed's ZeRO path (DynamicLossScaler, docs/DEEPSPEED.md §1.4.1) and
// the static scaler, as a pure state machine over one overflow flag per optimizer step, plus its
// state dict. It does not detect overflow, scale losses or unscale gradients (the engine and
// ZeRO do), and it does not implement the different rule of DeepSpeed's non-ZeRO FP16 wrappers
// (§1.4.2).
#pragma once

#include <cstdint>

#include "core/json.h"
#include "optim/options.h"

namespace zrt::optim {

// DeepSpeed's scale_factor (not configurable from JSON).
inline constexpr double kLossScaleFactor = 2.0;

// The exact text of the exception raised at the minimum scale.
inline constexpr const char* kMinLossScaleMessage =
    "Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.";

// Note [Dynamic loss scale]:
// update_scale(overflow) runs once per optimizer step, skipped or not, on every rank with the
// same (all-reduced) flag:
//   overflow: when the hysteresis is used up (delayed_shift == 1 or cur_hysteresis == 1) the
//     scale halves, floored at min_scale (zrt::Error(kMinLossScaleMessage) if it is already at
//     min_scale and raise_error_at_min_scale); otherwise cur_hysteresis -= 1. Either way
//     last_overflow_iter = cur_iter and rank 0 logs an "OVERFLOW! ... Skipping step" line.
//   no overflow: consecutive_hysteresis refills cur_hysteresis to delayed_shift at once; when
//     stable = (cur_iter - last_overflow_iter) - 1 is a positive multiple of scale_window the
//     scale doubles (no upper bound) and, without consecutive_hysteresis, the hysteresis is
//     refilled. The window is measured from the last overflow; growth does not restart it.
//   cur_iter += 1 in both cases.
// With no overflow ever, the first doubling happens at the (scale_window + 1)-th update
// (DeepSpeed 0.19.8; 0.16 doubled one update earlier).
//
// Not thread-safe.
class LossScaler {
 public:
  // Dynamic when options.dynamic (initial_scale, scale_window, hysteresis as delayed_shift, ...),
  // else static at options.static_scale. Throws ConfigError for scales <= 0 or non-finite,
  // scale_window < 1, hysteresis < 1 (DeepSpeed would never lower the scale) or
  // min_scale < 0.
  explicit LossScaler(const LossScaleOptions& options = {});

  // See Note [Dynamic loss scale]. A static scaler ignores the call.
  void update_scale(bool overflow);

  double cur_scale() const { return cur_scale_; }
  double loss_scale() const { return cur_scale_; }
  bool dynamic() const { return dynamic_; }
  int64_t cur_hysteresis() const { return cur_hysteresis_; }
  int64_t cur_iter() const { return cur_iter_; }
  int64_t last_overflow_iter() const { return last_overflow_iter_; }
  int64_t scale_window() const { return scale_window_; }
  double min_scale() const { return min_scale_; }
  int64_t delayed_shift() const { return delayed_shift_; }
  bool consecutive_hysteresis() const { return consecutive_hysteresis_; }

  // The attributes DeepSpeed pickles with its scaler object. Dynamic: cur_scale, cur_iter,
  // last_overflow_iter, scale_factor, scale_window, min_scale, delayed_shift, cur_hysteresis,
  // consecutive_hysteresis, raise_error_at_min_scale, dynamic (true). Static: cur_scale,
  // dynamic (false).
  Json state_dict() const;
  // Restores a state_dict() (either kind: like DeepSpeed, which replaces its scaler object with
  // the checkpoint's, the saved settings win over the configured ones). Throws CheckpointError
  // for missing keys, wrong types or impossible values; leaves the scaler unchanged then.
  void load_state_dict(const Json& state);

 private:
  bool dynamic_ = true;
  double cur_scale_ = 1.0;
  int64_t cur_iter_ = 0;
  int64_t last_overflow_iter_ = -1;
  double scale_factor_ = kLossScaleFactor;
  int64_t scale_window_ = 1000;
  double min_scale_ = 1.0;
  int64_t delayed_shift_ = 1;
  int64_t cur_hysteresis_ = 1;
  bool consecutive_hysteresis_ = false;
  bool raise_error_at_min_scale_ = true;
};

}  // namespace zrt::optim
