#include "config/training_args_flags.h"

#include <cmath>
#include <sstream>
#include <utility>

#include <cxxopts.hpp>

#include "core/error.h"
#include "core/logging.h"

namespace zrt::config {
namespace {

bool is_bool_word(const std::string& text) {
  try {
    parse_hf_bool(text);
    return true;
  } catch (const UsageError&) {
    return false;
  }
}

}  // namespace

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
  if (result.count("group_by_length")) {
    throw UsageError(
        "--group_by_length: transformers 5 removed this flag (its TrainingArguments has no such "
        "field; the sampler is --train_sampling_strategy group_by_length, which ZeroRT does not "
        "implement)");
  }
  for (const auto& ignored : ignored_training_arguments()) {
    if (result.count(ignored.name) == 0) continue;
    const std::string value = result[ignored.name].as<std::string>();
    // Another batch order changes what is trained: only the default is accepted.
    ZRT_CHECK_AS(UsageError,
                 ignored.name != std::string("train_sampling_strategy") || value == "random",
                 "--train_sampling_strategy ", value,
                 ": ZeroRT draws batches in the HF Trainer's default order (\"random\") only; "
                 "\"sequential\" and \"group_by_length\" are not implemented");
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

// The rest of add_training_arguments: the loss, model-only checkpoints and log levels.
void add_more_training_arguments(cxxopts::Options& options) {
  using cxxopts::value;
  options.add_options("Training arguments")(
      "label_smoothing_factor",
      "Label smoothing epsilon of the language-model loss (HF's LabelSmoother), in [0, 1]",
      value<double>()->default_value("0.0"))(
      "save_only_model",
      "checkpoint-N holds only the model (and trainer_state.json): not resumable",
      value<std::string>()->default_value("false")->implicit_value("true"))(
      "log_level",
      "rank 0's log level: debug, info, warning, error, critical or passive (ZRT_LOG_LEVEL's)",
      value<std::string>()->default_value("passive"))(
      "log_level_replica", "the other ranks' log level (as --log_level)",
      value<std::string>()->default_value("warning"));
}

// Flags transformers 5 removed: declared so that using one is refused with a hint
// (warn_about_effects) rather than cxxopts' "does not exist".
void add_removed_arguments(cxxopts::Options& options) {
  options.add_options("Removed in transformers 5 (refused)")(
      "group_by_length", "now --train_sampling_strategy group_by_length",
      cxxopts::value<std::string>()->implicit_value("true"));
}

void parse_more_training_arguments(const cxxopts::ParseResult& result, TrainingArguments& a) {
  a.max_grad_norm = result["max_grad_norm"].as<double>();
  a.label_smoothing_factor = result["label_smoothing_factor"].as<double>();
  ZRT_CHECK_AS(UsageError, a.label_smoothing_factor >= 0.0 && a.label_smoothing_factor <= 1.0,
               "--label_smoothing_factor must be in [0, 1], got ", a.label_smoothing_factor);
  a.save_only_model = parse_hf_bool(result["save_only_model"].as<std::string>());
  a.average_tokens_across_devices =
      parse_hf_bool(result["average_tokens_across_devices"].as<std::string>());
  a.log_level = result["log_level"].as<std::string>();
  a.log_level_replica = result["log_level_replica"].as<std::string>();
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
      "average_tokens_across_devices", "Weighs a MoE model's auxiliary loss as the HF Trainer "
      "does (x world size); no other effect in ZeroRT", flag("true"))(
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
  add_more_training_arguments(options);
  add_ignored_arguments(options);
  add_removed_arguments(options);
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
  parse_more_training_arguments(result, a);
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
