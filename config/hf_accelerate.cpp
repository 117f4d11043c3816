#include "config/hf_accelerate.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <utility>
#include <vector>

#include "config/py_format.h"
#include "core/error.h"
#include "core/logging.h"

namespace zrt::config {
namespace {

bool is_auto(const Json& value) { return value.is_string() && value == "auto"; }

// accelerate's DeepSpeedPlugin.fill_match(must_match=False): an "auto" at `dotted` becomes
// `value`; nothing else changes, and a missing parent section is not created.
void fill_auto(DeepSpeedConfig& ds, std::string_view dotted, const Json& value) {
  auto [parent, key] = ds.find_config_node(dotted);
  if (parent == nullptr) return;
  auto it = parent->find(key);
  if (it != parent->end() && is_auto(*it)) *it = value;
}

// Every "auto" leaf of the config, as dotted keys in document order (accelerate's
// deepspeed_config_process walks nested objects, not lists).
void collect_autos(const Json& node, const std::string& prefix, std::vector<std::string>& out) {
  for (const auto& [key, value] : node.items()) {
    const std::string path = prefix + key;
    if (value.is_object()) {
      collect_autos(value, path + ".", out);
    } else if (is_auto(value)) {
      out.push_back(path);
    }
  }
}

// The batch-size keys accelerate computes from the micro batch it reads back from the config.
void add_batch_kwargs(const DeepSpeedConfig& ds, int world_size,
                      std::vector<std::pair<std::string, Json>>& kwargs) {
  const Json micro = ds.get_value("train_micro_batch_size_per_gpu");
  if (micro.is_null()) return;  // accelerate then leaves the batch keys alone
  if (is_auto(micro)) {
    throw ConfigError(
        "When using DeepSpeed, `accelerate.prepare()` requires you to pass at least one of "
        "training or evaluation dataloaders with `batch_size` attribute returning an integer "
        "value or alternatively set an integer value in `train_micro_batch_size_per_gpu` in the "
        "deepspeed config file or assign integer value to "
        "`AcceleratorState().deepspeed_plugin.deepspeed_config['train_micro_batch_size_per_gpu']`"
        ".");
  }
  kwargs.emplace_back("train_micro_batch_size_per_gpu", micro);
  const Json accum = ds.get_value("gradient_accumulation_steps");
  if (micro.is_number_integer() && accum.is_number_integer()) {
    int64_t total = 0;
    if (!__builtin_mul_overflow(micro.get<int64_t>(), accum.get<int64_t>(), &total) &&
        !__builtin_mul_overflow(total, static_cast<int64_t>(world_size), &total)) {
      kwargs.emplace_back("train_batch_size", total);
    }
  }
}

void add_hidden_size_kwargs(const DeepSpeedConfig& ds, const ModelDims& model,
                            std::vector<std::pair<std::string, Json>>& kwargs) {
  static constexpr const char* kKeys[] = {"zero_optimization.reduce_bucket_size",
                                          "zero_optimization.stage3_prefetch_bucket_size",
                                          "zero_optimization.stage3_param_persistence_threshold"};
  std::vector<std::string> autos;
  for (const char* key : kKeys) {
    if (is_auto(ds.get_value(key))) autos.emplace_back(key);
  }
  if (autos.empty()) return;
  std::optional<int64_t> h = model.hidden_size;
  if (!h && !model.hidden_sizes.empty()) {
    h = *std::max_element(model.hidden_sizes.begin(), model.hidden_sizes.end());
  }
  if (!h) {
    throw ConfigError(str(
        "Can find neither `model.config.hidden_size` nor `model.config.hidden_sizes`, therefore "
        "it's not possible to automatically fill out the following `auto` entries in the "
        "DeepSpeed config file: ",
        py_repr(Json(autos)),
        ". You can fix that by replacing `auto` values for these keys with an integer value of "
        "your choice."));
  }
  ZRT_CHECK_AS(ConfigError, *h > 0 && *h <= 3037000499,
               "hidden size must be in [1, 3037000499], got ", *h);
  const double prefetch = 0.9 * static_cast<double>(*h) * static_cast<double>(*h);
  kwargs.emplace_back(kKeys[0], *h * *h);
  kwargs.emplace_back(kKeys[1], static_cast<int64_t>(prefetch));
  kwargs.emplace_back(kKeys[2], 10 * *h);
}

}  // namespace

void accelerate_plugin_rules(HfTrainerDeepSpeedConfig& hf) {
  DeepSpeedConfig& ds = hf.config();
  Json& root = ds.json();
  if (!root.contains("gradient_accumulation_steps")) root["gradient_accumulation_steps"] = 1;
  if (!root.contains("zero_optimization")) {
    throw ConfigError("Please specify the ZeRO optimization config in the DeepSpeed config.");
  }
  // The plugin's own defaults, written over "auto" only (accelerate/utils/dataclasses.py,
  // DeepSpeedPlugin.__post_init__: plugin_to_config_mapping).
  fill_auto(ds, "zero_optimization.stage", 2);
  fill_auto(ds, "zero_optimization.offload_optimizer.device", "none");
  fill_auto(ds, "zero_optimization.offload_param.device", "none");
  fill_auto(ds, "zero_optimization.offload_param.nvme_path", "none");
  fill_auto(ds, "zero_optimization.offload_optimizer.nvme_path", "none");
  fill_auto(ds, "zero_optimization.stage3_gather_16bit_weights_on_model_save", false);
  ds.set_stage_and_offload();
  // accelerate writes steps_per_print = inf, so DeepSpeed's progress line never prints under the
  // Trainer (which logs every --logging_steps itself). ZeroRT's "never" is an unset value.
  if (root.contains("steps_per_print")) {
    ZRT_LOG_INFO(
        "steps_per_print: ignored under the HF Trainer (accelerate silences DeepSpeed's "
        "progress line; the Trainer logs every --logging_steps)");
    root.erase("steps_per_print");
  }
}

void accelerate_mixed_precision(HfTrainerDeepSpeedConfig& hf, const TrainingArguments& args) {
  Json& root = hf.config().json();
  const std::string mixed = args.fp16 ? "fp16" : args.bf16 ? "bf16" : "no";
  if (mixed == "fp16" && !root.contains("fp16")) {
    root["fp16"] = {{"enabled", true}, {"auto_cast", true}};
  } else if (mixed == "bf16" && !root.contains("bf16")) {
    root["bf16"] = {{"enabled", true}};
  }
  if (mixed != "no") {
    const std::string other = mixed == "fp16" ? "bf16" : "fp16";
    auto it = root.find(other);
    if (it != root.end() && it->is_object() && it->contains("enabled")) {
      std::string text = py_str((*it)["enabled"]);
      std::transform(text.begin(), text.end(), text.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      if (text == "true") {
        throw ConfigError(str("`--mixed_precision` arg cannot be set to `", mixed, "` when `",
                              other, "` is set in the DeepSpeed config file."));
      }
    }
  }
  for (const char* type : {"fp16", "bf16"}) {
    if (!root.contains(type)) root[type] = {{"enabled", false}};
  }
  fill_auto(hf.config(), "fp16.enabled", mixed == "fp16");
  fill_auto(hf.config(), "bf16.enabled", mixed == "bf16");
}

void accelerate_prepare_fill(HfTrainerDeepSpeedConfig& hf, const TrainingArguments& args,
                             const AcceleratePrepareInputs& inputs) {
  DeepSpeedConfig& ds = hf.config();
  fill_auto(ds, "gradient_accumulation_steps", args.gradient_accumulation_steps);
  std::vector<std::pair<std::string, Json>> kwargs = {
      {"gradient_clipping", 1.0},
      {"zero_optimization.stage3_gather_16bit_weights_on_model_save", false}};
  add_batch_kwargs(ds, inputs.world_size, kwargs);
  add_hidden_size_kwargs(ds, inputs.model, kwargs);
  if (inputs.config_optimizer) {  // DummyOptim(params): lr 0.001, weight decay 0
    kwargs.emplace_back("optimizer.params.lr", 0.001);
    kwargs.emplace_back("optimizer.params.weight_decay", 0);
  }
  if (inputs.config_scheduler) {  // DummyScheduler(optimizer): no total, 0 warmup steps
    kwargs.emplace_back("scheduler.params.warmup_min_lr", 0);
    kwargs.emplace_back("scheduler.params.warmup_max_lr", inputs.optimizer_lr.value_or(0.001));
    if (inputs.num_training_steps_known) {
      kwargs.emplace_back("scheduler.params.warmup_num_steps", 1);
    }
  }
  std::vector<std::string> autos;
  collect_autos(ds.json(), "", autos);
  std::vector<std::string> problems;
  for (const std::string& key : autos) {
    auto found =
        std::find_if(kwargs.begin(), kwargs.end(), [&](const auto& kv) { return kv.first == key; });
    if (found != kwargs.end()) {
      fill_auto(ds, key, found->second);
    } else if (inputs.num_training_steps_known || (key != "scheduler.params.total_num_steps" &&
                                                   key != "scheduler.params.warmup_num_steps")) {
      problems.push_back(str(key,
                             " is \"auto\", which nothing fills on the HF-Trainer path "
                             "(accelerate: \"`",
                             key, "` not found in kwargs\"); set a value"));
    }
  }
  if (problems.size() == 1) throw ConfigError(problems.front());
  if (!problems.empty()) {
    std::string message = str(problems.size(), " \"auto\" values that nothing fills:");
    for (const auto& p : problems) message += "\n" + p;
    throw ConfigError(message);
  }
}

}  // namespace zrt::config
