// The optimizer seam between the ZeRO engine and the update rules (FusedAdam, SGD): parameter
// groups of fp32 master tensors with their gradients and optional low-precision copies, per-group
// hyper-parameters the schedulers adjust, step counts, and the optimizer state as plain structs
// laid out like a torch optimizer state_dict ("state" by param index, "param_groups").
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "optim/options.h"

namespace zrt::optim {

// Note [Swapped params]:
// A param whose fp32 values live outside memory (NVMe offload: optim/swap_space.h) is a meta
// tensor: numel and dtype, no storage. Only an optimizer that knows where the values are
// (SwappedAdam) accepts one; its grad and param_copy are CPU tensors, and its param_copy may be
// fp32 (the partition refreshed from the updated masters). Its param_copy may also be a meta
// tensor, when the partition is on disk too (offload_param "nvme"): the updated copy of each
// sub-group then goes to SwapSpace::write_param_copy.
//
// One tensor the optimizer updates. With ZeRO this is a flat fp32 partition; one per group is the
// common case. `param` is updated in place. `grad` (same numel, fp32/bf16/fp16, same device) is
// read by step(); an undefined grad skips the parameter that step, as torch does. `param_copy`
// (optional, bf16 or fp16, same numel and device) receives the updated values rounded to nearest
// even in the same pass (FusedAdam) or right after (SGD), e.g. the model's bf16 weights.
// All contiguous; shapes may differ as long as the numels agree.
struct OptimParam {
  at::Tensor param;
  at::Tensor grad;
  at::Tensor param_copy;
};

// A group as the engine hands it to make_optimizer: the spec's hyper-parameters apply, except
// for the ones given here (HF-style groups without weight decay, per-group lrs).
struct ParamGroup {
  std::vector<OptimParam> params;
  std::optional<double> lr;
  std::optional<double> weight_decay;
};

// The per-parameter state, torch's state_dict()["state"][i].
struct ParamState {
  int64_t step = 0;            // the group's step count (Adam's t; SGD: informational only)
  at::Tensor exp_avg;          // Adam: m, fp32, param's shape
  at::Tensor exp_avg_sq;       // Adam: v
  at::Tensor momentum_buffer;  // SGD with momentum
};

// torch's state_dict()["param_groups"][g]: the hyper-parameters and the group's param indices.
// Indices number all params consecutively, group 0 first (torch's packing).
struct ParamGroupState {
  std::vector<int64_t> params;
  AdamOptions adam;  // FusedAdam groups: lr, betas, eps, weight_decay, bias_correction, adam_w_mode
  SgdOptions sgd;    // SGD groups: lr, momentum, dampening, weight_decay, nesterov
};

// Note [Optimizer state]:
// state_dict() returns tensors that alias the optimizer's live state, like torch; clone them to
// keep a snapshot. load_state_dict() validates everything first (optimizer name, group and
// param counts, every state tensor's numel and dtype) and throws zrt::CheckpointError naming the
// group and param, leaving the optimizer untouched; then it copies the values into the
// optimizer's own fp32 buffers (any floating dtype is accepted and converted) and restores the
// groups' hyper-parameters. A param absent from "state" has not been stepped yet. A group's step
// count becomes the step of its last param with state (DeepSpeed's FusedAdam increments only
// that one, spec §6.1).
struct OptimizerState {
  std::string optimizer;  // "FusedAdam" or "SGD"
  std::map<int64_t, ParamState> state;
  std::vector<ParamGroupState> param_groups;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // "FusedAdam" or "SGD".
  virtual const char* name() const = 0;

  // One update of every group. Every gradient is multiplied by grad_scale first (Note
  // [grad_scale] in kernels/adam_math.h: the engine passes clip_coef / loss_scale). Each group
  // with params increments its step count once, even if some grads are undefined.
  virtual void step(double grad_scale = 1.0) = 0;

  size_t num_groups() const { return groups_.size(); }
  size_t num_params(size_t group) const;
  const OptimParam& param(size_t group, size_t index) const;
  // Rebinds a gradient or copy tensor, validated like at construction (undefined is allowed).
  void set_grad(size_t group, size_t index, at::Tensor grad);
  void set_param_copy(size_t group, size_t index, at::Tensor copy);

  virtual double lr(size_t group) const = 0;
  virtual void set_lr(size_t group, double lr) = 0;
  virtual double weight_decay(size_t group) const = 0;
  virtual void set_weight_decay(size_t group, double weight_decay) = 0;
  // Adam's betas; OneCycle cycles them. Optimizers without betas (SGD) return false and throw
  // from set_betas, which makes LRScheduler skip momentum cycling as DeepSpeed does.
  virtual bool has_betas() const { return false; }
  virtual void set_betas(size_t group, double beta1, double beta2);
  // Steps taken by the group (FusedAdam: the t of its last step).
  virtual int64_t step_count(size_t group) const = 0;

  virtual OptimizerState state_dict() const = 0;
  virtual void load_state_dict(const OptimizerState& state) = 0;

 protected:
  // Validates every tensor (Adam: fp32 params only) and that no tensor is listed twice.
  Optimizer(std::vector<std::vector<OptimParam>> groups, bool fp32_params_only);
  void check_group(size_t group) const;
  // The global index of params_[group][0] (torch's numbering).
  int64_t first_index(size_t group) const;
  // Shared part of load_state_dict: name, group and param counts; returns, per group and param,
  // the saved state (or nullptr). Throws CheckpointError.
  std::vector<std::vector<const ParamState*>> match_state(const OptimizerState& state) const;

  std::vector<std::vector<OptimParam>> groups_;
  bool fp32_params_only_;
};

class SwapSpace;

// Builds the optimizer the spec names: kAdam / kAdamW → FusedAdam (adam_w_mode forced on for
// kAdamW, as DeepSpeed does: effective AdamW = type is AdamW or adam_w_mode), kSgd → SGD. With a
// swap space (NVMe offload), kAdam / kAdamW → SwappedAdam over it and kSgd a ConfigError.
// Throws zrt::Error for invalid hyper-parameters or tensors.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec, std::vector<ParamGroup> groups,
                                          std::shared_ptr<SwapSpace> swap = nullptr);

}  // namespace zrt::optim
