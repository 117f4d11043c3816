#include "hf/adapter.h"

#include <fstream>
#include <map>
#include <sstream>

#include "checkpoint/storage.h"
#include "core/error.h"
#include "core/json.h"
#include "runtime/engine.h"

namespace zrt {

namespace {

constexpr const char* kConfigFile = "adapter_config.json";
constexpr const char* kWeightsFile = "adapter_model.safetensors";

}  // namespace

void save_adapter(Engine& engine, const std::string& dir, const lora::LoraConfig& config,
                  const std::string& base_model_name_or_path) {
  SavePretrainedOptions options;
  options.rename = [&config](const std::string& name) { return lora::peft_key(name, config); };
  options.weights_name = kWeightsFile;
  save_pretrained(engine, dir, options);
  std::exception_ptr failure;
  try {
    if (engine.comm().rank() == 0) {
      ckpt::PosixStorage storage;
      storage.write_file_atomic(ckpt::join_path(dir, kConfigFile),
                                config.to_peft_json(base_model_name_or_path).dump(2) + "\n");
    }
  } catch (const std::exception&) {
    failure = std::current_exception();
  }
  at::Tensor flag = at::full({1}, failure ? 1 : 0, at::kByte);
  engine.comm().all_reduce(flag, comm::ReduceOp::kMax);
  if (failure) std::rethrow_exception(failure);
  ZRT_CHECK_AS(CheckpointError, flag.item<uint8_t>() == 0, dir,
               ": rank 0 failed to write adapter_config.json (its error names the problem)");
}

void save_merged(Engine& engine, const std::string& dir, SavePretrainedOptions options) {
  const std::map<std::string, double> adapted = lora::adapted_layers(engine.module());
  auto layer_of = [](const std::string& name, const char* suffix) {
    const std::string s = suffix;
    const bool has = name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
    return has ? name.substr(0, name.size() - s.size()) : std::string();
  };
  ZRT_CHECK(!options.rename && !options.transform,
            "save_merged: the names and values are the merge's own");
  options.rename = [&adapted, layer_of](const std::string& name) {
    for (const char* adapter : {".lora_A.weight", ".lora_B.weight"}) {
      if (adapted.count(layer_of(name, adapter)) != 0) return std::string();
    }
    return name;
  };
  options.transform = [&adapted, layer_of](const std::string& name, const at::Tensor& value,
                                           const std::function<at::Tensor(const std::string&)>&
                                               whole_of) {
    const std::string layer = layer_of(name, ".weight");
    auto it = adapted.find(layer);
    if (it == adapted.end()) return value;
    const at::Tensor a = whole_of(layer + ".lora_A.weight");
    const at::Tensor b = whole_of(layer + ".lora_B.weight");
    return value.add(lora::delta_weight(a, b, it->second).to(value.device()));
  };
  save_pretrained(engine, dir, options);
}

lora::LoraConfig read_adapter_config(const std::string& dir) {
  const std::string path = ckpt::join_path(dir, kConfigFile);
  std::ifstream in(path);
  ZRT_CHECK_AS(ConfigError, in.good(), path, ": cannot read the adapter's config (is ", dir,
               " a PEFT adapter folder?)");
  std::stringstream text;
  text << in.rdbuf();
  Json j;
  try {
    j = Json::parse(text.str());
  } catch (const Json::exception& e) {
    throw ConfigError(str(path, ": not valid JSON (", e.what(), ")"));
  }
  return lora::LoraConfig::from_peft_json(j, path);
}

PretrainedLoadReport load_adapter(Engine& engine, const std::string& dir) {
  const lora::LoraConfig config = read_adapter_config(dir);
  PretrainedLoadOptions options;
  options.rename = [](const std::string& key) { return lora::param_name_of(key); };
  options.only = [&config](const std::string& name) {
    return !lora::peft_key(name, config).empty();
  };
  return load_pretrained(engine, ckpt::join_path(dir, kWeightsFile), options);
}

}  // namespace zrt
