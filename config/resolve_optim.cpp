// Resolves "optimizer" (docs/DEEPSPEED.md §1.7). Name resolution follows DeepSpeed: names in
// its own list match case-insensitively, anything else must be an exact torch.optim class name.
// ZeroRT implements Adam, AdamW (FusedAdam / CPU Adam math) and SGD; every other optimizer
// DeepSpeed or torch knows is a clear ConfigError. "Adam" means AdamW unless adam_w_mode is
// false, and "params" are checked like constructor keyword arguments (unknown ones are errors).
#include <algorithm>
#include <cctype>
#include <string>

#include "config/keys.h"
#include "config/resolve_sections.h"
#include "config/section_reader.h"
#include "core/error.h"

namespace zrt::config::detail {
namespace {

const keys::KeyList kDeepSpeedOptimizers = {"adagrad",    "adam",        "adamw",      "lamb",
                                            "onebitadam", "zerooneadam", "onebitlamb", "muadam",
                                            "muadamw",    "musgd",       "lion",       "muon"};
const keys::KeyList kTorchOptimizers = {"Adadelta",   "Adafactor", "Adagrad", "Adam",  "AdamW",
                                        "SparseAdam", "Adamax",    "ASGD",    "LBFGS", "NAdam",
                                        "RAdam",      "RMSprop",   "Rprop",   "SGD"};

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool contains(const keys::KeyList& list, std::string_view name) {
  return std::find(list.begin(), list.end(), name) != list.end();
}

void read_betas(SectionReader& p, optim::AdamOptions& adam) {
  const Json* betas = p.get("betas");
  if (!betas) return;
  const bool ok = betas->is_array() && betas->size() == 2 && (*betas)[0].is_number() &&
                  (*betas)[1].is_number() &&
                  NumberRange::unit_open().contains((*betas)[0].get<double>()) &&
                  NumberRange::unit_open().contains((*betas)[1].get<double>());
  if (!ok) {
    p.error("betas", str("expected a list of two numbers in [0, 1), got ",
                         betas->is_array() ? betas->dump() : describe_value(*betas)));
    return;
  }
  adam.beta1 = (*betas)[0].get<double>();
  adam.beta2 = (*betas)[1].get<double>();
}

// The keyword arguments of the class DeepSpeed 0.19 builds for "Adam" / "AdamW" that ZeroRT
// reads. FusedAdam takes all of them; with ZeRO-Offload DeepSpeedCPUAdam has no set_grad_none;
// torch_adam's torch.optim.AdamW / Adam have neither bias_correction nor set_grad_none.
void check_adam_class_keywords(SectionReader& p, bool torch_adam, bool cpu_offload) {
  const char* cls = torch_adam
                        ? "torch.optim.AdamW / torch.optim.Adam (torch_adam)"
                        : "DeepSpeedCPUAdam (the optimizer DeepSpeed builds with ZeRO-Offload)";
  for (const char* key : {"bias_correction", "set_grad_none"}) {
    const bool refused = torch_adam || (cpu_offload && std::string_view(key) == "set_grad_none");
    if (refused && p.has(key)) p.error(key, str("not a parameter of ", cls));
  }
}

optim::OptimizerSpec resolve_adam(const std::string& type_name, bool named_adamw,
                                  const Json& params, bool cpu_offload, Diagnostics& diag) {
  optim::OptimizerSpec spec;
  spec.type_name = type_name;
  optim::AdamOptions& adam = spec.adam;
  SectionReader p(params, "optimizer.params", diag);
  p.check_unknown_keys(keys::kAdamParams, /*strict=*/true);
  if (auto v = p.get_bool("torch_adam")) adam.torch_adam = *v;
  check_adam_class_keywords(p, adam.torch_adam, cpu_offload);
  bool adam_w_mode = true;
  if (auto v = p.get_bool("adam_w_mode")) adam_w_mode = *v;
  adam.adam_w_mode = named_adamw || adam_w_mode;
  spec.kind = adam.adam_w_mode ? optim::OptimizerKind::kAdamW : optim::OptimizerKind::kAdam;
  // torch.optim.AdamW's own default weight decay is 0.01 (FusedAdam's is 0).
  if (adam.torch_adam && adam.adam_w_mode) adam.weight_decay = 0.01;
  if (auto v = p.get_number("lr", NumberRange::non_negative())) adam.lr = *v;
  read_betas(p, adam);
  if (auto v = p.get_number("eps", NumberRange::non_negative())) adam.eps = *v;
  if (auto v = p.get_number("weight_decay", NumberRange::non_negative())) adam.weight_decay = *v;
  if (auto v = p.get_bool("bias_correction")) adam.bias_correction = *v;
  if (auto v = p.get_bool("amsgrad"); v && *v) {
    p.error("amsgrad", "the AMSGrad variant is not supported by ZeroRT (nor by FusedAdam)");
  }
  p.get_bool("set_grad_none");
  return spec;
}

optim::OptimizerSpec resolve_sgd(const std::string& type_name, const Json& params,
                                 Diagnostics& diag) {
  optim::OptimizerSpec spec;
  spec.kind = optim::OptimizerKind::kSgd;
  spec.type_name = type_name;
  optim::SgdOptions& sgd = spec.sgd;
  SectionReader p(params, "optimizer.params", diag);
  p.check_unknown_keys(keys::kSgdParams, /*strict=*/true);
  if (auto v = p.get_number("lr", NumberRange::non_negative())) sgd.lr = *v;
  if (auto v = p.get_number("momentum", NumberRange::non_negative())) sgd.momentum = *v;
  if (auto v = p.get_number("dampening")) sgd.dampening = *v;
  if (auto v = p.get_number("weight_decay", NumberRange::non_negative())) sgd.weight_decay = *v;
  if (auto v = p.get_bool("nesterov")) sgd.nesterov = *v;
  if (auto v = p.get_bool("maximize"); v && *v) {
    p.error("maximize", "maximize=true is not supported by ZeroRT");
  }
  for (const char* key : {"foreach", "differentiable", "fused"}) p.get_bool(key);
  if (sgd.nesterov && (sgd.momentum <= 0 || sgd.dampening != 0)) {
    p.error("nesterov", "Nesterov momentum requires a momentum and zero dampening");
  }
  return spec;
}

// Whether DeepSpeed builds its CPU Adam: zero_use_cpu_optimizer() reads the offload_optimizer
// section as written, at any stage (ZeroRT ignores an offload at stage 0 with a warning, but
// the optimizer's keyword arguments are DeepSpeedCPUAdam's all the same).
bool config_offloads_optimizer(const Json& root) {
  auto z = root.find("zero_optimization");
  if (z == root.end() || !z->is_object()) return false;
  auto o = z->find("offload_optimizer");
  if (o != z->end() && o->is_object()) {
    auto d = o->find("device");
    return d != o->end() && (*d == "cpu" || *d == "nvme");
  }
  auto deprecated = z->find("cpu_offload");
  return deprecated != z->end() && *deprecated == true;
}

}  // namespace

void resolve_optimizer_section(const Json& root, Diagnostics& diag, ResolvedConfig& out) {
  auto it = root.find("optimizer");
  if (it == root.end() || it->is_null()) return;
  if (is_auto_value(*it)) {
    diag.auto_error("optimizer");
    return;
  }
  if (!it->is_object()) {
    diag.error("optimizer", str("expected an object, got ", describe_value(*it)));
    return;
  }
  SectionReader r(*it, "optimizer", diag);
  r.check_unknown_keys(keys::kOptimizer, /*strict=*/true);
  r.get_bool("legacy_fusion");
  const Json* params = r.get_object("params");
  if (params && params->contains("max_grad_norm")) {
    diag.error(
        "optimizer.params.max_grad_norm",
        "'max_grad_norm' is not supported as an optimizer parameter, please switch to using the "
        "deepspeed parameter 'gradient_clipping' see: "
        "https://www.deepspeed.ai/docs/config-json/#gradient-clipping for more details");
  }
  if (!r.has("type")) {
    r.error("type",
            "missing (DeepSpeed would silently build no optimizer from this section); set "
            "\"AdamW\", \"Adam\" or \"SGD\"");
    return;
  }
  auto name = r.get_string("type");
  if (!name) return;
  // max_grad_norm is reported above; keep it out of the parameter checks.
  Json params_copy = params ? *params : Json::object();
  params_copy.erase("max_grad_norm");
  const Json& p = params_copy;
  const std::string low = lower(*name);
  if (contains(kDeepSpeedOptimizers, low)) {
    if (low == "adam" || low == "adamw") {
      out.optimizer = resolve_adam(*name, low == "adamw", p, config_offloads_optimizer(root), diag);
    } else {
      r.error("type", str("\"", *name,
                          "\" is a DeepSpeed optimizer that ZeroRT does not implement (ZeroRT "
                          "implements Adam, AdamW and SGD)"));
    }
  } else if (contains(kTorchOptimizers, *name)) {
    if (*name == "SGD") {
      out.optimizer = resolve_sgd(*name, p, diag);
    } else {
      r.error("type", str("torch.optim.", *name,
                          " is not implemented by ZeroRT (ZeroRT implements Adam, AdamW and SGD)"));
    }
  } else {
    keys::KeyList candidates = {"Adam", "AdamW", "SGD"};
    candidates.insert(candidates.end(), kDeepSpeedOptimizers.begin(), kDeepSpeedOptimizers.end());
    candidates.insert(candidates.end(), kTorchOptimizers.begin(), kTorchOptimizers.end());
    r.error("type", str(*name, " is not a supported DeepSpeed Optimizer",
                        did_you_mean_suffix(*name, candidates)));
  }
}

}  // namespace zrt::config::detail
