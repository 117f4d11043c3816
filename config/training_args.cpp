#include "config/training_args.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>
#include <utility>

#include <cxxopts.hpp>

#include "core/error.h"
#include "core/logging.h"

namespace zrt::config {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool is_bool_word(const std::string& text) {
  static const char* kWords[] = {"yes", "true", "t", "y", "1", "no", "false", "f", "n", "0"};
  const std::string low = lower(text);
  return std::any_of(std::begin(kWords), std::end(kWords), [&](const char* w) { return low == w; });
}

void check_choice(const char* flag, const std::string& value,
                  const std::vector<std::string>& choices) {
  if (std::find(choices.begin(), choices.end(), value) != choices.end()) return;
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "'" : ", '") + c + "'";
  throw UsageError(
      str("argument --", flag, ": invalid choice: '", value, "' (choose from ", list, ")"));
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
  report_to = reports;
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
                                                  "load_best_model_at_end",
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
      {"average_tokens_across_devices", true},
      {"label_smoothing_factor", false},
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
      {"log_level", false},
      {"log_level_replica", false},
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
      {"save_only_model", true},
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

std::vector<std::string> join_bool_flag_values(const std::vector<std::string>& args) {
  std::vector<std::string> flags = training_bool_flags();
  for (const auto& ignored : ignored_training_arguments()) {
    if (ignored.is_bool) flags.push_back(ignored.name);
  }
  std::vector<std::string> out;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    const bool is_flag = arg.rfind("--", 0) == 0 && arg.find('=') == std::string::npos &&
                         std::find(flags.begin(), flags.end(), arg.substr(2)) != flags.end();
    if (is_flag && i + 1 < args.size() && is_bool_word(args[i + 1])) {
      out.push_back(arg + "=" + args[i + 1]);
      ++i;
    } else {
      out.push_back(arg);
    }
  }
  return out;
}

namespace {

// A flag's value (or its default) parsed as JSON.
Json json_argument(const cxxopts::ParseResult& result, const char* name) {
  const std::string text = result[name].as<std::string>();
  try {
    return Json::parse(text);
  } catch (const Json::exception&) {
    throw UsageError(str("--", name, ": not valid JSON: ", text));
  }
}

// --gradient_checkpointing_kwargs as transformers passes it to torch's checkpoint: an object whose
// one key ZeroRT knows is use_reentrant (either value: one implementation, Note [Activation
// checkpointing] in zero/activation_checkpoint.cpp).
Json checked_checkpointing_kwargs(const cxxopts::ParseResult& result) {
  const Json kwargs = json_argument(result, "gradient_checkpointing_kwargs");
  ZRT_CHECK_AS(UsageError, kwargs.is_object(),
               "--gradient_checkpointing_kwargs must be a JSON object, got ", kwargs.dump());
  for (const auto& [key, value] : kwargs.items()) {
    ZRT_CHECK_AS(UsageError, key == "use_reentrant",
                 "--gradient_checkpointing_kwargs: unknown key '", key,
                 "' (ZeroRT accepts use_reentrant)");
    ZRT_CHECK_AS(UsageError, value.is_boolean(),
                 "--gradient_checkpointing_kwargs: use_reentrant must be true or false, got ",
                 value.dump());
  }
  return kwargs;
}

// Flags accepted for compatibility: recorded in `a.ignored` with a warning that they have no
// effect; --auto_find_batch_size with a warning about the part it has.
void warn_about_effects(const cxxopts::ParseResult& result, TrainingArguments* a) {
  for (const auto& ignored : ignored_training_arguments()) {
    if (result.count(ignored.name) == 0) continue;
    const std::string value = result[ignored.name].as<std::string>();
    a->ignored.emplace_back(ignored.name, value);
    ZRT_LOG_WARN("--", ignored.name, " ", value,
                 ": accepted for compatibility with transformers' TrainingArguments; it has no "
                 "effect in ZeroRT");
  }
  if (a->auto_find_batch_size) {
    ZRT_LOG_WARN(
        "--auto_find_batch_size: ZeroRT does not retry with smaller batches; the flag only "
        "changes how \"auto\" batch-size keys are filled, as in transformers' DeepSpeed "
        "integration");
  }
}

}  // namespace

namespace {

// transformers' other arguments: accepted so that HF command lines run, with a warning.
void add_ignored_arguments(cxxopts::Options& options) {
  auto group = options.add_options("Accepted for compatibility (no effect in ZeroRT)");
  for (const auto& ignored : ignored_training_arguments()) {
    if (ignored.is_bool) {
      group(ignored.name, "no effect in ZeroRT",
            cxxopts::value<std::string>()->implicit_value("true"));
    } else {
      group(ignored.name, "no effect in ZeroRT", cxxopts::value<std::string>());
    }
  }
}

}  // namespace

