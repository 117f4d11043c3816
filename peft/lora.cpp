#include "peft/lora.h"

#include <cmath>
#include <cstring>
#include <regex>
#include <set>

#include "core/error.h"

namespace zrt::lora {

// Note [LoRA]
// PEFT's LoRA on a Linear layer y = W x + b: two matrices A (r x in) and B (out x r), the
// layer's output becoming W x + b + s · B A dropout(x) with s = lora_alpha / r (rsLoRA:
// lora_alpha / sqrt(r)). A starts Kaiming-uniform (a = sqrt(5): bound 1/sqrt(in)), B at zero, so
// the adapted model starts as the base model. Every other parameter is frozen, except the
// modules_to_save, trained whole. The adapter is two children of the layer itself, named as
// PEFT names them once the adapter name is dropped ("q_proj.lora_A.weight"); the layer's own
// parameters keep their names, so base checkpoints load by name. Under ZeRO-3 the adapters sit in
// the unit of their layer, gathered with the frozen base they adapt (Note [Frozen parameters under
// ZeRO-3], zero/stage3_layout.cpp). Merging adds s · B A into W (unmerging subtracts it); a
// merged adapter is skipped by linear(). PEFT's saved adapter names its tensors
// "base_model.model." + the parameter name (peft_key).

namespace {

// The adapter's down projection, carrying what linear() needs besides the weights.
struct LoraAImpl : torch::nn::LinearImpl {
  LoraAImpl(int64_t in, int64_t r, double scaling, double dropout)
      : torch::nn::LinearImpl(torch::nn::LinearOptions(in, r).bias(false)),
        scaling(scaling),
        dropout(dropout) {}
  double scaling;
  double dropout;
  bool merged = false;
  int64_t uses = 0;
  // The adapter's up projection, the layer's sibling child "lora_B" (set by apply()), so that
  // linear() finds both with one look at the layer's children.
  torch::nn::LinearImpl* b = nullptr;
};

LoraAImpl* adapter_of(const torch::nn::Module& layer) {
  for (const auto& child : layer.named_children()) {
    if (child.key() == "lora_A") return dynamic_cast<LoraAImpl*>(child.value().get());
  }
  return nullptr;
}

std::string last_component(const std::string& name) {
  const size_t dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(dot + 1);
}

bool names_match(const std::string& name, const std::vector<std::string>& targets) {
  for (const std::string& t : targets) {
    if (name == t ||
        (name.size() > t.size() && name.compare(name.size() - t.size(), t.size(), t) == 0 &&
         name[name.size() - t.size() - 1] == '.')) {
      return true;
    }
  }
  return false;
}

// The modules whose name the config targets, in registration order.
std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> targets_of(
    torch::nn::Module& model, const LoraConfig& config) {
  std::set<std::string> all;  // "all-linear": every Linear's full name but the output layer's
  if (config.all_linear) {
    for (const auto& m : model.named_modules("", /*include_self=*/false)) {
      if (dynamic_cast<torch::nn::LinearImpl*>(m.value().get()) != nullptr &&
          dynamic_cast<LoraAImpl*>(m.value().get()) == nullptr && m.key() != "lm_head") {
        all.insert(m.key());
      }
    }
  }
  const std::regex re(config.target_regex.empty() ? std::string("^$") : config.target_regex);
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> out;
  for (const auto& m : model.named_modules("", /*include_self=*/false)) {
    const std::string& name = m.key();
    const std::string last = last_component(name);
    if (name.empty() || last == "lora_A" || last == "lora_B") continue;
    if (dynamic_cast<Unadaptable*>(m.value().get()) != nullptr) continue;
    const bool hit = config.all_linear             ? all.count(name) != 0
                     : config.target_regex.empty() ? names_match(name, config.target_modules)
                                                   : std::regex_match(name, re);
    if (hit) out.emplace_back(name, m.value());
  }
  return out;
}

}  // namespace

double LoraConfig::scaling() const {
  return use_rslora ? lora_alpha / std::sqrt(static_cast<double>(r))
                    : lora_alpha / static_cast<double>(r);
}

void LoraConfig::validate(const std::string& context) const {
  ZRT_CHECK_AS(ConfigError, r > 0, context, ": r must be positive, got ", r);
  ZRT_CHECK_AS(ConfigError, lora_dropout >= 0.0 && lora_dropout < 1.0, context,
               ": lora_dropout must be in [0, 1), got ", lora_dropout);
  const int ways =
      (target_modules.empty() ? 0 : 1) + (target_regex.empty() ? 0 : 1) + (all_linear ? 1 : 0);
  ZRT_CHECK_AS(ConfigError, ways == 1, context,
               ": target_modules must name the layers to adapt (a list of names, one regular "
               "expression, or \"all-linear\")",
               ways > 1 ? "; it was given more than one way" : "");
  if (!target_regex.empty()) {
    try {
      std::regex check(target_regex);
    } catch (const std::regex_error& e) {
      throw ConfigError(str(context, ": target_modules: '", target_regex,
                            "' is not a regular expression (", e.what(), ")"));
    }
  }
}

Json LoraConfig::to_peft_json(const std::string& base_model_name_or_path) const {
  Json targets;
  if (all_linear) {
    targets = "all-linear";
  } else if (!target_regex.empty()) {
    targets = target_regex;
  } else {
    targets = target_modules;
  }
  return {{"peft_type", "LORA"},
          {"task_type", "CAUSAL_LM"},
          {"base_model_name_or_path", base_model_name_or_path},
          {"r", r},
          {"lora_alpha", lora_alpha},
          {"lora_dropout", lora_dropout},
          {"target_modules", targets},
          {"bias", "none"},
          {"use_rslora", use_rslora},
          {"use_dora", false},
          {"fan_in_fan_out", false},
          {"init_lora_weights", true},
          {"modules_to_save", modules_to_save.empty() ? Json(nullptr) : Json(modules_to_save)},
          {"layers_to_transform", nullptr},
          {"layers_pattern", nullptr},
          {"rank_pattern", Json::object()},
          {"alpha_pattern", Json::object()},
          {"inference_mode", true},
          {"revision", nullptr}};
}

LoraConfig LoraConfig::from_peft_json(const Json& j, const std::string& context) {
  ZRT_CHECK_AS(ConfigError, j.is_object(), context, ": not a JSON object");
  auto key = [&](const char* k) { return j.contains(k) && !j.at(k).is_null(); };
  const std::string type = key("peft_type") ? j.at("peft_type").get<std::string>() : "";
  ZRT_CHECK_AS(ConfigError, type == "LORA", context, ": peft_type is '", type,
               "'; only LORA adapters are supported");
  ZRT_CHECK_AS(ConfigError, !key("bias") || j.at("bias") == "none", context, ": bias ",
               j.value("bias", Json()).dump(), " is not supported (only \"none\")");
  for (const char* off : {"fan_in_fan_out", "use_dora", "lora_bias", "use_qalora"}) {
    ZRT_CHECK_AS(ConfigError, !key(off) || !j.at(off).get<bool>(), context, ": ", off,
                 " true is not supported");
  }
  for (const char* unset :
       {"exclude_modules", "target_parameters", "trainable_token_indices", "layer_replication"}) {
    ZRT_CHECK_AS(ConfigError, !key(unset) || j.at(unset).empty(), context, ": ", unset,
                 " is not supported");
  }
  for (const char* empty : {"rank_pattern", "alpha_pattern"}) {
    ZRT_CHECK_AS(ConfigError, !key(empty) || j.at(empty).empty(), context, ": ", empty,
                 " (per-layer ranks or alphas) is not supported");
  }
  ZRT_CHECK_AS(ConfigError, !key("layers_to_transform"), context,
               ": layers_to_transform is not supported");
  LoraConfig c;
  try {
    c.r = j.at("r").get<int64_t>();
    c.lora_alpha = j.at("lora_alpha").get<double>();
    c.lora_dropout = j.value("lora_dropout", 0.0);
    c.use_rslora = j.value("use_rslora", false);
    const Json& t = j.at("target_modules");
    if (t.is_string() && t.get<std::string>() == "all-linear") {
      c.all_linear = true;
    } else if (t.is_string()) {
      c.target_regex = t.get<std::string>();
    } else {
      c.target_modules = t.get<std::vector<std::string>>();
    }
    if (key("modules_to_save"))
      c.modules_to_save = j.at("modules_to_save").get<std::vector<std::string>>();
  } catch (const Json::exception& e) {
    throw ConfigError(str(context, ": ", e.what()));
  }
  c.validate(context);
  return c;
}

Applied apply(torch::nn::Module& model, const LoraConfig& config) {
  config.validate("LoRA config");
  const auto targets = targets_of(model, config);
  ZRT_CHECK_AS(ConfigError, !targets.empty(), "LoRA config: target_modules match no module of ",
               "the model");
  for (const auto& [name, module] : targets) {
    auto* linear = dynamic_cast<torch::nn::LinearImpl*>(module.get());
    ZRT_CHECK_AS(ConfigError, linear != nullptr, "LoRA config: target_modules matches '", name,
                 "', which is not a Linear layer");
    ZRT_CHECK_AS(ConfigError, adapter_of(*module) == nullptr, "LoRA: '", name,
                 "' has an adapter already");
  }
  for (const std::string& m : config.modules_to_save) {
    bool found = false;
    for (const auto& named : model.named_modules("", /*include_self=*/false))
      found = found || names_match(named.key(), {m});
    ZRT_CHECK_AS(ConfigError, found, "LoRA config: modules_to_save names '", m,
                 "', which is no module of the model");
  }
  Applied applied;
  for (const auto& [name, module] : targets) {
    auto* linear = dynamic_cast<torch::nn::LinearImpl*>(module.get());
    const at::TensorOptions like = linear->weight.options();
    const int64_t in = linear->options.in_features(), out = linear->options.out_features();
    auto a = std::make_shared<LoraAImpl>(in, config.r, config.scaling(), config.lora_dropout);
    auto b = std::make_shared<torch::nn::LinearImpl>(
        torch::nn::LinearOptions(config.r, out).bias(false));
    {
      torch::NoGradGuard no_grad;
      torch::nn::init::kaiming_uniform_(a->weight, std::sqrt(5.0));
      b->weight.zero_();
    }
    a->to(like.device(), like.dtype().toScalarType());
    b->to(like.device(), like.dtype().toScalarType());
    a->train(module->is_training());  // the mode of the model they join
    b->train(module->is_training());
    a->b = b.get();
    module->register_module("lora_A", a);
    module->register_module("lora_B", b);
    applied.adapted.push_back(name);
  }
  std::vector<std::string> saved_prefixes;
  for (const auto& m : model.named_modules("", /*include_self=*/false)) {
    if (names_match(m.key(), config.modules_to_save)) {
      applied.saved.push_back(m.key());
      saved_prefixes.push_back(m.key() + ".");
    }
  }
  for (auto& p : model.named_parameters()) {
    const std::string& n = p.key();
    bool trainable =
        n.find(".lora_A.") != std::string::npos || n.find(".lora_B.") != std::string::npos;
    for (const std::string& prefix : saved_prefixes)
      trainable = trainable || n.rfind(prefix, 0) == 0;
    p.value().requires_grad_(trainable);
    applied.all_params += p.value().numel();
    if (trainable) applied.trainable_params += p.value().numel();
  }
  return applied;
}

torch::Tensor linear(torch::nn::Linear layer, const torch::Tensor& x) {
  torch::Tensor y = layer->forward(x);
  LoraAImpl* a = adapter_of(*layer);
  if (a == nullptr || a->merged) return y;
  ++a->uses;
  const torch::Tensor in = a->dropout > 0.0 ? torch::dropout(x, a->dropout, a->is_training()) : x;
  return y + a->b->forward(a->forward(in)) * a->scaling;
}

std::vector<std::string> unused_adapters(torch::nn::Module& model) {
  std::vector<std::string> out;
  for (const auto& m : model.named_modules("", /*include_self=*/false)) {
    const LoraAImpl* a = adapter_of(*m.value());
    if (a != nullptr && a->uses == 0 && !a->merged) out.push_back(m.key());
  }
  return out;
}

namespace {

void merge_all(torch::nn::Module& model, bool merging) {
  torch::NoGradGuard no_grad;
  for (const auto& m : model.named_modules("", /*include_self=*/false)) {
    LoraAImpl* a = adapter_of(*m.value());
    if (a == nullptr) continue;
    ZRT_CHECK(a->merged != merging, "LoRA: the adapter of '", m.key(), "' is ",
              merging ? "merged already" : "not merged");
    auto* linear = dynamic_cast<torch::nn::LinearImpl*>(m.value().get());
    const torch::Tensor delta = delta_weight(a->weight, a->b->weight, a->scaling);
    if (merging) {
      linear->weight.add_(delta);
    } else {
      linear->weight.sub_(delta);
    }
    a->merged = merging;
  }
}

}  // namespace

torch::Tensor delta_weight(const torch::Tensor& lora_a, const torch::Tensor& lora_b,
                           double scaling) {
  const bool half = lora_a.scalar_type() == at::kBFloat16 || lora_a.scalar_type() == at::kHalf;
  if (!half) return lora_b.matmul(lora_a) * scaling;
  return (lora_b.to(at::kFloat).matmul(lora_a.to(at::kFloat)) * scaling).to(lora_a.scalar_type());
}

std::map<std::string, double> adapted_layers(const torch::nn::Module& model) {
  std::map<std::string, double> out;
  for (const auto& m : model.named_modules("", /*include_self=*/false)) {
    const LoraAImpl* a = adapter_of(*m.value());
    if (a != nullptr && !a->merged) out[m.key()] = a->scaling;
  }
  return out;
}

void merge(torch::nn::Module& model) { merge_all(model, true); }
void unmerge(torch::nn::Module& model) { merge_all(model, false); }

std::string peft_key(const std::string& param_name, const LoraConfig& config) {
  const bool adapter = param_name.find(".lora_A.") != std::string::npos ||
                       param_name.find(".lora_B.") != std::string::npos;
  bool saved = false;  // inside a module to save: some prefix of the name is one
  for (size_t at = param_name.find('.'); at != std::string::npos && !saved;
       at = param_name.find('.', at + 1)) {
    saved = names_match(param_name.substr(0, at), config.modules_to_save);
  }
  return adapter || saved ? "base_model.model." + param_name : std::string();
}

std::function<std::string(const std::string&)> peft_model_names(const torch::nn::Module& model) {
  std::set<std::string> adapted;
  for (const auto& m : model.named_modules("", /*include_self=*/false))
    if (adapter_of(*m.value()) != nullptr) adapted.insert(m.key());
  return [adapted](const std::string& name) {
    const size_t dot = name.rfind('.');
    const std::string owner = dot == std::string::npos ? std::string() : name.substr(0, dot);
    const std::string last = dot == std::string::npos ? name : name.substr(dot + 1);
    const size_t up = owner.rfind('.');
    const std::string part = up == std::string::npos ? owner : owner.substr(up + 1);
    if (part == "lora_A" || part == "lora_B") return "base_model.model." + owner + ".default." + last;
    if (adapted.count(owner) != 0) return "base_model.model." + owner + ".base_layer." + last;
    return "base_model.model." + name;
  };
}

std::string param_name_of(const std::string& key) {
  const std::string prefix = "base_model.model.";
  if (key.rfind(prefix, 0) != 0) return "";
  std::string name = key.substr(prefix.size());
  for (const char* part : {".lora_A.default.", ".lora_B.default."}) {
    const size_t at = name.find(part);
    if (at != std::string::npos)
      name.replace(at, std::strlen(part), std::string(part).substr(0, 8));
  }
  return name;
}

}  // namespace zrt::lora
