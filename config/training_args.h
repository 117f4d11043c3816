// TrainingArguments: the HF Trainer arguments that the DeepSpeed integration reads, with HF's
// names and defaults (transformers 4.x), and their command-line form with HF's spelling
// (`--per_device_train_batch_size 4`, `--fp16`, `--fp16 true`, `--fp16=false`): the flags are
// config/training_args_flags.h's, for programs that parse them with cxxopts.
// The world size is not an argument: it comes from the communicator.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"

namespace zrt::config {

struct TrainingArguments {
  std::string output_dir = "trainer_output";
  bool do_train = false;
  bool do_eval = false;
  bool do_predict = false;
  int64_t per_device_train_batch_size = 8;
  int64_t per_device_eval_batch_size = 8;
  int64_t gradient_accumulation_steps = 1;
  double learning_rate = 5e-5;
  double weight_decay = 0.0;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_epsilon = 1e-8;
  double max_grad_norm = 1.0;
  // HF's LabelSmoother epsilon: (1 - e) x cross entropy + e x the mean over the vocabulary of
  // -log p, per token (torch's cross_entropy label_smoothing); in [0, 1].
  double label_smoothing_factor = 0.0;
  // checkpoint-N holds the model only (TrainerOptions::save_model), no optimizer or schedule: it
  // cannot be resumed from.
  bool save_only_model = false;
  // HF's log levels: rank 0's and the other ranks' (debug, info, warning, error, critical, or
  // passive: ZRT_LOG_LEVEL's, else info). The Trainer applies them when it is built.
  std::string log_level = "passive";
  std::string log_level_replica = "warning";
  double num_train_epochs = 3.0;
  int64_t max_steps = -1;  // > 0 overrides num_train_epochs
  std::string lr_scheduler_type = "linear";
  Json lr_scheduler_kwargs = Json::object();  // e.g. {"num_cycles": 2}
  double warmup_ratio = 0.0;                  // transformers 4.x (5.x removed it)
  double warmup_steps = 0;     // >= 1: a count; in (0, 1): a ratio of the steps (transformers 5.x)
  double logging_steps = 500;  // < 1: a ratio of the total steps
  double save_steps = 500;
  std::optional<double> eval_steps;  // unset: logging_steps
  std::optional<int64_t> save_total_limit;
  bool save_on_each_node = false;
  int64_t seed = 42;
  std::optional<int64_t> data_seed;
  bool fp16 = false;
  bool bf16 = false;
  bool fp16_full_eval = false;
  bool bf16_full_eval = false;
  std::string fp16_backend = "auto";            // deprecated HF alias of half_precision_backend
  std::string half_precision_backend = "auto";  // auto | apex | cpu_amp
  std::string optim = "adamw_torch";
  bool adafactor = false;  // deprecated HF switch for optim = adafactor
  bool dataloader_drop_last = false;
  // HF's rule: train on the GPU when one is visible (and the build can use it), unless use_cpu.
  bool use_cpu = false;
  // HF's count of the step's tokens over all ranks. ZeroRT's cross entropy is each micro-batch's
  // mean (equal for run_clm's full blocks), so it only weighs a MoE model's auxiliary loss as the
  // Trainer does (Note [The auxiliary loss in HF's Trainer], tools/moe_loss.cpp).
  bool average_tokens_across_devices = true;
  // Every layer of the example models checkpointed (zrt::enable_activation_checkpointing), as HF's
  // model.gradient_checkpointing_enable(); kwargs as transformers takes them: "use_reentrant"
  // (either value: ZeroRT's checkpoint has non-reentrant semantics, Note [Activation
  // checkpointing]) is the one key.
  bool gradient_checkpointing = false;
  Json gradient_checkpointing_kwargs = Json::object();
  // Read by the "auto" batch rules as transformers does; ZeroRT does not search for a batch size
  // (a warning says so when it is set).
  bool auto_find_batch_size = false;
  std::optional<std::string> resume_from_checkpoint;
  std::optional<std::string> deepspeed;  // path, JSON string or base64 of a DeepSpeed config
  // When the Trainer logs, evaluates and saves during training: "no", "steps" (every
  // logging_steps / eval_steps / save_steps) or "epoch"; save_strategy also "best" (whenever
  // the evaluation found a new best metric). HF's defaults; --evaluation_strategy is the
  // transformers 4.x name of eval_strategy.
  std::string eval_strategy = "no";
  std::string save_strategy = "steps";
  std::string logging_strategy = "steps";
  bool logging_first_step = false;
  // Best-model tracking (trainer_state.json's best_metric / best_model_checkpoint); the metric
  // is an evaluation metric name with or without "eval_" (ZeroRT evaluates "loss" only).
  bool load_best_model_at_end = false;
  std::optional<std::string> metric_for_best_model;  // validate(): "loss" with load_best_...
  std::optional<bool> greater_is_better;             // validate(): false for *loss, else true
  std::optional<std::string> run_name;
  // "tensorboard" (event files in output_dir/runs/<run>), "csv" (output_dir/log_history.csv);
  // empty: none. "all" means both; integrations that do not exist in C++ (wandb, ...) are
  // refused by name.
  std::vector<std::string> report_to;
  // transformers' TrainingArguments given on the command line that have no effect in ZeroRT
  // (name, value): accepted, with one warning each (parse_training_arguments).
  std::vector<std::pair<std::string, std::string>> ignored;

  // transformers 5.x: int(warmup_steps) if warmup_steps >= 1, else ceil(N * warmup_steps) when
  // it is > 0; otherwise (4.x) ceil(N * warmup_ratio).
  int64_t get_warmup_steps(int64_t num_training_steps) const;

  // HF's backend choice for fp16: fp16_backend when it is not "auto", else
  // half_precision_backend.
  std::string effective_fp16_backend() const;

  // The checks and defaults of HF's TrainingArguments.__post_init__ that matter here: throws
  // UsageError ("At most one of fp16 and bf16 can be True, but not both", "warmup_ratio must lie
  // in range [0,1]", invalid choices, the strategy rules of load_best_model_at_end, ...); sets
  // do_eval when eval_strategy is not "no", eval_steps from logging_steps, and the best-model
  // defaults.
  void validate();
  // The evaluation metric that best-model tracking compares ("eval_loss"), when there is one.
  std::optional<std::string> best_metric_key() const;
};

// HF's string_to_bool: yes/true/t/y/1 and no/false/f/n/0, case-insensitive. UsageError
// otherwise ("Truthy value expected: got ...").
bool parse_hf_bool(const std::string& text);

// Names (without "--") of the boolean training flags.
const std::vector<std::string>& training_bool_flags();

// transformers' TrainingArguments (5.24) that have no effect in ZeroRT: accepted on the command
// line with a warning. `is_bool`: a switch (`--flag`, `--flag false`); else it takes a value.
struct IgnoredTrainingArgument {
  const char* name;
  bool is_bool;
};
const std::vector<IgnoredTrainingArgument>& ignored_training_arguments();

}  // namespace zrt::config
