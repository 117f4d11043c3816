#include "config/training_args.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>
#include <utility>

#include "core/error.h"
#include "core/logging.h"

namespace zrt::config {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

void check_choice(const char* flag, const std::string& value,
                  const std::vector<std::string>& choices) {
  if (std::find(choices.begin(), choices.end(), value) != choices.end()) return;
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "'" : ", '") + c + "'";
  throw UsageError(
      str("argument --", flag, ": invalid choice: '", value, "' (choose from ", list, ")"));
}

// HF's trainer_log_levels and "passive".
const std::vector<std::string> kLogLevels = {"debug", "info",     "warning",
                                             "error", "critical", "passive"};

// --report_to: "all" is both of ZeroRT's reporters, "none" none; sorted, each once.
std::vector<std::string> normalized_reports(const std::vector<std::string>& report_to) {
  std::vector<std::string> reports;
  for (const std::string& r : report_to) {
    if (r == "none") continue;
    if (r == "all") {
      reports.insert(reports.end(), {"tensorboard", "csv"});
      continue;
    }
    if (r != "tensorboard" && r != "csv") {
      throw UsageError(str("--report_to ", r,
                           ": ZeroRT reports to 'tensorboard' (event files) and 'csv'; use "
                           "'none', 'all' or those"));
    }
    reports.push_back(r);
  }
  std::sort(reports.begin(), reports.end());
  reports.erase(std::unique(reports.begin(), reports.end()), reports.end());
  return reports;
}

const std::vector<std::string> kSchedulerTypes = {"linear",
                                                  "cosine",
                                                  "cosine_with_restarts",
                                                  "polynomial",
                                                  "constant",
                                                  "constant_with_warmup",
                                                  "inverse_sqrt",
                                                  "reduce_lr_on_plateau",
                                                  "cosine_with_min_lr",
                                                  "warmup_stable_decay"};
const std::vector<std::string> kBackends = {"auto", "apex", "cpu_amp"};

}  // namespace

int64_t TrainingArguments::get_warmup_steps(int64_t num_training_steps) const {
  const double n = static_cast<double>(num_training_steps);
  if (warmup_steps >= 1) return static_cast<int64_t>(warmup_steps);  // int(warmup_steps)
  if (warmup_steps > 0) return static_cast<int64_t>(std::ceil(n * warmup_steps));
  return static_cast<int64_t>(std::ceil(n * warmup_ratio));  // transformers 4.x
}

std::string TrainingArguments::effective_fp16_backend() const {
  return fp16_backend != "auto" ? fp16_backend : half_precision_backend;
}

std::optional<std::string> TrainingArguments::best_metric_key() const {
  if (!metric_for_best_model) return std::nullopt;
  const std::string& m = *metric_for_best_model;
  return m.rfind("eval_", 0) == 0 ? m : "eval_" + m;
}

void TrainingArguments::validate() {
  check_choice("eval_strategy", eval_strategy, {"no", "steps", "epoch"});
  check_choice("save_strategy", save_strategy, {"no", "steps", "epoch", "best"});
  check_choice("logging_strategy", logging_strategy, {"no", "steps", "epoch"});
  check_choice("log_level", log_level, kLogLevels);
  check_choice("log_level_replica", log_level_replica, kLogLevels);
  if (eval_strategy != "no") do_eval = true;  // as HF's __post_init__
  if (eval_strategy == "steps" && (!eval_steps || *eval_steps == 0)) {
    if (logging_steps > 0) {
      eval_steps = logging_steps;
    } else {
      throw UsageError(
          "evaluation strategy IntervalStrategy.STEPS requires either non-zero --eval_steps or "
          "--logging_steps");
    }
  }
  if (logging_strategy == "steps" && logging_steps == 0) {
    throw UsageError("logging strategy IntervalStrategy.STEPS requires non-zero --logging_steps");
  }
  if (eval_strategy == "steps" && *eval_steps > 1 && *eval_steps != std::floor(*eval_steps)) {
    throw UsageError(str("--eval_steps must be an integer if bigger than 1: ", *eval_steps));
  }
  if (load_best_model_at_end && save_strategy != "best") {
    if (eval_strategy != save_strategy) {
      throw UsageError(
          str("--load_best_model_at_end requires the save and eval strategy to match, except when "
              "--save_strategy=\"best\", but found\n- Evaluation strategy: ",
              eval_strategy, "\n- Save strategy: ", save_strategy));
    }
    if (eval_strategy == "steps" && *eval_steps >= 1 && save_steps >= 1 &&
        std::fmod(save_steps, *eval_steps) != 0) {
      throw UsageError(
          str("--load_best_model_at_end requires the saving steps to be a round "
              "multiple of the evaluation steps, but found ",
              save_steps, ", which is not a round multiple of ", *eval_steps, "."));
    }
  }
  if ((load_best_model_at_end || save_strategy == "best") && !metric_for_best_model) {
    metric_for_best_model = "loss";
  }
  if (metric_for_best_model && !greater_is_better) {
    const std::string& m = *metric_for_best_model;
    greater_is_better = !(m.size() >= 4 && m.compare(m.size() - 4, 4, "loss") == 0);
  }
  report_to = normalized_reports(report_to);
  check_choice("lr_scheduler_type", lr_scheduler_type, kSchedulerTypes);
  check_choice("fp16_backend", fp16_backend, kBackends);
  check_choice("half_precision_backend", half_precision_backend, kBackends);
  if (fp16 && bf16) throw UsageError("At most one of fp16 and bf16 can be True, but not both");
  if (fp16_full_eval && bf16_full_eval) {
    throw UsageError("At most one of fp16 and bf16 can be True for full eval, but not both");
  }
  if ((fp16 || fp16_full_eval) && effective_fp16_backend() == "apex") {
    throw UsageError(
        "--fp16 with the apex backend: NVIDIA apex AMP is not supported (DeepSpeed 0.19 removed "
        "its \"amp\" section and transformers 5 the apex backend); leave the backend at auto");
  }
  if (bf16 && effective_fp16_backend() == "apex") {
    throw UsageError(
        " `--half_precision_backend apex`: bf16 is not supported by apex. Use "
        "`--half_precision_backend amp` instead");
  }
  if (warmup_ratio < 0 || warmup_ratio > 1) {
    throw UsageError("warmup_ratio must lie in range [0,1]");
  }
  if (warmup_steps < 0) {
    throw UsageError(
        str("Got warmup_steps = ", warmup_steps, ", Expected value warmup_steps >= 0"));
  }
  if (warmup_ratio > 0 && warmup_steps > 0) {
    ZRT_LOG_INFO(
        "Both warmup_ratio and warmup_steps given, warmup_steps will override any effect of "
        "warmup_ratio during training");
  }
  if (!lr_scheduler_kwargs.is_object()) {
    throw UsageError("--lr_scheduler_kwargs must be a JSON object");
  }
}

