#include "tools/train_peft.h"

#include <cstdio>
#include <filesystem>

#include "checkpoint/storage.h"
#include "core/error.h"
#include "core/logging.h"
#include "hf/adapter.h"
#include "hf/pretrained.h"

namespace zrt::tools {

void add_peft_options(cxxopts::Options& options) {
  options.add_options("peft")("use_peft", "train LoRA adapters on the frozen model (TRL's flag)",
                              cxxopts::value<bool>()->implicit_value("true"))(
      "lora_r", "LoRA rank (default 16)", cxxopts::value<int64_t>())(
      "lora_alpha", "LoRA alpha; the adapters' scale is alpha / r (default 32)",
      cxxopts::value<double>())("lora_dropout", "dropout on the adapters' input (default 0.05)",
                                cxxopts::value<double>())(
      "lora_target_modules",
      "the Linear layers to adapt: names (PEFT's suffix matching), \"all-linear\", or one regular "
      "expression (default: q_proj v_proj, PEFT's for LLaMA, Mistral, Qwen2 and Mixtral)",
      cxxopts::value<std::vector<std::string>>())("use_rslora",
                                                  "scale the adapters by alpha / sqrt(r)",
                                                  cxxopts::value<bool>()->implicit_value("true"))(
      "lora_modules_to_save", "modules trained whole beside the adapters (e.g. lm_head)",
      cxxopts::value<std::vector<std::string>>())(
      "adapter_name_or_path",
      "a PEFT adapter folder (adapter_config.json, adapter_model.safetensors) to continue "
      "training from, on the base model --model_name_or_path",
      cxxopts::value<std::string>())(
      "merge_adapter",
      "after training, the final model in --output_dir merged (PEFT's merge_and_unload: a full "
      "model folder from_pretrained loads), the adapter folder in --output_dir/adapter; needs "
      "training",
      cxxopts::value<bool>()->implicit_value("true"));
}

void refuse_peft_options(const cxxopts::ParseResult& result, const std::string& model) {
  for (const char* f : {"use_peft", "lora_r", "lora_alpha", "lora_dropout", "lora_target_modules",
                        "use_rslora", "lora_modules_to_save", "adapter_name_or_path",
                        "merge_adapter"}) {
    ZRT_CHECK_AS(UsageError, result.count(f) == 0, "--", f, " with --model ", model,
                 ": LoRA adapters are built for the LLaMA family (--model llama) only");
  }
}

std::vector<std::string> join_list_flag_values(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    out.push_back(args[i]);
    if (args[i] != "--lora_target_modules" && args[i] != "--lora_modules_to_save") continue;
    std::string joined;
    while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) {
      joined += (joined.empty() ? "" : ",") + args[++i];
    }
    if (!joined.empty()) out.push_back(joined);
  }
  return out;
}

void refuse_merge_without_training(const cxxopts::ParseResult& result, bool do_train) {
  ZRT_CHECK_AS(UsageError,
               do_train || !(result.count("merge_adapter") && result["merge_adapter"].as<bool>()),
               "--merge_adapter merges the adapter after training, and this command line does "
               "not train (--do_eval / --do_predict without --do_train): add --do_train");
}

namespace {

bool is_regex(const std::string& s) {
  return s.find_first_of("*+?[](){}|^$\\") != std::string::npos;
}

}  // namespace

std::optional<lora::LoraConfig> peft_config(const cxxopts::ParseResult& result,
                                            const models::LlamaConfig& model) {
  const bool use_peft = result.count("use_peft") && result["use_peft"].as<bool>();
  std::vector<std::string> lora_flags;
  for (const char* f : {"lora_r", "lora_alpha", "lora_dropout", "lora_target_modules", "use_rslora",
                        "lora_modules_to_save"}) {
    if (result.count(f)) lora_flags.push_back(std::string("--") + f);
  }
  if (result.count("adapter_name_or_path")) {
    ZRT_CHECK_AS(UsageError, lora_flags.empty(), lora_flags.empty() ? "" : lora_flags.front(),
                 " with --adapter_name_or_path: the adapter's adapter_config.json decides it");
    return read_adapter_config(result["adapter_name_or_path"].as<std::string>());
  }
  if (!use_peft) {
    if (result.count("merge_adapter")) lora_flags.push_back("--merge_adapter");
    ZRT_CHECK_AS(UsageError, lora_flags.empty(), lora_flags.empty() ? "" : lora_flags.front(),
                 " has no effect without --use_peft or --adapter_name_or_path");
    return std::nullopt;
  }
  lora::LoraConfig c;
  c.r = result.count("lora_r") ? result["lora_r"].as<int64_t>() : 16;
  c.lora_alpha = result.count("lora_alpha") ? result["lora_alpha"].as<double>() : 32.0;
  c.lora_dropout = result.count("lora_dropout") ? result["lora_dropout"].as<double>() : 0.05;
  c.use_rslora = result.count("use_rslora") && result["use_rslora"].as<bool>();
  if (result.count("lora_modules_to_save"))
    c.modules_to_save = result["lora_modules_to_save"].as<std::vector<std::string>>();
  // PEFT's defaults where it has them (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING); the
  // MoE families without one must name theirs, as PEFT requires.
  const bool has_default = model.model_type == "llama" || model.model_type == "mistral" ||
                           model.model_type == "qwen2" || model.model_type == "mixtral";
  ZRT_CHECK_AS(UsageError, has_default || result.count("lora_target_modules"), "--use_peft on a ",
               model.model_type, " model needs --lora_target_modules (PEFT has no default for it)");
  std::vector<std::string> targets = {"q_proj", "v_proj"};
  if (result.count("lora_target_modules"))
    targets = result["lora_target_modules"].as<std::vector<std::string>>();
  if (targets.size() == 1 && targets[0] == "all-linear") {
    c.all_linear = true;
  } else if (targets.size() == 1 && is_regex(targets[0])) {
    c.target_regex = targets[0];
  } else {
    c.target_modules = targets;
  }
  c.validate(str("--use_peft (", models::family_name(model), ")"));
  return c;
}