void add_training_arguments(cxxopts::Options& options) {
  using cxxopts::value;
  auto flag = [](const char* def) {
    return value<std::string>()->default_value(def)->implicit_value("true");
  };
  options.add_options("Training arguments")("output_dir", "Where checkpoints and outputs go",
                                            value<std::string>()->default_value("trainer_output"))(
      "do_train", "Run training", flag("false"))("do_eval", "Run evaluation", flag("false"))(
      "do_predict", "Run prediction", flag("false"))("per_device_train_batch_size",
                                                     "Micro-batch size per rank for training",
                                                     value<int64_t>()->default_value("8"))(
      "per_device_eval_batch_size", "Micro-batch size per rank for evaluation",
      value<int64_t>()->default_value("8"))("gradient_accumulation_steps",
                                            "Micro-batches per optimizer step",
                                            value<int64_t>()->default_value("1"))(
      "learning_rate", "Peak learning rate", value<double>()->default_value("5e-05"))(
      "weight_decay", "Weight decay", value<double>()->default_value("0.0"))(
      "adam_beta1", "Adam beta1", value<double>()->default_value("0.9"))(
      "adam_beta2", "Adam beta2", value<double>()->default_value("0.999"))(
      "adam_epsilon", "Adam epsilon", value<double>()->default_value("1e-08"))(
      "max_grad_norm", "Gradient clipping norm", value<double>()->default_value("1.0"))(
      "num_train_epochs", "Training epochs", value<double>()->default_value("3.0"))(
      "max_steps", "Total optimizer steps (> 0 overrides num_train_epochs)",
      value<int64_t>()->default_value("-1"))("lr_scheduler_type",
                                             "HF schedule when the config has no scheduler",
                                             value<std::string>()->default_value("linear"))(
      "lr_scheduler_kwargs", "JSON object of extra schedule arguments",
      value<std::string>()->default_value("{}"))("warmup_ratio",
                                                 "Warmup as a fraction of the total steps",
                                                 value<double>()->default_value("0.0"))(
      "warmup_steps",
      "Warmup steps (>= 1), or a ratio of the training steps (< 1); > 0 overrides warmup_ratio",
      value<double>()->default_value("0"))("logging_steps", "Log every N steps",
                                           value<double>()->default_value("500"))(
      "save_steps", "Save every N steps", value<double>()->default_value("500"))(
      "eval_steps", "Evaluate every N steps", value<double>())(
      "save_total_limit", "Keep at most N checkpoints", value<int64_t>())(
      "save_on_each_node", "Save on every node (node-local storage)", flag("false"))(
      "seed", "Random seed", value<int64_t>()->default_value("42"))(
      "data_seed", "Seed of the data sampler", value<int64_t>())(
      "fp16", "Train in fp16", flag("false"))("bf16", "Train in bf16", flag("false"))(
      "fp16_full_eval", "Evaluate in fp16", flag("false"))("bf16_full_eval", "Evaluate in bf16",
                                                           flag("false"))(
      "fp16_backend", "Deprecated alias of half_precision_backend",
      value<std::string>()->default_value("auto"))("half_precision_backend",
                                                   "auto, apex or cpu_amp",
                                                   value<std::string>()->default_value("auto"))(
      "optim", "HF optimizer when the config has none",
      value<std::string>()->default_value("adamw_torch"))(
      "adafactor", "Use Adafactor (deprecated HF switch)", flag("false"))(
      "dataloader_drop_last", "Drop the last incomplete batch", flag("false"))(
      "auto_find_batch_size", "Search for a batch size that fits", flag("false"))(
      "gradient_checkpointing", "Recompute each layer's activations in backward", flag("false"))(
      "use_cpu", "Train on the CPU even where a CUDA device is visible", flag("false"))(
      "gradient_checkpointing_kwargs", "JSON, e.g. {\"use_reentrant\": false}",
      value<std::string>()->default_value("{}"))(
      "resume_from_checkpoint", "Checkpoint folder to resume from", value<std::string>())(
      "deepspeed", "DeepSpeed config: path, JSON string or base64", value<std::string>())(
      "eval_strategy", "Evaluate during training: no, steps or epoch",
      value<std::string>()->default_value("no"))(
      "evaluation_strategy", "transformers 4.x name of --eval_strategy", value<std::string>())(
      "save_strategy", "Save during training: no, steps, epoch or best",
      value<std::string>()->default_value("steps"))("logging_strategy",
                                                    "Log during training: no, steps or epoch",
                                                    value<std::string>()->default_value("steps"))(
      "logging_first_step", "Log the first step too", flag("false"))(
      "load_best_model_at_end", "Load the best checkpoint's weights when training ends",
      flag("false"))("metric_for_best_model", "Evaluation metric of the best model (loss)",
                     value<std::string>())(
      "greater_is_better", "Whether a greater metric is better (default: not for *loss)",
      value<std::string>()->implicit_value("true"))(
      "run_name", "Name of the run (TensorBoard folder)", value<std::string>())(
      "report_to", "tensorboard, csv, all or none (comma-separated)",
      value<std::string>()->default_value("none"));
  add_ignored_arguments(options);
}

