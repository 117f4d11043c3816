// DeepSpeed's ZeRO-path dynamic loss scaler and the static scaler (see loss_scaler.h).
#include "optim/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/error.h"
#include "core/logging.h"

namespace zrt::optim {
namespace {

// Python's int(x) of a float, printed in full (the scale has no upper bound).
std::string as_int(double x) {
  char buffer[400];
  std::snprintf(buffer, sizeof(buffer), "%.0f", std::trunc(x));
  return buffer;
}

bool positive_finite(double x) { return std::isfinite(x) && x > 0.0; }

const Json& field(const Json& state, const char* key) {
  ZRT_CHECK_AS(CheckpointError, state.contains(key), "loss scaler state: missing '", key, "'");
  return state.at(key);
}

double read_number(const Json& state, const char* key) {
  const Json& v = field(state, key);
  ZRT_CHECK_AS(CheckpointError, v.is_number(), "loss scaler state: '", key,
               "' must be a number, got ", v.dump());
  return v.get<double>();
}

int64_t read_int(const Json& state, const char* key, int64_t minimum) {
  const Json& v = field(state, key);
  ZRT_CHECK_AS(CheckpointError, v.is_number_integer(), "loss scaler state: '", key,
               "' must be an integer, got ", v.dump());
  const int64_t out = v.get<int64_t>();
  ZRT_CHECK_AS(CheckpointError, out >= minimum, "loss scaler state: '", key,
               "' must be >= ", minimum, ", got ", out);
  return out;
}

bool read_bool(const Json& state, const char* key) {
  const Json& v = field(state, key);
  ZRT_CHECK_AS(CheckpointError, v.is_boolean(), "loss scaler state: '", key,
               "' must be a bool, got ", v.dump());
  return v.get<bool>();
}

}  // namespace

LossScaler::LossScaler(const LossScaleOptions& options) : dynamic_(options.dynamic) {
  if (!dynamic_) {
    ZRT_CHECK_AS(ConfigError, positive_finite(options.static_scale),
                 "fp16.loss_scale must be a positive number, got ", options.static_scale);
    cur_scale_ = options.static_scale;
    return;
  }
  ZRT_CHECK_AS(
      ConfigError, positive_finite(options.initial_scale),
      "the initial loss scale (2^initial_scale_power) must be a positive finite number, got ",
      options.initial_scale);
  ZRT_CHECK_AS(ConfigError, options.scale_window >= 1, "fp16.loss_scale_window must be >= 1, got ",
               options.scale_window);
  ZRT_CHECK_AS(ConfigError, options.hysteresis >= 1, "fp16.hysteresis must be >= 1, got ",
               options.hysteresis);
  ZRT_CHECK_AS(ConfigError, std::isfinite(options.min_scale) && options.min_scale >= 0.0,
               "fp16.min_loss_scale must be >= 0, got ", options.min_scale);
  cur_scale_ = options.initial_scale;
  scale_window_ = options.scale_window;
  min_scale_ = options.min_scale;
  delayed_shift_ = options.hysteresis;
  cur_hysteresis_ = options.hysteresis;
  consecutive_hysteresis_ = options.consecutive_hysteresis;
  raise_error_at_min_scale_ = options.raise_error_at_min_scale;
}

void LossScaler::update_scale(bool overflow) {
  if (!dynamic_) return;
  if (overflow) {
    if (delayed_shift_ == 1 || cur_hysteresis_ == 1) {
      if (cur_scale_ == min_scale_ && raise_error_at_min_scale_) {
        throw Error(kMinLossScaleMessage);
      }
      const double next_scale = std::max(cur_scale_ / scale_factor_, min_scale_);
      ZRT_LOG_INFO("[ZeroRT] OVERFLOW! Rank ", log_rank(),
                   " Skipping step. Attempted loss scale: ", as_int(cur_scale_), ", reducing to ",
                   as_int(next_scale));
      cur_scale_ = next_scale;
    } else {
      ZRT_LOG_INFO("[ZeroRT] OVERFLOW! Rank ", log_rank(),
                   " Skipping step. Attempted loss scale: ", as_int(cur_scale_),
                   ", but hysteresis is ", cur_hysteresis_, ". Reducing hysteresis to ",
                   cur_hysteresis_ - 1);
      cur_hysteresis_ -= 1;
    }
    last_overflow_iter_ = cur_iter_;
  } else {
    if (consecutive_hysteresis_) {
      // DeepSpeed prints this on every clean step; at debug level here.
      ZRT_LOG_DEBUG("Consecutive hysteresis is enabled. Restoring hysteresis to ", delayed_shift_);
      cur_hysteresis_ = delayed_shift_;
    }
    // Note [Dynamic loss scale]: the clean updates since the last overflow, less one.
    const int64_t stable = cur_iter_ - last_overflow_iter_ - 1;
    if (stable > 0 && stable % scale_window_ == 0) {
      if (!consecutive_hysteresis_) cur_hysteresis_ = delayed_shift_;
      cur_scale_ *= scale_factor_;
    }
  }
  cur_iter_ += 1;
}

Json LossScaler::state_dict() const {
  Json state = Json::object();
  state["cur_scale"] = cur_scale_;
  if (!dynamic_) {
    state["dynamic"] = false;
    return state;
  }
  state["cur_iter"] = cur_iter_;
  state["last_overflow_iter"] = last_overflow_iter_;
  state["scale_factor"] = scale_factor_;
  state["scale_window"] = scale_window_;
  state["min_scale"] = min_scale_;
  state["delayed_shift"] = delayed_shift_;
  state["cur_hysteresis"] = cur_hysteresis_;
  state["consecutive_hysteresis"] = consecutive_hysteresis_;
  state["raise_error_at_min_scale"] = raise_error_at_min_scale_;
  state["dynamic"] = true;
  return state;
}

void LossScaler::load_state_dict(const Json& state) {
  ZRT_CHECK_AS(CheckpointError, state.is_object(), "loss scaler state must be a dict, got ",
               state.dump());
  LossScaler loaded;  // filled completely below, then swapped in
  loaded.dynamic_ = read_bool(state, "dynamic");
  loaded.cur_scale_ = read_number(state, "cur_scale");
  ZRT_CHECK_AS(CheckpointError, positive_finite(loaded.cur_scale_),
               "loss scaler state: 'cur_scale' must be a positive number, got ", loaded.cur_scale_);
  if (loaded.dynamic_) {
    loaded.cur_iter_ = read_int(state, "cur_iter", 0);
    loaded.last_overflow_iter_ = read_int(state, "last_overflow_iter", -1);
    ZRT_CHECK_AS(CheckpointError, loaded.last_overflow_iter_ < loaded.cur_iter_,
                 "loss scaler state: last_overflow_iter (", loaded.last_overflow_iter_,
                 ") must be < cur_iter (", loaded.cur_iter_, ")");
    loaded.scale_factor_ = read_number(state, "scale_factor");
    ZRT_CHECK_AS(CheckpointError, positive_finite(loaded.scale_factor_),
                 "loss scaler state: 'scale_factor' must be a positive number, got ",
                 loaded.scale_factor_);
    loaded.scale_window_ = read_int(state, "scale_window", 1);
    loaded.min_scale_ = read_number(state, "min_scale");
    ZRT_CHECK_AS(CheckpointError, std::isfinite(loaded.min_scale_) && loaded.min_scale_ >= 0.0,
                 "loss scaler state: 'min_scale' must be >= 0, got ", loaded.min_scale_);
    loaded.delayed_shift_ = read_int(state, "delayed_shift", 1);
    loaded.cur_hysteresis_ = read_int(state, "cur_hysteresis", 1);
    ZRT_CHECK_AS(CheckpointError, loaded.cur_hysteresis_ <= loaded.delayed_shift_,
                 "loss scaler state: cur_hysteresis (", loaded.cur_hysteresis_,
                 ") must be <= delayed_shift (", loaded.delayed_shift_, ")");
    loaded.consecutive_hysteresis_ = read_bool(state, "consecutive_hysteresis");
    loaded.raise_error_at_min_scale_ = read_bool(state, "raise_error_at_min_scale");
  }
  *this = loaded;
}

}  // namespace zrt::optim