void apply_peft(torch::nn::Module& model, const lora::LoraConfig& config, int rank) {
  const lora::Applied a = lora::apply(model, config);
  if (rank != 0) return;
  char line[160];
  std::snprintf(
      line, sizeof(line), "trainable params: %lld || all params: %lld || trainable%%: %.4f",
      static_cast<long long>(a.trainable_params), static_cast<long long>(a.all_params),
      100.0 * static_cast<double>(a.trainable_params) / static_cast<double>(a.all_params));
  ZRT_LOG_INFO(
      "LoRA r ", config.r, ", alpha ", config.lora_alpha, " on ", a.adapted.size(), " layers",
      a.saved.empty() ? "" : str(", ", a.saved.size(), " modules trained whole"), ": ", line);
}

LossFn checked_adapter_loss(LossFn loss, std::shared_ptr<torch::nn::Module> model) {
  auto checked = std::make_shared<bool>(false);
  return [loss, model, checked](torch::nn::Module& m, const at::Tensor& x, const at::Tensor& y) {
    at::Tensor out = loss(m, x, y);
    if (!*checked) {
      *checked = true;
      const std::vector<std::string> unused = lora::unused_adapters(*model);
      std::string names;
      for (const std::string& n : unused) names += (names.empty() ? "" : ", ") + n;
      ZRT_CHECK_AS(UsageError, unused.empty(), "LoRA: no forward reaches the adapters of ", names,
                   " (the model calls these layers without zrt::lora::linear); they would never "
                   "train — leave them out of the target modules");
    }
    return out;
  };
}

void save_model(Engine& engine, const cxxopts::ParseResult& result,
                const std::optional<models::LlamaConfig>& config,
                const std::optional<lora::LoraConfig>& peft, const std::string& output_dir,
                bool final_model) {
  SavePretrainedOptions so;
  std::error_code ec;
  for (const char* flag : {"model_name_or_path", "config_name"}) {
    if (so.extra_files_from.empty() && result.count(flag) &&
        std::filesystem::is_directory(result[flag].as<std::string>(), ec)) {
      so.extra_files_from = result[flag].as<std::string>();
    }
  }
  const bool merged = peft && final_model && result.count("merge_adapter") &&
                      result["merge_adapter"].as<bool>();
  if (peft) {  // PEFT's save_pretrained: the adapter alone, small enough to gather at any stage
    std::string base = so.extra_files_from;
    if (base.empty() && result.count("config_name")) base = result["config_name"].as<std::string>();
    save_adapter(engine, merged ? ckpt::join_path(output_dir, "adapter") : output_dir, *peft, base);
    if (!merged) return;
  }
  so.weights = final_model || engine.zero_stage() != 3 ||
               engine.config().zero.gather_16bit_weights_on_model_save;
  if (!so.weights) {
    ZRT_LOG_WARN(
        " stage3_gather_16bit_weights_on_model_save=false. Saving the full checkpoint "
        "instead, use zero_to_fp32.py to recover weights");
  }
  if (!config) {  // ZeroRT's example GPT or MLP: the weights alone (no HF architecture)
    so.extra_files_from.clear();
    if (so.weights) save_pretrained(engine, output_dir, so);
    return;
  }
  so.config = config->to_json();
  so.max_shard_size = result["max_shard_size"].as<int64_t>();
  so.extra_files = hf_tokenizer_and_generation_files();
  if (merged) {
    // An adapter folder's files left in output_dir by an earlier run would make from_pretrained
    // take the merged folder for an adapter and apply it on top of its base.
    for (const char* stale : {"adapter_config.json", "adapter_model.safetensors"}) {
      const std::string path = ckpt::join_path(output_dir, stale);
      std::error_code gone;
      if (engine.comm().rank() == 0 && std::filesystem::remove(path, gone)) {
        ZRT_LOG_WARN("removed ", path, " (an earlier run's adapter): ", output_dir,
                     " now holds the merged model, the adapter is in ", output_dir, "/adapter");
      }
    }
    save_merged(engine, output_dir, so);
  } else {
    save_pretrained(engine, output_dir, so);
  }
}

}  // namespace zrt::tools
