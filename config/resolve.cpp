// resolve_config(): the top-level scalars and batch triad (docs/DEEPSPEED.md §1.2, §1.3), the
// per-section resolvers (resolve_*.cpp), cross-section rules (ZeRO reduce-scatter limits, dtype
// mixes, optimizer acceptance §1.10/§1.12) and the unknown / ignored top-level keys.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string>

#include "config/batch.h"
#include "config/keys.h"
#include "config/resolve_sections.h"
#include "config/resolved.h"
#include "config/section_reader.h"
#include "core/error.h"
#include "core/logging.h"

namespace zrt::config {
namespace {

bool listed(const keys::KeyList& list, std::string_view key) {
  return std::find(list.begin(), list.end(), key) != list.end();
}

void resolve_batch_keys(SectionReader& top, int world_size, Diagnostics& diag,
                        ResolvedConfig& out) {
  bool usable = true;
  auto read = [&](const char* key) -> std::optional<int64_t> {
    if (!top.has(key)) return std::nullopt;
    auto value = top.get_int(key);
    if (!value) usable = false;
    return value;
  };
  auto tbs = read("train_batch_size");
  auto mbs = read("train_micro_batch_size_per_gpu");
  auto gas = read("gradient_accumulation_steps");
  if (!usable) return;  // the type problems are already reported
  try {
    out.batch = resolve_batch(tbs, mbs, gas, world_size);
  } catch (const ConfigError& e) {
    diag.error_text(e.what());
  }
}

void resolve_scalars(SectionReader& top, ResolvedConfig& out) {
  if (auto v = top.get_number("gradient_clipping", NumberRange::non_negative())) {
    out.gradient_clipping = *v;
  }
  if (auto v = top.get_int("steps_per_print", 1)) out.steps_per_print = *v;
  if (auto v = top.get_bool("wall_clock_breakdown")) out.wall_clock_breakdown = *v;
  if (auto v = top.get_bool("memory_breakdown")) out.memory_breakdown = *v;
  if (auto v = top.get_bool("dump_state")) out.dump_state = *v;
  if (auto v = top.get_bool("prescale_gradients")) out.prescale_gradients = *v;
  if (auto v = top.get_number("gradient_predivide_factor", NumberRange::positive())) {
    out.gradient_predivide_factor = *v;
  }
  if (auto v = top.get_string("communication_data_type")) {
    std::string low = *v;
    std::transform(low.begin(), low.end(), low.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (low == "fp32" || low == "fp16" || low == "bf16") {
      out.communication_data_type = parse_dtype(low);
    } else {
      top.error("communication_data_type",
                str("Invalid communication_data_type. Supported data types: ['fp16', 'bf16', "
                    "'fp32']. Got: ",
                    low));
    }
  }
  if (auto v = top.get_bool("zero_allow_untested_optimizer")) {
    out.zero_allow_untested_optimizer = *v;
  }
  if (auto v = top.get_bool("zero_force_ds_cpu_optimizer")) out.zero_force_ds_cpu_optimizer = *v;
  if (auto v = top.get_bool("dataloader_drop_last")) out.dataloader_drop_last = *v;
}

// sequence_parallel_size K (Note [Ulysses sequence parallelism] in zero/sequence_parallel.h):
// at least 1 and dividing the job's ranks; the batch triad then counts world / K data-parallel
// ranks, as DeepSpeed's config divides its world size by the key. 1 when absent or wrong (the
// error is reported).
int resolve_sequence_parallel(SectionReader& top, int world_size) {
  const std::optional<int64_t> sp = top.get_int("sequence_parallel_size", 1);
  if (!sp || *sp == 1) return 1;
  if (world_size % *sp != 0) {
    top.error("sequence_parallel_size",
              str(*sp, " does not divide the job's ", world_size,
                  " ranks (groups of sequence_parallel_size consecutive ranks share a sample)"));
    return 1;
  }
  return static_cast<int>(*sp);
}

// Top-level keys DeepSpeed 0.19 reads that ZeroRT implements only at their defaults (mean
// reduction, managed accumulation), and the data-parallel size that deepspeed.initialize()
// checks against the world (divided by sequence_parallel_size).
void resolve_parallel_keys(SectionReader& top, int world_size) {
  if (auto op = top.get_string("gradient_allreduce_op")) {
    if (*op != "mean" && *op != "sum") {
      top.error("gradient_allreduce_op",
                str("Invalid gradient_allreduce_op. Supported operations: ['mean', 'sum']. Got: ",
                    *op));
    } else if (*op == "sum") {
      top.error("gradient_allreduce_op",
                "'sum' (gradients summed over data-parallel ranks, not averaged) is not supported "
                "by ZeroRT; remove the key or set \"mean\"");
    }
  }
  if (auto managed = top.get_bool("managed_gradient_accumulation"); managed && !*managed) {
    top.error("managed_gradient_accumulation",
              "false (the program reduces gradients itself between boundaries) is not supported "
              "by ZeroRT, whose engine accumulates and reduces them; remove the key or set true");
  }
  if (auto dp = top.get_int("data_parallel_size", 1); dp && *dp != world_size) {
    top.error("data_parallel_size",
              str(*dp, " does not match the job's ", world_size,
                  " data-parallel ranks (the job's ranks / sequence_parallel_size): another "
                  "data-parallel group is not supported by ZeroRT"));
  }
}

// A key DeepSpeed 0.19 removed, as its DeepSpeedConfig refuses it (any value).
bool report_removed(const std::vector<keys::RemovedKey>& removed, std::string_view key,
                    const std::string& path, Diagnostics& diag) {
  for (const keys::RemovedKey& r : removed) {
    if (r.key == key) {
      diag.error(path, str(r.message, " See ", keys::kRemovedFeaturesIssue, "."));
      return true;
    }
  }
  return false;
}

void check_top_level_keys(const Json& root, Diagnostics& diag) {
  for (const auto& [key, value] : root.items()) {
    if (listed(keys::kTopLevel, key)) continue;
    if (report_removed(keys::kRemovedTopLevel, key, key, diag)) continue;
    const std::string& name = key;  // (a structured binding cannot be captured before C++20)
    if (auto it = std::find_if(keys::kNoEffectTopLevel.begin(), keys::kNoEffectTopLevel.end(),
                               [&](const keys::NoEffectKey& k) { return k.key == name; });
        it != keys::kNoEffectTopLevel.end()) {
      if (!value.is_null()) diag.note(str(key, ": ", it->reason, "; no effect"));
      continue;
    }
    if (listed(keys::kIgnoredTopLevel, key)) {
      diag.warn(str(key, ": DeepSpeed section ignored by ZeroRT"));
      continue;
    }
    if (listed(keys::kUnsupportedWhenEnabled, key)) {
      const bool enabled = value.is_object() && value.contains("enabled") &&
                           value["enabled"].is_boolean() && value["enabled"].get<bool>();
      if (enabled) {
        diag.error(key,
                   "this DeepSpeed feature is not supported by ZeroRT; set \"enabled\": "
                   "false or remove the section");
      } else {
        diag.warn(str(key, ": DeepSpeed section ignored by ZeroRT (not enabled)"));
      }
      continue;
    }
    keys::KeyList candidates = keys::kTopLevel;
    candidates.insert(candidates.end(), keys::kIgnoredTopLevel.begin(),
                      keys::kIgnoredTopLevel.end());
    diag.warn(str(key, ": unknown top-level key, ignored (as DeepSpeed does)",
                  did_you_mean_suffix(key, candidates)));
  }
}

void check_cross_section_rules(Diagnostics& diag, ResolvedConfig& out) {
  const int stage = out.zero.stage;
  // DeepSpeed 0.19 checks these where gradients are partitioned (stage 2) only.
  if (stage == 2 && out.zero.reduce_scatter) {
    const std::string name = "ZeRO-2";
    if (out.gradient_predivide_factor != 1.0) {
      diag.error("gradient_predivide_factor",
                 str("gradient_predivide_factor != 1.0 is not yet supported with ", name,
                     " with reduce scatter enabled"));
    }
    if (out.prescale_gradients) {
      diag.error("prescale_gradients", str("pre-scale gradients is not yet supported with ", name,
                                           " with reduce scatter enabled"));
    }
  }
  // Which wrapper DeepSpeed would build without ZeRO (spec §1.12); without an optimizer it
  // builds none, and nothing checks the dtypes.
  if (stage == 0 && (out.optimizer || out.client_optimizer)) {
    const DType m = out.model_dtype;
    const DType g = out.effective_grad_accum_dtype();
    if (m == DType::kBFloat16 && g == DType::kBFloat16) {
      diag.error("data_types.grad_accum_dtype",
                 "Bfloat16 wrapper must use a gradient accumulation type of fp32, enable ZeRO to "
                 "use Bfloat16 gradient accumulation");
    } else if (m != g && !(m == DType::kBFloat16 && g == DType::kFloat32)) {
      diag.error("data_types.grad_accum_dtype",
                 str("unsupported mix of model dtype and gradient accumulation type (model ",
                     dtype_name(m), ", gradient accumulation ", dtype_name(g), ")"));
    }
  }
  // zero_optimization.compute_grad_norm: false, as DeepSpeed's stage 1/2 optimizer checks it.
  if (!out.zero_extra.compute_grad_norm) {
    const char* kKey = "zero_optimization.compute_grad_norm";
    if (out.gradient_clipping > 0.0) {
      diag.error(kKey, "zero_optimization.compute_grad_norm=false requires gradient_clipping=0");
    } else if (out.zero.offload_optimizer_enabled()) {
      diag.error(kKey,
                 "zero_optimization.compute_grad_norm=false does not support optimizer offload");
    } else if (stage == 1 && out.model_dtype == DType::kBFloat16 &&
               out.effective_grad_accum_dtype() == DType::kFloat32) {
      diag.error(kKey,
                 "zero_optimization.compute_grad_norm=false does not support ZeRO Stage 1 with "
                 "BF16 parameters and FP32 gradient accumulation");
    } else {
      diag.note(str(kKey, ": false: ZeroRT computes the norm anyway (it is logged as grad_norm); "
                          "the update is the same"));
    }
  }
  // Optimizer acceptance (spec §1.10).
  if (stage > 0 && out.optimizer && out.optimizer->kind == optim::OptimizerKind::kSgd) {
    if (!out.zero_allow_untested_optimizer) {
      diag.error("optimizer.type",
                 "You are using an untested ZeRO Optimizer. Please add "
                 "<\"zero_allow_untested_optimizer\": true> in the configuration file to use it.");
    } else {
      diag.warn("**** You are using ZeRO with an untested optimizer, proceed with caution *****");
    }
  }
}

// Rules that hold whatever else is wrong with the config (checked even when a section had
// errors, so that one run reports them too).
void check_robust_rules(const Json& config, Diagnostics& diag, const ResolvedConfig& out) {
  const int stage = out.zero.stage;
  const auto optimizer = config.find("optimizer");
  const bool has_optimizer = optimizer != config.end() && !optimizer->is_null();
  if ((stage == 1 || stage == 2) && !has_optimizer && !out.client_optimizer) {
    diag.error("optimizer", str("zero stage ", stage, " requires an optimizer"));
  }
}

}  // namespace

DType ResolvedConfig::effective_communication_data_type() const {
  if (communication_data_type) return *communication_data_type;
  if (fp16.enabled) return DType::kFloat16;
  if (bf16.enabled) return DType::kBFloat16;
  return DType::kFloat32;
}

DType ResolvedConfig::effective_grad_accum_dtype() const {
  if (grad_accum_dtype) return *grad_accum_dtype;
  if (bf16.enabled && !zero_enabled()) return DType::kFloat32;
  return model_dtype;
}

zero::GradientOptions ResolvedConfig::gradient_options() const {
  zero::GradientOptions g;
  g.comm_dtype = effective_communication_data_type();
  g.accum_dtype = effective_grad_accum_dtype();
  g.prescale = prescale_gradients;
  g.predivide_factor = gradient_predivide_factor;
  return g;
}

bool ResolvedConfig::inference_mode() const {
  return zero.stage == 3 && !optimizer && !client_optimizer;
}

optim::LossScaleOptions ResolvedConfig::effective_loss_scale() const {
  if (fp16.enabled) return fp16.loss_scale;
  optim::LossScaleOptions fixed;
  fixed.dynamic = false;
  fixed.static_scale = 1.0;
  fixed.initial_scale = 1.0;
  return fixed;
}

ResolvedConfig resolve_config(const Json& config, const ResolveOptions& options) {
  if (!config.is_object()) {
    throw ConfigError(str("a DeepSpeed config must be a JSON object, got ", config.type_name()));
  }
  ZRT_CHECK_AS(ConfigError, options.world_size >= 1, "world size must be at least 1, got ",
               options.world_size);
  Diagnostics diag;
  diag.set_hf_trainer(options.hf_trainer);
  ResolvedConfig out;
  out.client_optimizer = options.client_optimizer;
  SectionReader top(config, "", diag);
  out.sequence_parallel_size = resolve_sequence_parallel(top, options.world_size);
  const int data_parallel = options.world_size / out.sequence_parallel_size;
  resolve_batch_keys(top, data_parallel, diag, out);
  resolve_scalars(top, out);
  resolve_parallel_keys(top, data_parallel);
  detail::resolve_zero_section(config, diag, out);
  detail::resolve_precision_sections(config, diag, out);
  detail::resolve_optimizer_section(config, diag, out);
  detail::resolve_scheduler_section(config, diag, out);
  detail::resolve_misc_sections(config, diag, out);
  check_top_level_keys(config, diag);
  check_robust_rules(config, diag, out);
  if (!diag.has_errors()) check_cross_section_rules(diag, out);
  diag.throw_if_errors();

  for (const auto& line : diag.warnings()) ZRT_LOG_WARN(line);
  for (const auto& line : diag.notes()) ZRT_LOG_INFO(line);
  out.warnings = diag.warnings();
  out.notes = diag.notes();
  return out;
}

comm::CommOptions resolve_comm_options(const Json& config) {
  if (!config.is_object()) {
    throw ConfigError(str("a DeepSpeed config must be a JSON object, got ", config.type_name()));
  }
  Diagnostics diag;
  comm::CommOptions out;
  detail::resolve_zrt(config, diag, out);
  diag.throw_if_errors();
  return out;
}

namespace {

// `section` without its "auto" values (nested ones too), which the HF-Trainer layer fills later;
// `keep` stays whatever it holds.
Json without_auto_values(const Json& section, const char* keep) {
  if (!section.is_object()) return section;
  Json out = Json::object();
  for (const auto& [key, value] : section.items()) {
    if (key != keep && detail::is_auto_value(value)) continue;
    out[key] = value.is_object() ? without_auto_values(value, keep) : value;
  }
  return out;
}

}  // namespace

int sequence_parallel_size(const Json& config, int world_size) {
  if (!config.is_object() || !config.contains("sequence_parallel_size")) return 1;
  const Json& v = config["sequence_parallel_size"];
  if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > INT32_MAX) return 1;
  const int k = v.get<int>();
  return world_size == 0 || world_size % k == 0 ? k : 1;
}

// Read before the HF-Trainer layer fills "auto" values: those of the section's other keys are left
// out here, so only the stage itself (and the section's shape) can be an error.
int resolve_zero_stage(const Json& config) {
  if (!config.is_object()) {
    throw ConfigError(str("a DeepSpeed config must be a JSON object, got ", config.type_name()));
  }
  Json probe = Json::object();
  if (config.contains("zero_optimization")) {
    probe["zero_optimization"] = without_auto_values(config["zero_optimization"], "stage");
  }
  Diagnostics diag;
  ResolvedConfig out;
  detail::resolve_zero_section(probe, diag, out);
  diag.throw_if_errors();
  return out.zero.stage;
}

namespace detail {

const Json* section_object(const Json& root, const char* key, Diagnostics& diag) {
  auto it = root.find(key);
  if (it == root.end() || it->is_null()) return nullptr;
  if (is_auto_value(*it)) {
    diag.auto_error(key);
    return nullptr;
  }
  if (!it->is_object()) {
    diag.error(key, str("expected an object, got ", describe_value(*it)));
    return nullptr;
  }
  return &*it;
}

}  // namespace detail
}  // namespace zrt::config