TrainingArguments parse_training_arguments(const cxxopts::ParseResult& result) {
  TrainingArguments a;
  auto text = [&](const char* name) { return result[name].as<std::string>(); };
  auto boolean = [&](const char* name) { return parse_hf_bool(text(name)); };
  auto i64 = [&](const char* name) { return result[name].as<int64_t>(); };
  auto f64 = [&](const char* name) { return result[name].as<double>(); };
  a.output_dir = text("output_dir");
  a.do_train = boolean("do_train");
  a.do_eval = boolean("do_eval");
  a.do_predict = boolean("do_predict");
  a.per_device_train_batch_size = i64("per_device_train_batch_size");
  a.per_device_eval_batch_size = i64("per_device_eval_batch_size");
  a.gradient_accumulation_steps = i64("gradient_accumulation_steps");
  a.learning_rate = f64("learning_rate");
  a.weight_decay = f64("weight_decay");
  a.adam_beta1 = f64("adam_beta1");
  a.adam_beta2 = f64("adam_beta2");
  a.adam_epsilon = f64("adam_epsilon");
  a.max_grad_norm = f64("max_grad_norm");
  a.num_train_epochs = f64("num_train_epochs");
  a.max_steps = i64("max_steps");
  a.lr_scheduler_type = text("lr_scheduler_type");
  a.lr_scheduler_kwargs = json_argument(result, "lr_scheduler_kwargs");
  a.warmup_ratio = f64("warmup_ratio");
  a.warmup_steps = f64("warmup_steps");
  a.logging_steps = f64("logging_steps");
  a.save_steps = f64("save_steps");
  // transformers' TrainingArguments refuses these (checked against transformers 5.24: a
  // save_steps of 0 it accepts, and then never saves by steps, as ZeroRT does).
  for (const auto& [name, v] : {std::pair<const char*, double>{"logging_steps", a.logging_steps},
                                {"save_steps", a.save_steps}}) {
    if (v > 1 && v != std::floor(v)) {
      throw UsageError(str("--", name, " must be an integer if bigger than 1: ", v));
    }
  }
  if (result.count("eval_steps")) a.eval_steps = f64("eval_steps");
  if (result.count("save_total_limit")) a.save_total_limit = i64("save_total_limit");
  a.save_on_each_node = boolean("save_on_each_node");
  a.seed = i64("seed");
  if (result.count("data_seed")) a.data_seed = i64("data_seed");
  a.fp16 = boolean("fp16");
  a.bf16 = boolean("bf16");
  a.fp16_full_eval = boolean("fp16_full_eval");
  a.bf16_full_eval = boolean("bf16_full_eval");
  a.fp16_backend = text("fp16_backend");
  a.half_precision_backend = text("half_precision_backend");
  a.optim = text("optim");
  a.adafactor = boolean("adafactor");
  if (a.adafactor) a.optim = "adafactor";  // as HF's __post_init__
  a.dataloader_drop_last = boolean("dataloader_drop_last");
  a.auto_find_batch_size = boolean("auto_find_batch_size");
  a.gradient_checkpointing = boolean("gradient_checkpointing");
  a.use_cpu = boolean("use_cpu");
  a.gradient_checkpointing_kwargs = checked_checkpointing_kwargs(result);
  if (result.count("resume_from_checkpoint")) {
    a.resume_from_checkpoint = text("resume_from_checkpoint");
  }
  if (result.count("deepspeed")) a.deepspeed = text("deepspeed");
  a.eval_strategy = text("eval_strategy");
  if (result.count("evaluation_strategy")) {
    ZRT_CHECK_AS(UsageError, result.count("eval_strategy") == 0,
                 "--evaluation_strategy and --eval_strategy given: --evaluation_strategy is the "
                 "transformers 4.x name of --eval_strategy; give one");
    ZRT_LOG_WARN(
        "--evaluation_strategy is the transformers 4.x name of --eval_strategy (removed "
        "in transformers 5); using it as --eval_strategy");
    a.eval_strategy = text("evaluation_strategy");
  }
  a.save_strategy = text("save_strategy");
  a.logging_strategy = text("logging_strategy");
  a.logging_first_step = boolean("logging_first_step");
  a.load_best_model_at_end = boolean("load_best_model_at_end");
  if (result.count("metric_for_best_model")) {
    a.metric_for_best_model = text("metric_for_best_model");
  }
  if (result.count("greater_is_better")) a.greater_is_better = boolean("greater_is_better");
  if (result.count("run_name")) a.run_name = text("run_name");
  a.report_to.clear();
  {
    std::string list = text("report_to");
    for (char& c : list) c = c == ',' ? ' ' : c;
    std::istringstream words(list);
    for (std::string w; words >> w;) a.report_to.push_back(w);
  }
  warn_about_effects(result, &a);
  a.validate();
  return a;
}

}  // namespace zrt::config