bool parse_hf_bool(const std::string& text) {
  const std::string low = lower(text);
  if (low == "yes" || low == "true" || low == "t" || low == "y" || low == "1") return true;
  if (low == "no" || low == "false" || low == "f" || low == "n" || low == "0") return false;
  throw UsageError(
      str("Truthy value expected: got ", text,
          " but expected one of yes/no, true/false, t/f, y/n, 1/0 (case insensitive)."));
}

const std::vector<std::string>& training_bool_flags() {
  static const std::vector<std::string> kFlags = {"do_train",
                                                  "do_eval",
                                                  "do_predict",
                                                  "save_on_each_node",
                                                  "fp16",
                                                  "bf16",
                                                  "fp16_full_eval",
                                                  "bf16_full_eval",
                                                  "adafactor",
                                                  "dataloader_drop_last",
                                                  "auto_find_batch_size",
                                                  "logging_first_step",
                                                  "gradient_checkpointing",
                                                  "use_cpu",
                                                  "average_tokens_across_devices",
                                                  "load_best_model_at_end",
                                                  "save_only_model",
                                                  "greater_is_better"};
  return kFlags;
}

const std::vector<IgnoredTrainingArgument>& ignored_training_arguments() {
  // Every __init__ field of transformers 5.24's TrainingArguments that ZeroRT does not use
  // (tests/peers/hf_smoke.py checks that this list and the supported flags cover them all).
  static const std::vector<IgnoredTrainingArgument> kIgnored = {
      {"overwrite_output_dir", true},  // read by HF's example scripts, not by its Trainer
      {"fp16_opt_level", false},       // apex only, which ZeroRT refuses
      {"dataloader_num_workers", false},
      {"optim_args", false},
      {"optim_target_modules", false},
      {"tf32", true},
      {"activation_checkpointing", true},
      {"activation_checkpointing_kwargs", false},
      {"torch_compile", true},
      {"torch_compile_backend", false},
      {"torch_compile_mode", false},
      {"use_liger_kernel", true},
      {"liger_kernel_config", false},
      {"use_cache", true},
      {"neftune_noise_alpha", false},
      {"torch_empty_cache_steps", false},
      {"log_on_each_node", true},
      {"logging_nan_inf_filter", true},
      {"include_num_input_tokens_seen", false},
      {"disable_tqdm", true},
      {"project", false},
      {"trackio_space_id", false},
      {"trackio_bucket_id", false},
      {"trackio_static_space_id", false},
      {"eval_delay", false},
      {"prediction_loss_only", true},
      {"eval_on_start", true},
      {"eval_do_concat_batches", true},
      {"eval_use_gather_object", true},
      {"eval_accumulation_steps", false},
      {"include_for_metrics", false},
      {"batch_eval_metrics", true},
      {"enable_jit_checkpoint", true},
      {"push_to_hub", true},
      {"hub_token", false},
      {"hub_private_repo", true},
      {"hub_model_id", false},
      {"hub_strategy", false},
      {"hub_always_push", true},
      {"hub_revision", false},
      {"ignore_data_skip", true},
      {"restore_callback_states_from_checkpoint", true},
      {"full_determinism", true},
      {"accelerator_config", false},
      {"parallelism_config", false},
      {"dataloader_pin_memory", true},
      {"dataloader_persistent_workers", true},
      {"dataloader_prefetch_factor", false},
      {"dataloader_multiprocessing_context", false},
      {"dataloader_in_order", true},
      {"remove_unused_columns", true},
      {"label_names", false},
      {"train_sampling_strategy", false},
      {"length_column_name", false},
      {"ddp_find_unused_parameters", true},
      {"ddp_bucket_cap_mb", false},
      {"ddp_broadcast_buffers", true},
      {"ddp_static_graph", true},
      {"ddp_backend", false},
      {"ddp_timeout", false},
      {"fsdp", false},
      {"fsdp_config", false},
      {"debug", false},
      {"skip_memory_metrics", true},
      {"local_rank", false},
  };
  return kIgnored;
}

}  // namespace zrt::config
