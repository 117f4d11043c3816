// Engine: a LibTorch model trained with ZeRO. Built by zrt::initialize (runtime/initialize.h);
// per micro-batch the program runs its forward, then engine.backward(loss) and engine.step().
// step() is called every micro-batch and updates only at gradient-accumulation boundaries
// (docs/DEEPSPEED.md §0, §2).
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

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <torch/torch.h>

#include "checkpoint/value.h"
#include "comm/comm.h"
#include "comm/comm_stats.h"
#include "config/resolved.h"
#include "runtime/engine_options.h"

namespace zrt::optim {
class Optimizer;
class LossScaler;
}  // namespace zrt::optim
namespace zrt::sched {
class LRScheduler;
}  // namespace zrt::sched
namespace zrt::ckpt {
class Storage;
}  // namespace zrt::ckpt
namespace zrt::comm {
class CountingComm;
}  // namespace zrt::comm
namespace zrt::zero {
struct NamedParam;
struct CollectedParams;
}  // namespace zrt::zero
namespace zrt::runtime {
class CheckpointAccess;
class ModelStates;
class StepReporter;
}  // namespace zrt::runtime

namespace zrt {


// Whether this LibTorch multiplies fp16 matrices on the CPU (2.x does, 1.13 does not). Without
// it the engine refuses fp16 on CPU parameters with a ConfigError that names bf16 instead.
bool cpu_half_matmul_supported();

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
  // Ends the current accumulation window at the next step(), which then updates, and counts the
  // next window's gradient_accumulation_steps micro-steps from there: HF's Trainer does this at
  // an epoch's last micro-batch (the remainder is a shorter window, never carried across epochs).
  void end_accumulation_window();

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
  // The mean of the last optimizer step's micro-batch losses on this rank (as backward() saw
  // them, in fp32); unset before the first step. The Trainer's logged loss is its mean over ranks.
  std::optional<double> last_step_loss() const { return last_step_loss_; }

  // Wall-clock of the forward of the current micro-batch, measured by the program (the engine
  // does not see the forward); reported with wall_clock_breakdown.
  void record_forward_ms(double ms) { timers_.fwd += ms; }
  // Samples per second over the last optimizer step (0 before the first).
  double samples_per_second() const { return samples_per_second_; }
  // Milliseconds of the last optimizer step, from its first backward to its step().
  double step_ms() const { return step_ms_; }

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
  comm::Comm& comm();
  // Bytes put on the wire by this rank so far, per collective (ring accounting).
  comm::CommStats comm_stats() const;
  void reset_comm_stats();
  // Model-state bytes this rank holds, counted from the tensors.
  runtime::ModelStateBytes model_state_bytes() const;

  // ---- checkpoints (DeepSpeed layout, checkpoint/FORMAT.md; runtime/engine_checkpointer.h) ----
  // Collective: every rank must call it with the same arguments. Writes save_dir/<tag>/ (default
  // tag "global_step{N}") with the atomic commit protocol and, with save_latest, points
  // save_dir/latest at it. `client_state` (a dict) is merged into the model-states file. Returns
  // the tag directory. Throws CheckpointError on every rank if any rank failed; then `latest`
  // still names the previous complete checkpoint.
  std::string save_checkpoint(const std::string& save_dir,
                              const std::optional<std::string>& tag = std::nullopt,
                              const ckpt::Value& client_state = ckpt::Value::dict(),
                              bool save_latest = true);
  // Collective. Loads save_dir/<tag> (default: the tag `latest` names; nullopt with a warning
  // when there is no `latest`, like DeepSpeed). Refuses incomplete or damaged tags. Loads at
  // another world size or ZeRO stage too (every rank then reads every optimizer file).
  std::optional<LoadedCheckpoint> load_checkpoint(
      const std::string& load_dir, const std::optional<std::string>& tag = std::nullopt,
      const LoadCheckpointOptions& options = {});
  // The name every parameter and buffer gets in checkpoints (model states, optimizer files), where
  // the model's names are not the ones another framework's engine uses for the same model — e.g.
  // a LoRA model's, named as PEFT's PeftModel (lora::peft_model_names) so that DeepSpeed resumes
  // it. Loads read either naming. Unset: the model's names.
  void set_checkpoint_names(std::function<std::string(const std::string&)> names) {
    checkpoint_names_ = std::move(names);
  }
  std::string checkpoint_name(const std::string& name) const {
    return checkpoint_names_ ? checkpoint_names_(name) : name;
  }
  bool renames_checkpoints() const { return static_cast<bool>(checkpoint_names_); }
  // Collective. Module weights (and buffers) from one file: a torch.save state dict (.pt/.bin,
  // e.g. what save_16bit_model or `zrt-ckpt to-fp32` writes) or .safetensors, cast to the
  // model's dtype and partitioned as the engine keeps them. With `strict`, a name missing on
  // either side or a shape that differs is a CheckpointError naming it. Counters, optimizer and
  // scheduler are untouched (fine-tuning from weights).
  void load_module_file(const std::string& path, bool strict = true);
  // Collective. Whole low-precision weights (and buffers) written by rank 0 to dir/name — a
  // torch.save state dict, or safetensors when the name ends in ".safetensors". Under ZeRO-3
  // only with stage3_gather_16bit_weights_on_model_save (else logs and returns false).
  bool save_16bit_model(const std::string& dir, const std::string& name = "pytorch_model.bin");
  // Used by GatheredParameters (runtime/gathered_parameters.h); collective.
  void begin_parameter_access();
  void end_parameter_access(std::optional<int> modifier_rank);

