#include "config/hf_trainer.h"

#include <algorithm>

#include "config/py_format.h"
#include "core/error.h"

namespace zrt::config {
namespace {

constexpr const char* kHiddenSizeKeys[] = {"zero_optimization.reduce_bucket_size",
                                           "zero_optimization.stage3_prefetch_bucket_size",
                                           "zero_optimization.stage3_param_persistence_threshold"};

}  // namespace

HfTrainerDeepSpeedConfig::HfTrainerDeepSpeedConfig(DeepSpeedConfig config)
    : config_(std::move(config)) {}

DType HfTrainerDeepSpeedConfig::dtype() const {
  if (!dtype_) throw Error("trainer_config_process() wasn't called yet to tell dtype");
  return *dtype_;
}

bool HfTrainerDeepSpeedConfig::is_auto(std::string_view dotted) const {
  const Json value = config_.get_value(dotted);
  return value.is_string() && value == "auto";
}

void HfTrainerDeepSpeedConfig::fill_match(std::string_view dotted, const Json& hf_value,
                                          std::string_view hf_key, bool must_match) {
  auto [parent, key] = config_.find_config_node(dotted);
  if (parent == nullptr) return;
  auto it = parent->find(key);
  if (it != parent->end() && it->is_string() && *it == "auto") {
    *it = hf_value;
    return;
  }
  if (!must_match || it == parent->end() || it->is_null()) return;
  if (!py_equal(*it, hf_value)) {
    mismatches_.push_back(
        str("- ds ", dotted, "=", py_str(*it), " vs hf ", hf_key, "=", py_str(hf_value)));
  }
}

void HfTrainerDeepSpeedConfig::trainer_config_process(const TrainingArguments& args, int world_size,
                                                      bool auto_find_batch_size) {
  ZRT_CHECK_AS(ConfigError, world_size >= 1, "world size must be at least 1, got ", world_size);
  const int64_t micro = args.per_device_train_batch_size;
  const int64_t accum = args.gradient_accumulation_steps;
  int64_t train_batch_size = 0;
  if (__builtin_mul_overflow(micro, accum, &train_batch_size) ||
      __builtin_mul_overflow(train_batch_size, static_cast<int64_t>(world_size),
                             &train_batch_size)) {
    throw ConfigError(str("train batch size ", world_size, " * ", micro, " * ", accum,
                          " overflows a 64-bit integer"));
  }
  fill_match("train_micro_batch_size_per_gpu", micro, "per_device_train_batch_size",
             !auto_find_batch_size);
  fill_match("gradient_accumulation_steps", accum, "gradient_accumulation_steps");
  fill_match("train_batch_size", train_batch_size, "train_batch_size (calculated)",
             !auto_find_batch_size);
  fill_match("gradient_clipping", args.max_grad_norm, "max_grad_norm");
  fill_match("optimizer.params.lr", args.learning_rate, "learning_rate");
  fill_match("optimizer.params.betas", Json::array({args.adam_beta1, args.adam_beta2}),
             "adam_beta1+adam_beta2");
  fill_match("optimizer.params.eps", args.adam_epsilon, "adam_epsilon");
  fill_match("optimizer.params.weight_decay", args.weight_decay, "weight_decay");
  fill_only("scheduler.params.warmup_min_lr", 0);
  fill_match("scheduler.params.warmup_max_lr", args.learning_rate, "learning_rate");

  if (args.save_on_each_node) {
    Json& root = config_.json();
    auto it = root.find("checkpoint");
    if (it == root.end() || it->is_null()) {
      root["checkpoint"] = Json::object();
    } else if (!it->is_object()) {
      throw ConfigError(str("checkpoint: expected an object, got ", py_repr(*it)));
    }
    root["checkpoint"]["use_node_local_storage"] = true;
  }
  // transformers 5 fills no "amp" section (DeepSpeed 0.19 removed apex AMP).
  fill_match("fp16.enabled", args.fp16 || args.fp16_full_eval, "fp16|fp16_full_eval");
  fill_match("bf16.enabled", args.bf16 || args.bf16_full_eval, "bf16|bf16_full_eval");

  if (config_.is_true("bf16.enabled")) {
    dtype_ = DType::kBFloat16;
  } else if (config_.is_true("fp16.enabled")) {
    dtype_ = DType::kFloat16;
  } else {
    dtype_ = DType::kFloat32;
  }
}

void HfTrainerDeepSpeedConfig::trainer_config_finalize(const TrainingArguments& args,
                                                       const ModelDims& model,
                                                       std::optional<int64_t> num_training_steps) {
  std::vector<std::string> auto_keys;
  for (const char* key : kHiddenSizeKeys) {
    if (is_auto(key)) auto_keys.emplace_back(key);
  }
  if (!auto_keys.empty()) {
    std::optional<int64_t> hidden = model.hidden_size;
    if (!hidden && !model.hidden_sizes.empty()) {
      hidden = *std::max_element(model.hidden_sizes.begin(), model.hidden_sizes.end());
    }
    if (!hidden) {
      throw ConfigError(str(
          "The model's config file has neither `hidden_size` nor `hidden_sizes` entry, therefore "
          "it's not possible to automatically fill out the following `auto` entries in the "
          "DeepSpeed config file: ",
          py_repr(Json(auto_keys)),
          ". You can fix that by replacing `auto` values for these keys with an integer value of "
          "your choice."));
    }
    const int64_t h = *hidden;
    ZRT_CHECK_AS(ConfigError, h > 0 && h <= 3037000499,
                 "hidden size must be in [1, 3037000499], got ", h);
    fill_only("zero_optimization.reduce_bucket_size", h * h);
    if (config_.is_zero3()) {
      // int(0.9 * h * h) evaluated as Python does: (0.9 * h) * h in double, then truncated.
      // Written as an integer: DeepSpeed >= 0.15 rejects fractional sizes (DeepSpeed #6525).
      const double prefetch = 0.9 * static_cast<double>(h) * static_cast<double>(h);
      fill_only("zero_optimization.stage3_prefetch_bucket_size", static_cast<int64_t>(prefetch));
      fill_only("zero_optimization.stage3_param_persistence_threshold", 10 * h);
    }
  }
  if (num_training_steps) {
    fill_match("scheduler.params.total_num_steps", *num_training_steps,
               "num_training_steps (calculated)");
    // transformers 5: at least 1 (DeepSpeed >= 0.19.6 refuses warmup_num_steps <= 0).
    fill_match("scheduler.params.warmup_num_steps",
               std::max<int64_t>(1, args.get_warmup_steps(*num_training_steps)), "warmup_steps");
  }
  if (!mismatches_.empty()) {
    std::string lines;
    for (const auto& line : mismatches_) lines += (lines.empty() ? "" : "\n") + line;
    throw ConfigError(
        str("Please correct the following DeepSpeed config values that mismatch "
            "TrainingArguments values:\n",
            lines,
            "\nThe easiest method is to set these DeepSpeed config values to "
            "'auto'."));
  }
}

}  // namespace zrt::config
