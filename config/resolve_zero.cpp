// Resolves "zero_optimization" (docs/DEEPSPEED.md §1.6): DeepSpeed's pydantic model, so unknown
// keys are errors and "auto" values fall back to the default. Aliases (stage3_*), deprecated
// keys, the legacy boolean form, stage-dependent defaults and the features ZeroRT does not
// implement (MiCS) are handled here.
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "config/keys.h"
#include "config/resolve_sections.h"
#include "config/section_reader.h"
#include "core/error.h"

namespace zrt::config::detail {
namespace {

constexpr const char* kZeroPath = "zero_optimization";

// Which of a field's two names is present: "" if neither; an error if both.
std::string_view pick_name(SectionReader& r, std::string_view alias, std::string_view name) {
  // An "auto" is reported as such (SectionReader::get) and does not count as given.
  auto given = [&](std::string_view key) {
    if (!r.has(key)) return false;
    const Json& value = r.object()[std::string(key)];
    if (value.is_string() && value == "auto") {
      r.get(key);
      return false;
    }
    return true;
  };
  const bool has_alias = given(alias);
  const bool has_name = given(name);
  if (has_alias && has_name) {
    r.diag().error(kZeroPath, str("\"", alias, "\" and \"", name,
                                  "\" are two names of the same setting; give only one"));
  }
  if (has_alias) return alias;
  if (has_name) return name;
  return "";
}

void read_count(SectionReader& r, std::string_view key, int64_t& target) {
  if (key.empty()) return;
  if (auto v = r.get_int(key, 0)) target = *v;
}

// A bucket size: 0 would make every bucket empty (DeepSpeed would loop or divide by zero).
void read_bucket_size(SectionReader& r, std::string_view key, int64_t& target) {
  if (auto v = r.get_int(key, 1)) target = *v;
}

void read_flag(SectionReader& r, std::string_view key, bool& target) {
  if (key.empty()) return;
  if (auto v = r.get_bool(key)) target = *v;
}

std::optional<zero::OffloadDevice> read_device(SectionReader& r) {
  const auto device = r.get_string("device");
  if (!device) return std::nullopt;
  if (*device == "none") return zero::OffloadDevice::kNone;
  if (*device == "cpu") return zero::OffloadDevice::kCpu;
  if (*device == "nvme") return zero::OffloadDevice::kNvme;
  r.error("device",
          str("expected \"none\", \"cpu\" or \"nvme\", got ", describe_value(Json(*device))));
  return std::nullopt;
}

void read_offload_param(const Json& section, Diagnostics& diag, zero::OffloadParamOptions& o) {
  SectionReader r(section, str(kZeroPath, ".offload_param"), diag);
  r.check_unknown_keys(keys::kOffloadParam, /*strict=*/true);
  if (auto d = read_device(r)) o.device = *d;
  if (auto p = r.get_string("nvme_path")) o.nvme_path = *p;
  read_count(r, "buffer_count", o.buffer_count);
  read_count(r, "buffer_size", o.buffer_size);
  read_count(r, "max_in_cpu", o.max_in_cpu);
  read_flag(r, "pin_memory", o.pin_memory);
}

void read_offload_optimizer(const Json& section, Diagnostics& diag,
                            zero::OffloadOptimizerOptions& o) {
  SectionReader r(section, str(kZeroPath, ".offload_optimizer"), diag);
  r.check_unknown_keys(keys::kOffloadOptimizer, /*strict=*/true);
  if (auto d = read_device(r)) o.device = *d;
  if (auto p = r.get_string("nvme_path")) o.nvme_path = *p;
  read_count(r, "buffer_count", o.buffer_count);
  read_flag(r, "pin_memory", o.pin_memory);
  read_flag(r, "pipeline_read", o.pipeline_read);
  read_flag(r, "pipeline_write", o.pipeline_write);
  read_flag(r, "fast_init", o.fast_init);
  if (auto ratio = r.get_number("ratio", NumberRange::unit())) o.ratio = *ratio;
  r.get_number("cpuadam_cores_perc", NumberRange::unit());
  if (auto on = r.get_bool("super_offload"); on && *on) {
    diag.warn(str(r.key_path("super_offload"),
                  ": SuperOffload overlaps a GPU's work with CPU Adam on superchips; ZeroRT's CPU "
                  "offload has its own overlap: no effect (cpuadam_cores_perc neither)"));
  }
}

// A deprecated boolean that switches an offload section to "cpu".
void read_deprecated_offload(SectionReader& r, std::string_view old_key, std::string_view new_key,
                             zero::OffloadDevice& device) {
  if (!r.has(old_key)) return;
  r.diag().warn(str(r.key_path(old_key), ": Config parameter ", old_key, " is deprecated use ",
                    new_key, " instead"));
  if (r.has(new_key)) {
    r.diag().error(kZeroPath, str("Cannot provide deprecated parameter '", old_key,
                                  "' and replacing parameter '", new_key, "' together"));
    return;
  }
  if (auto on = r.get_bool(old_key)) {
    if (*on) device = zero::OffloadDevice::kCpu;
  }
}

// ZeRO++ (zero/zeropp.h): DeepSpeed reads the keys at every stage and uses them in its stage-3
// code only.
void read_zeropp(SectionReader& r, int stage, zero::ZeroPPOptions& z) {
  // 0 and 1 both mean no hpZ (DeepSpeed's check is `> 1`); the value is kept as written.
  if (auto hpz = r.get_int("zero_hpz_partition_size", 0)) z.hpz_partition_size = *hpz;
  read_flag(r, "zero_quantized_weights", z.quantized_weights);
  read_flag(r, "zero_quantized_nontrainable_weights", z.quantized_nontrainable_weights);
  read_flag(r, "zero_quantized_gradients", z.quantized_gradients);
  if (stage != 3 && (z.any() || z.quantized_nontrainable_weights)) {
    r.diag().warn(str(r.key_path("zero_hpz_partition_size"),
                      ", zero_quantized_*: ZeRO++ works on ZeRO stage 3; no effect at stage ",
                      stage));
  }
}

// Legacy switches: accepted only at their defaults.
void reject_unsupported(SectionReader& r, int stage, ZeroExtraOptions& extra) {
  if (auto on = r.get_bool("elastic_checkpoint"); on && *on) {
    r.error("elastic_checkpoint",
            "elastic_checkpoint (DeepSpeed no longer supports it either) is not supported by "
            "ZeroRT; remove it or set false");
  }
  // DeepSpeed checks it when it builds a ZeRO optimizer (stage > 0).
  if (auto on = r.get_bool("legacy_stage1"); on && *on) {
    if (stage > 0) {
      r.error("legacy_stage1",
              "The deprecated version of ZeRO Stage 1 is not supported in deepspeed >= 0.5.9");
    }
    extra.legacy_stage1 = true;
  }
}

// A list of strings, or one string (DeepSpeed's leaf_module coerces it to a one-item list).
void read_string_list(SectionReader& r, std::string_view key, std::vector<std::string>& out) {
  const Json* v = r.get(key);
  if (!v) return;
  if (v->is_string()) {
    out = {v->get<std::string>()};
    return;
  }
  bool ok = v->is_array();
  std::vector<std::string> items;
  for (const Json& item : ok ? *v : Json::array()) {
    if (!item.is_string()) ok = false;
    if (ok) items.push_back(item.get<std::string>());
  }
  if (!ok) {
    r.error(key, str("expected a list of strings (or one string), got ", describe_value(*v)));
    return;
  }
  out.clear();
  for (const std::string& item : items) {  // deduplicated, first occurrence kept
    if (std::find(out.begin(), out.end(), item) == out.end()) out.push_back(item);
  }
}

// zero_optimization.leaf_module: the modules DeepSpeed's ZeRO-3 hooks treat as one unit.
void read_leaf_module(SectionReader& z, ZeroExtraOptions& extra) {
  const Json* section = z.get_object("leaf_module");
  if (!section) return;
  SectionReader r(*section, z.key_path("leaf_module"), z.diag());
  r.check_unknown_keys(keys::kLeafModule, /*strict=*/true);
  read_string_list(r, "classes", extra.leaf_module_classes);
  read_string_list(r, "names", extra.leaf_module_names);
  read_string_list(r, "name_suffixes", extra.leaf_module_name_suffixes);
}

// Keys DeepSpeed 0.19 added to zero_optimization, each with DeepSpeed's meaning where ZeroRT has
// one (config/KEYS.md lists the treatment of each).
void read_deepspeed_019_keys(SectionReader& r, const zero::ZeroOptions& z,
                             ZeroExtraOptions& extra) {
  read_flag(r, "compute_grad_norm", extra.compute_grad_norm);
  if (!extra.compute_grad_norm && z.stage != 1 && z.stage != 2) {
    r.error("compute_grad_norm", "compute_grad_norm=false is supported only with ZeRO Stage 1 or 2");
  }
  read_flag(r, pick_name(r, "stage3_allgather_sequential", "allgather_sequential"),
            extra.allgather_sequential);
  if (extra.allgather_sequential && z.stage == 3) {
    r.diag().note(str(kZeroPath,
                      ".allgather_sequential: no effect: ZeroRT's stage 3 gathers each unit's "
                      "partitions straight into the unit's flat buffer, with no bucket to bypass"));
  }
  if (auto on = r.get_bool("parameter_alignment"); on && *on && (z.stage == 1 || z.stage == 2)) {
    r.error("parameter_alignment",
            "true (ZeRO stage 1/2 flat buffers padded between parameters to 16 bytes, which "
            "changes the flat partitions a checkpoint holds) is not supported by ZeroRT, which "
            "keeps DeepSpeed's unpadded layout: remove the key or set it to false");
  }
  if (auto on = r.get_bool("enable_sanity_checks"); on && *on) {
    r.diag().note(str(r.key_path("enable_sanity_checks"),
                      ": DeepSpeed's internal stage-3 debugging checks; no effect in ZeroRT"));
  }
  if (auto on = r.get_bool("save_muon_momentum_buffer_in_memory"); on && *on) {
    r.diag().warn(str(r.key_path("save_muon_momentum_buffer_in_memory"),
                      ": ZeroRT has no Muon optimizer; no effect"));
  }
  if (r.has("zenflow")) {
    r.error("zenflow",
            "ZenFlow (delayed top-k optimizer updates, which change what training computes) is "
            "not implemented by ZeroRT; remove the section or set it to null");
  }
  read_leaf_module(r, extra);
}

void read_zeropp_and_reject_unsupported(SectionReader& r, zero::ZeroOptions& z,
                                        ZeroExtraOptions& extra) {
  read_zeropp(r, z.stage, z.zeropp);
  reject_unsupported(r, z.stage, extra);
}

void resolve_legacy_bool(const Json& root, bool enabled, Diagnostics& diag, zero::ZeroOptions& z) {
  z.stage = enabled ? 1 : 0;
  diag.warn(str(kZeroPath,
                ": the boolean form is deprecated (DeepSpeed reads true as stage 1, "
                "false as stage 0); write {\"stage\": ",
                z.stage, "} instead"));
  if (enabled) {
    SectionReader top(root, "", diag);
    read_bucket_size(top, "allgather_size", z.allgather_bucket_size);
  }
}

// DeepSpeed steps stage 3's optimizer sub-group by sub-group to bound its temporary fp32 buffers.
// ZeroRT's fused step reads each group's reduced gradient partition in place and allocates nothing
// per group on the CPU, so there is nothing for the key to bound, except with NVMe offload, where
// it is the unit streamed through the swap buffers.
void read_sub_group_size(SectionReader& r, zero::ZeroOptions& z) {
  read_count(r, "sub_group_size", z.sub_group_size);
  if (r.has("sub_group_size") && z.offload_optimizer.device != zero::OffloadDevice::kNvme) {
    r.diag().warn(str(kZeroPath,
                      ".sub_group_size: accepted, no effect in ZeroRT without NVMe offload (its "
                      "fused optimizer step needs no per-sub-group buffer; config/KEYS.md)"));
  }
}

void apply_stage_rules(Diagnostics& diag, zero::ZeroOptions& z) {
  if (!z.overlap_comm) z.overlap_comm = (z.stage == 3);
  if (z.stage != 3 && z.offload_param.device != zero::OffloadDevice::kNone) {
    diag.warn(str(kZeroPath,
                  ".offload_param: only ZeRO stage 3 offloads parameters; ignored at "
                  "stage ",
                  z.stage));
    z.offload_param.device = zero::OffloadDevice::kNone;
  }
  if (z.stage == 0 && z.offload_optimizer.device != zero::OffloadDevice::kNone) {
    diag.warn(str(kZeroPath, ".offload_optimizer: ZeRO is disabled (stage 0); ignored"));
    z.offload_optimizer.device = zero::OffloadDevice::kNone;
  }
  if (z.offload_optimizer.ratio < 1.0 && z.stage != 3) {
    diag.error(str(kZeroPath, ".offload_optimizer.ratio"),
               "Partial offloading only supported for ZeRO Stage 3.");
  }
  if ((z.stage == 1 || z.stage == 2) && z.allgather_bucket_size % 2 != 0) {
    diag.error(str(kZeroPath, ".allgather_bucket_size"),
               str("allgather_bucket_size must be a multiple of nccl_start_alignment_factor, 2 "
                   "(got ",
                   z.allgather_bucket_size, ")"));
  }
  if ((z.stage == 1 || z.stage == 2) && z.offload_optimizer_enabled() && !z.contiguous_gradients) {
    diag.note(str(kZeroPath, ".contiguous_gradients: forced to true by CPU offload at stage ",
                  z.stage, " (as DeepSpeed)"));
    z.contiguous_gradients = true;
  }
}

}  // namespace

void resolve_zero_section(const Json& root, Diagnostics& diag, ResolvedConfig& out) {
  zero::ZeroOptions& z = out.zero;
  auto it = root.find(kZeroPath);
  if (it == root.end() || it->is_null()) {
    apply_stage_rules(diag, z);
    return;
  }
  if (it->is_boolean()) {
    resolve_legacy_bool(root, it->get<bool>(), diag, z);
    apply_stage_rules(diag, z);
    return;
  }
  if (is_auto_value(*it)) {
    diag.auto_error(kZeroPath);
    return;
  }
  if (!it->is_object()) {
    diag.error(kZeroPath,
               str("expected an object (or the legacy true/false), got ", describe_value(*it)));
    return;
  }

  SectionReader r(*it, kZeroPath, diag);
  // Keys DeepSpeed 0.19 removed (MiCS, LoCo): refused with DeepSpeed's message, whatever value.
  Json known = Json::object();
  for (const auto& [key, value] : it->items()) {
    bool removed = false;
    for (const keys::RemovedKey& k : keys::kRemovedZero) {
      if (k.key == key) {
        diag.error(r.key_path(key), str(k.message, " See ", keys::kRemovedFeaturesIssue, "."));
        removed = true;
      }
    }
    if (!removed) known[key] = value;
  }
  SectionReader(known, kZeroPath, diag).check_unknown_keys(keys::kZero, /*strict=*/true);
  if (auto stage = r.get_int("stage")) {
    if (*stage < 0 || *stage > 3) {
      r.error("stage",
              str("expected 0, 1, 2 or 3, got ", *stage,
                  *stage > 3 ? " (DeepSpeedConfig: Maximum supported ZeRO stage is 3)" : ""));
    } else {
      z.stage = static_cast<int>(*stage);
    }
  }
  read_flag(r, "contiguous_gradients", z.contiguous_gradients);
  read_flag(r, "reduce_scatter", z.reduce_scatter);
  read_bucket_size(r, "reduce_bucket_size", z.reduce_bucket_size);
  read_flag(r, "use_multi_rank_bucket_allreduce", z.use_multi_rank_bucket_allreduce);
  read_flag(r, "allgather_partitions", z.allgather_partitions);
  read_bucket_size(r, "allgather_bucket_size", z.allgather_bucket_size);
  if (auto overlap = r.get_bool("overlap_comm")) z.overlap_comm = *overlap;
  read_flag(r, "load_from_fp32_weights", z.load_from_fp32_weights);
  if (const Json* p = r.get_object("offload_param")) read_offload_param(*p, diag, z.offload_param);
  if (const Json* o = r.get_object("offload_optimizer")) {
    read_offload_optimizer(*o, diag, z.offload_optimizer);
  }
  read_sub_group_size(r, z);
  read_count(r, pick_name(r, "stage3_prefetch_bucket_size", "prefetch_bucket_size"),
             z.prefetch_bucket_size);
  read_count(r, pick_name(r, "stage3_param_persistence_threshold", "param_persistence_threshold"),
             z.param_persistence_threshold);
  read_count(r, pick_name(r, "stage3_model_persistence_threshold", "model_persistence_threshold"),
             z.model_persistence_threshold);
  read_count(r, pick_name(r, "stage3_max_live_parameters", "max_live_parameters"),
             z.max_live_parameters);
  read_count(r, pick_name(r, "stage3_max_reuse_distance", "max_reuse_distance"),
             z.max_reuse_distance);
  const std::string_view gather = pick_name(r, "stage3_gather_16bit_weights_on_model_save",
                                            "gather_16bit_weights_on_model_save");
  read_flag(r, gather, z.gather_16bit_weights_on_model_save);
  read_flag(r, "ignore_unused_parameters", z.ignore_unused_parameters);
  read_flag(r, "round_robin_gradients", z.round_robin_gradients);

  ZeroExtraOptions& extra = out.zero_extra;
  if (auto key =
          pick_name(r, "stage3_module_granularity_threshold", "module_granularity_threshold");
      !key.empty()) {
    if (auto v = r.get_int(key)) extra.module_granularity_threshold = *v;
  }
  read_flag(
      r, pick_name(r, "stage3_use_all_reduce_for_fetch_params", "use_all_reduce_for_fetch_params"),
      extra.use_all_reduce_for_fetch_params);
  read_flag(r, "memory_efficient_linear", extra.memory_efficient_linear);
  read_flag(r, "pipeline_loading_checkpoint", extra.pipeline_loading_checkpoint);
  read_flag(r, "override_module_apply", extra.override_module_apply);
  read_flag(r, "log_trace_cache_warnings", extra.log_trace_cache_warnings);

  // Deprecated keys and their replacements.
  read_deprecated_offload(r, "cpu_offload", "offload_optimizer", z.offload_optimizer.device);
  read_deprecated_offload(r, "cpu_offload_param", "offload_param", z.offload_param.device);
  if (r.has("cpu_offload_use_pin_memory")) {
    diag.warn(str(r.key_path("cpu_offload_use_pin_memory"),
                  ": Config parameter cpu_offload_use_pin_memory is deprecated use offload_param "
                  "or offload_optimizer instead"));
    r.get_bool("cpu_offload_use_pin_memory");
  }
  if (r.has("stage3_gather_fp16_weights_on_model_save")) {
    diag.warn(str(r.key_path("stage3_gather_fp16_weights_on_model_save"),
                  ": Config parameter stage3_gather_fp16_weights_on_model_save is deprecated use "
                  "gather_16bit_weights_on_model_save instead"));
    if (!gather.empty()) {
      diag.error(kZeroPath,
                 "Cannot provide deprecated parameter 'stage3_gather_fp16_weights_on_model_save' "
                 "and replacing parameter 'gather_16bit_weights_on_model_save' together");
    } else {
      read_flag(r, "stage3_gather_fp16_weights_on_model_save",
                z.gather_16bit_weights_on_model_save);
    }
  }
  read_zeropp_and_reject_unsupported(r, z, extra);
  if (z.stage == 3 && z.zeropp.quantized_nontrainable_weights &&
      z.offload_param.device == zero::OffloadDevice::kNvme) {
    diag.error(str(kZeroPath, ".zero_quantized_nontrainable_weights"),
               "int8 frozen partitions are kept in memory; they do not combine with "
               "offload_param.device \"nvme\" (use \"cpu\", or drop one of the two)");
  }
  read_deepspeed_019_keys(r, z, extra);
  apply_stage_rules(diag, z);
}

}  // namespace zrt::config::detail
