// Trainer: an HF-Trainer-like loop over TrainingArguments + a DeepSpeed config (docs/DEEPSPEED.md
// §3): epochs or max_steps, per-rank sharding with DistributedSampler semantics, gradient
// accumulation, logging / evaluation / saving every N steps with save_total_limit, resume with
// HF's rules, seeding, and prediction (ZeRO-3 inference when the config is ZeRO-3).
//
// On disk it follows HF: output_dir/checkpoint-{step}/ holds the engine checkpoint
// (global_step{step}/, latest) and trainer_state.json; output_dir/training_curves.svg plots the
// loss and learning rate at the end.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "comm/comm.h"
#include "config/hf_trainer.h"
#include "config/training_args.h"
#include "hf/pretrained.h"
#include "runtime/engine.h"

namespace zrt {

class EventFileWriter;

class DistributedSampler;

// A map-style dataset: example i as (input, target). Micro-batches stack examples along a new
// first dimension.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual std::pair<at::Tensor, at::Tensor> get(int64_t index) const = 0;
};

// The training loss of a micro-batch: typically loss(model->forward(input), target), in fp32.
using LossFn = std::function<at::Tensor(torch::nn::Module& model, const at::Tensor& input,
                                        const at::Tensor& target)>;

struct TrainerOptions {
  std::shared_ptr<comm::Comm> comm;  // default: comm::init_from_env()
  config::ModelDims model_dims;      // for hidden-size "auto" keys
  std::vector<ParamGroupRule> param_groups;
  bool progress_bar = true;  // a live bar on rank 0 when progress_bar_wanted()
  // How training and evaluation batches are drawn: torch's DistributedSampler per rank (DDP's
  // order), or the HF Trainer's (Note [The HF Trainer's batch order] in hf/sampler.h; its
  // evaluation loss then counts each example once, as the Trainer's gather_for_metrics does).
  enum class BatchOrder { kDistributedSampler, kHfTrainer };
  BatchOrder batch_order = BatchOrder::kDistributedSampler;
  // HF's Trainer.save_model(checkpoint-N): what makes each checkpoint-N folder a model folder
  // (config.json, the weights, the tokenizer files), called on every rank (collective) before the
  // engine's checkpoint is written into the same folder. Unset: the folders hold the engine
  // checkpoint and trainer_state.json only. With args.save_only_model only this is written (and,
  // as HF under ZeRO-3 without stage3_gather_16bit_weights_on_model_save, the engine checkpoint,
  // the one place the weights are then).
  std::function<void(Engine& engine, const std::string& dir)> save_model;
  // args.deepspeed already loaded by the caller (e.g. to create `comm` from its "zrt" section);
  // unset: the constructor loads args.deepspeed, or without one uses config_without_deepspeed().
  std::optional<Json> deepspeed_config;
};

// One entry of HF's log_history: a training log (loss, grad_norm, learning_rate), an evaluation
// (eval_loss and `metrics` eval_runtime, ...), or the summary at the end of training (`metrics`
// train_runtime, train_loss, total_flos, ...).
struct LogEntry {
  int64_t step = 0;
  double epoch = 0;
  std::optional<double> loss;
  std::optional<double> learning_rate;
  std::optional<double> eval_loss;
  std::optional<double> grad_norm;
  std::vector<std::pair<std::string, double>> metrics;
};

struct TrainOutput {
  int64_t global_step = 0;
  int64_t steps_this_run =
      0;                     // optimizer steps taken by this train() (after a resume: the new ones)
  double training_loss = 0;  // mean over the optimizer steps of this run (0 when there were none)
  double train_runtime_s = 0;
  double samples_per_second = 0;
  std::vector<LogEntry> log_history;
};

// Trainer::predict's result, as HF's PredictionOutput: on rank 0 the outputs and targets of every
// example in dataset order (padding of the last rank's share dropped); elsewhere empty. Metrics
// (HF's names: predict_loss when a loss is given, predict_runtime, predict_samples,
// predict_samples_per_second, predict_steps_per_second) on every rank.
struct PredictionOutput {
  std::vector<at::Tensor> predictions;
  std::vector<at::Tensor> label_ids;
  std::vector<std::pair<std::string, double>> metrics;
};

