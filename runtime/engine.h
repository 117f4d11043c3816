// Engine: a LibTorch model trained with ZeRO. Built by zrt::initialize (runtime/initialize.h);
// per micro-batch the program runs its forward, then engine.backward(loss) and engine.step().
// step() is called every micro-batch and updates only at gradient-accumulation boundaries
// (spec/deepspeed.md §0, §2).
//
//   auto engine = zrt::initialize(model, "ds_config.json");
//   for (auto& batch : loader) {
//     auto loss = torch::mse_loss(model->forward(batch.x), batch.y);
//     engine->backward(loss);
//     engine->step();
//   }
//
// The engine owns the parameters' storage from construction on: they become views of flat
// buffers (stages 0–2) or of partitions (stage 3). It is not thread-safe; every rank must make
// the same calls in the same order (they are collective where noted).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "comm/counting_comm.h"
#include "config/resolved.h"
#include "runtime/model_states.h"
#include "zero/flat_layout.h"

namespace zrt::optim {
class Optimizer;
class LossScaler;
}  // namespace zrt::optim
namespace zrt::sched {
class LRScheduler;
}  // namespace zrt::sched

namespace zrt {

// Optimizer parameter groups: parameters whose name a rule matches (first match wins) form a
// group with that rule's overrides; the others form the default group. HF's usual choice is
// `no_weight_decay_for({"bias", "LayerNorm.weight"})`.
struct ParamGroupRule {
  std::function<bool(const std::string& name)> match;
  std::optional<double> weight_decay;
  std::optional<double> lr;
};
ParamGroupRule no_weight_decay_for(std::vector<std::string> name_substrings);

struct EngineOptions {
  std::vector<ParamGroupRule> param_groups;
  // Used when the config has no "optimizer" (the HF Trainer creates one; spec §3.5).
  std::optional<optim::OptimizerSpec> client_optimizer;
  // Used when the config has no "scheduler" (HF schedules, spec §3.5).
  std::optional<sched::SchedulerSpec> client_scheduler;
};

class Engine {
 public:
  // Collective. Prefer zrt::initialize. Casts the model to the config's dtype, checks that
  // every rank holds the same architecture, broadcasts parameters and buffers from rank 0 and
  // builds the ZeRO components, optimizer, scheduler and loss scaler.
  Engine(std::shared_ptr<torch::nn::Module> model, config::ResolvedConfig config,
         std::shared_ptr<comm::Comm> comm, EngineOptions options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Collective (gradient reduction). Scales the loss (÷ GAS, × loss scale for fp16), runs
  // autograd and reduces gradients as they are produced. Call once per micro-batch, then step().
  // Returns the loss as given (detached), for logging.
  at::Tensor backward(const at::Tensor& loss);
  // Collective at GA boundaries: overflow check, clipping, optimizer, parameter gather, LR
  // schedule, counters. Between boundaries it only counts the micro-step.
  void step();

  bool is_gradient_accumulation_boundary() const;
  // Overrides the (micro_steps + 1) % GAS rule for the next micro-step (accelerate's way).
  void set_gradient_accumulation_boundary(bool boundary);

  int64_t micro_steps() const { return micro_steps_; }
  int64_t global_steps() const { return global_steps_; }
  int64_t global_samples() const { return global_samples_; }
  int64_t skipped_steps() const { return skipped_steps_; }
  // Current learning rate of each optimizer group.
  std::vector<double> get_lr() const;
  // The fp16 loss scale (1 for bf16/fp32).
  double loss_scale() const;
  // L2 norm of the last step's (unscaled, pre-clip) gradients; -1 if not finite, unset before
  // the first step.
  std::optional<double> global_grad_norm() const { return global_grad_norm_; }
  // The last loss passed to backward().
  std::optional<double> last_loss() const { return last_loss_; }

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return model_->is_training(); }

  // The dtype of the model's parameters (cast inputs with to_model_dtype()).
  at::ScalarType model_dtype() const { return model_dtype_; }
  at::Tensor to_model_dtype(const at::Tensor& t) const;

  const config::ResolvedConfig& config() const { return config_; }
  int64_t train_batch_size() const { return config_.batch.train_batch_size; }
  int64_t train_micro_batch_size_per_gpu() const {
    return config_.batch.train_micro_batch_size_per_gpu;
  }
  int64_t gradient_accumulation_steps() const { return config_.batch.gradient_accumulation_steps; }
  int zero_stage() const { return config_.zero.stage; }

  torch::nn::Module& module() { return *model_; }
  comm::Comm& comm() { return *comm_; }
  // Bytes put on the wire by this rank so far, per collective (ring accounting).
  comm::CommStats comm_stats() const { return comm_->stats(); }
  void reset_comm_stats() { comm_->reset(); }
  // Model-state bytes this rank holds, counted from the tensors.
  runtime::ModelStateBytes model_state_bytes() const;

  // Used by GatheredParameters (runtime/gathered_parameters.h); collective.
  void begin_parameter_access();
  void end_parameter_access(std::optional<int> modifier_rank);

  optim::Optimizer* optimizer() { return optimizer_.get(); }
  sched::LRScheduler* lr_scheduler() { return scheduler_.get(); }
  optim::LossScaler& loss_scaler() { return *loss_scaler_; }
  runtime::ModelStates& model_states() { return *states_; }

 private:
  void build_flat(std::vector<std::vector<zero::NamedParam>> groups);
  void build_stage3(std::vector<std::vector<zero::NamedParam>> groups,
                    const zero::CollectedParams& collected);
  void build_optimizer(const EngineOptions& options);
  void check_and_broadcast_model();
  bool check_overflow();
  double global_norm_of_scaled_grads();
  void finish_boundary_step(bool skipped);
  void print_progress();

  std::shared_ptr<torch::nn::Module> model_;
  config::ResolvedConfig config_;
  std::shared_ptr<comm::CountingComm> comm_;
  at::ScalarType model_dtype_ = at::kFloat;
  std::unique_ptr<runtime::ModelStates> states_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<sched::LRScheduler> scheduler_;
  std::unique_ptr<optim::LossScaler> loss_scaler_;

  int64_t micro_steps_ = 0;
  int64_t global_steps_ = 0;
  int64_t global_samples_ = 0;
  int64_t skipped_steps_ = 0;
  std::optional<bool> boundary_override_;
  bool backward_pending_ = false;  // backward() ran since the last step()
  double backward_scale_ = 1.0;    // the loss scale the pending gradients carry
  std::optional<double> global_grad_norm_;
  std::optional<double> last_loss_;
};

}  // namespace zrt
