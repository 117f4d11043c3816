// Options of the optimizers and the loss scaler (leaf header: includes only core/).
// Defaults are DeepSpeed's code defaults (docs/DEEPSPEED.md §1.4, §1.7, §6).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

namespace zrt::optim {

// FusedAdam / DeepSpeedCPUAdam hyper-parameters. "Adam" in a DeepSpeed config means AdamW
// unless adam_w_mode is false (spec §1.7).
struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool bias_correction = true;
  bool adam_w_mode = true;  // true: decoupled decay (AdamW); false: L2 added to the gradient
  bool torch_adam = false;  // DeepSpeed's switch to torch.optim.Adam[W]; same math here
};

// torch.optim.SGD hyper-parameters (accepted with zero_allow_untested_optimizer).
struct SgdOptions {
  double lr = 1e-3;  // torch requires lr; DeepSpeed configs always give it
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

enum class OptimizerKind { kAdam, kAdamW, kSgd };

// The resolved "optimizer" section.
struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::kAdamW;
  std::string type_name = "AdamW";  // as written in the config
  AdamOptions adam;                 // kind kAdam / kAdamW
  SgdOptions sgd;                   // kind kSgd
};

// Dynamic/static loss scaling (fp16). The member defaults are those of DeepSpeed's
// DynamicLossScaler constructor; a config always gets the fp16 section's values over DeepSpeed
// 0.19's JSON defaults (2^16, hysteresis 2), which the config resolver fills.
struct LossScaleOptions {
  bool dynamic = true;
  double static_scale = 1.0;            // used when !dynamic (fp16.loss_scale > 0)
  // DeepSpeed 0.19.8's fp16 section defaults (docs/DEEPSPEED.md §1.4.1).
  double initial_scale = 65536.0;  // 2^16
  int64_t scale_window = 1000;
  int64_t hysteresis = 2;  // DeepSpeed's delayed_shift
  bool consecutive_hysteresis = false;
  double min_scale = 1.0;
  bool raise_error_at_min_scale = true;
};

}  // namespace zrt::optim