using ForwardFn = std::function<at::Tensor(torch::nn::Module&, const at::Tensor&)>;
// The loss of one example's output against its target (a scalar), e.g. cross entropy.
using OutputLossFn = std::function<at::Tensor(const at::Tensor& output, const at::Tensor& target)>;

// The DeepSpeed config of a Trainer without one (HF's Trainer without DeepSpeed): plain data
// parallel (ZeRO stage 0: every rank the whole model and optimizer, gradients averaged) with the
// optimizer and schedule the TrainingArguments name, built as HF builds them (no "optimizer" or
// "scheduler" section), every other value from the arguments ("auto").
Json config_without_deepspeed();

// The forms of module weights Trainer::load_model_weights reads.
enum class WeightsFormat {
  kStateDictFile,     // a .safetensors or torch.save (.pt/.pth/.bin) state dict
  kCheckpoint,        // a folder with `latest`: an HF checkpoint-N folder or a DeepSpeed save_dir,
                      // ZeroRT- or DeepSpeed-written, any stage and world size
  kCheckpointTag,     // a tag folder (global_stepN) holding *_model_states.pt
  kPretrainedFolder,  // a Hugging Face model folder: model.safetensors(.index.json) or
                      // pytorch_model.bin(.index.json)
};
// What `path` holds, looked for in the order above; CheckpointError naming the path and what was
// looked for when it is none of them.
WeightsFormat weights_format_of(const std::string& path);

// Whether progress is drawn as a live bar (carriage-return frames) rather than as progress lines
// on stderr every 10 s: ZRT_PROGRESS=bar or =lines decides (zrt-launch sets lines when its own
// stdout is not a terminal), else whether stdout is a terminal.
bool progress_bar_wanted();