  optim::Optimizer* optimizer() { return optimizer_.get(); }
  sched::LRScheduler* lr_scheduler() { return scheduler_.get(); }
  optim::LossScaler& loss_scaler() { return *loss_scaler_; }
  runtime::ModelStates& model_states() { return *states_; }
  // Parameters registered under two names (tied weights): (alias, owner) pairs; the owner is the
  // name the engine partitions and checkpoints.
  const std::vector<std::pair<std::string, std::string>>& tied_parameters() const {
    return aliases_;
  }

 private:
  void build_flat(std::vector<std::vector<zero::NamedParam>> groups);
  void build_stage3(std::vector<std::vector<zero::NamedParam>> groups,
                    const zero::CollectedParams& collected, bool inference);
  // Checkpoint restore (runtime/engine_checkpointer.h reaches these through CheckpointAccess).
  friend class runtime::CheckpointAccess;
  void restore_counters(int64_t global_steps, int64_t global_samples, int64_t skipped_steps);
  void load_lr_scheduler_state(const Json& state);
  void build_optimizer(const EngineOptions& options);
  void apply_schedule();
  void check_and_broadcast_model();
  bool check_overflow();
  double global_norm_of_scaled_grads();
  void finish_boundary_step(bool skipped);
  at::Tensor backward_impl(const at::Tensor& loss);
  void step_impl();
  // memory_breakdown: every rank logs DeepSpeed's see_memory_usage report
  // (runtime/memory_report.h).
  void see_memory_usage(const char* where);
  // dump_state: rank 0 logs the engine's state at start, as DeepSpeed's print_configuration.
  void dump_state() const;

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
  bool restart_window_ = false;    // end_accumulation_window() was called for the next step
  int64_t window_start_ = 0;       // micro_steps_ at which the current accumulation window began
  bool backward_pending_ = false;  // backward() ran since the last step()
  double backward_scale_ = 1.0;    // the loss scale the pending gradients carry
  std::optional<double> global_grad_norm_;
  std::optional<double> last_loss_;
  std::shared_ptr<ckpt::Storage> storage_;
  runtime::StepTimes timers_;
  double step_start_ = -1;  // seconds, at the first backward of the current optimizer step
  double step_ms_ = 0;
  double samples_per_second_ = 0;
  double loss_sum_ = 0;  // micro-step losses of the current optimizer step
  int loss_count_ = 0;
  std::optional<double> last_step_loss_;
  std::unique_ptr<runtime::StepReporter> reporter_;
  std::vector<std::pair<std::string, std::string>> aliases_;  // tied parameters (alias, owner)
  std::function<std::string(const std::string&)> checkpoint_names_;  // set_checkpoint_names
};

}  // namespace zrt