class Trainer {
 public:
  // Collective (builds the engine lazily on train()/evaluate()/predict()).
  Trainer(std::shared_ptr<torch::nn::Module> model, config::TrainingArguments args,
          std::shared_ptr<Dataset> train_dataset, std::shared_ptr<Dataset> eval_dataset,
          LossFn loss_fn, TrainerOptions options = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Collective. Trains to max_steps / num_train_epochs, resuming first when
  // args.resume_from_checkpoint is set ("last" or "true": the newest output_dir/checkpoint-*;
  // the log history and best-model state continue from its trainer_state.json). Logs, evaluates
  // and saves by args' strategies (steps / epoch / best), tracks the best metric, loads the best
  // checkpoint's weights at the end with load_best_model_at_end, and reports to TensorBoard
  // (output_dir/runs/<run_name>) and CSV (output_dir/log_history.csv) by args.report_to.
  TrainOutput train();
  // Collective. Mean loss over the evaluation set (each rank its share, all-reduced).
  double evaluate();
  // Collective. `forward` of every example of `data`, in order, on rank 0 (empty elsewhere).
  // Without an engine yet, builds one for inference: ZeRO-3's parameter-partitioning-only mode
  // when the config is stage 3, else the configured stage run forward-only.
  std::vector<at::Tensor> predict(const Dataset& data, const ForwardFn& forward);
  // The same with targets and HF's predict metrics; `loss` (optional) gives predict_loss, the
  // mean over the examples.
  PredictionOutput predict(const Dataset& data, const ForwardFn& forward, const OutputLossFn& loss);

  // Collective. Loads module weights only (no optimizer, scheduler or counters, as DeepSpeed's
  // load_module_only) from `path` in the given `format`, building the engine first when there is
  // none: for inference (`inference`, as predict() builds it) or for training. A path that does
  // not hold that format is a CheckpointError naming the path and what was looked for;
  // weights_format_of() tells what a path holds.
  // `pretrained`: how a pretrained folder loads (e.g. only the base model's tensors).
  void load_model_weights(const std::string& path, WeightsFormat format, bool inference,
                          const PretrainedLoadOptions& pretrained = {});

  // Rank 0 writes `dir`/trainer_state.json (default: output_dir) as transformers' TrainerState
  // .save_to_json does: every TrainerState field, sorted keys, 2-space indent.
  void save_state(const std::string& dir = "") const;
  // Rank 0 writes output_dir/{split}_results.json and merges the metrics into
  // output_dir/all_results.json (HF's save_metrics); every rank returns.
  void save_metrics(const std::string& split,
                    const std::vector<std::pair<std::string, double>>& metrics) const;

  // Collective the first time when no train(), evaluate(), predict() or load_model_weights() has
  // built the engine yet: builds it for training.
  Engine& engine();
  const std::vector<LogEntry>& log_history() const { return log_history_; }
  // Total optimizer steps of train() (HF's max_steps rule).
  int64_t num_training_steps() const;
  // The checkpoint args.resume_from_checkpoint names ("last"/"true": the newest complete
  // output_dir/checkpoint-*; CheckpointError when there is none), nullopt when unset or "false".
  std::optional<std::string> resume_path() const;
  // output_dir/checkpoint-{step} directories that are complete, oldest first.
  std::vector<std::string> checkpoints() const;

 private:
  // train() in named steps (hf/trainer_loop.cpp).
  struct Run;
  // What follows an optimizer step or an epoch's end (HF's _maybe_log_save_evaluate).
  struct StepDecision {
    int64_t step;
    double epoch_f;
    bool log, eval, save;
    int64_t batches_done;  // micro-batches of the epoch done
  };
  void check_trainable() const;
  Run begin_run(const std::optional<std::string>& resume);
  void resume_from(Run& run, const std::string& path);
  void train_epoch(Run& run, DistributedSampler& sampler);
  DistributedSampler train_sampler() const;
  // One micro-batch's forward, backward and step; whether the optimizer stepped.
  bool micro_step(Run& run, const std::vector<int64_t>& indices, bool epoch_end);
  void after_optimizer_step(Run& run, int64_t batches_done);
  void log_save_evaluate(Run& run, const StepDecision& decision);
  // Collective: the mean over ranks of `loss_sum`; adds the ranks' flos to total_flos_.
  double collect(Run& run, double loss_sum);
  void draw_progress(const Run& run, int64_t step, double step_loss) const;
  TrainOutput end_run(Run& run);

  void ensure_engine(bool inference);
  bool stage3_config() const;
  std::pair<at::Tensor, at::Tensor> collate(const Dataset& data,
                                            const std::vector<int64_t>& indices) const;
  void save(int64_t epoch, int64_t batches_in_epoch, double epoch_f);
  void rotate_checkpoints();
  void report(const LogEntry& entry);
  void restore_state(const std::string& checkpoint);
  bool track_best(const LogEntry& eval_entry);
  void write_curves() const;
  int64_t batches_per_epoch() const;

  std::shared_ptr<torch::nn::Module> model_;
  // Where the model's parameters are: batches go there (HF's Trainer moves inputs to args.device).
  at::Device batch_device_ = at::kCPU;
  config::TrainingArguments args_;
  std::shared_ptr<Dataset> train_;
  std::shared_ptr<Dataset> eval_;
  LossFn loss_fn_;
  TrainerOptions options_;
  std::shared_ptr<comm::Comm> comm_;
  int sequence_parallel_ = 1;  // the config's K: data drawn for world / K ranks (Ulysses)
  int dp_size() const { return comm_->size() / sequence_parallel_; }
  int dp_rank() const { return comm_->rank() / sequence_parallel_; }
  std::unique_ptr<Engine> engine_;
  std::vector<LogEntry> log_history_;
  // TrainerState fields beyond the log history.
  double epoch_ = 0;
  double total_flos_ = 0;
  std::optional<double> best_metric_;
  std::optional<int64_t> best_global_step_;
  std::optional<std::string> best_model_checkpoint_;
  // A resumed checkpoint's TrainerState logging_steps, eval_steps and save_steps: they, not the
  // arguments, decide when to log, evaluate and save (transformers keeps the loaded state's).
  struct StateSteps {
    std::optional<int64_t> logging, eval, save;
  };
  StateSteps resumed_steps_;
  int64_t num_params_ = 0;  // trainable, counted before the engine partitions them
  std::unique_ptr<EventFileWriter> tensorboard_;
};

}  // namespace zrt
