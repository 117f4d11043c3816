// Resolves the precision sections: "fp16" (with the dynamic-loss-scale defaults trap of
// spec/deepspeed.md §1.4), "bf16" (alias "bfloat16") and "amp" (§1.5), and the model dtype.
#include <cmath>
#include <string>

#include "config/keys.h"
#include "config/resolve_sections.h"
#include "config/section_reader.h"
#include "core/error.h"

namespace zrt::config::detail {
namespace {

void resolve_fp16(const Json& root, Diagnostics& diag, ResolvedConfig& out) {
  Fp16Config& fp16 = out.fp16;
  optim::LossScaleOptions& ls = fp16.loss_scale;
  const Json* s = section_object(root, "fp16", diag);
  SectionReader r(s ? *s : empty_object(), "fp16", AutoPolicy::kError, diag);
  if (s) r.check_unknown_keys(keys::kFp16, /*strict=*/true);
  if (auto v = r.get_bool("enabled")) fp16.enabled = *v;
  if (auto v = r.get_bool("auto_cast")) fp16.auto_cast = *v;
  if (auto v = r.get_bool("fp16_master_weights_and_grads"); v && *v) {
    r.error("fp16_master_weights_and_grads",
            "not supported by ZeroRT (DeepSpeed allows it only for ZeRO stage 2 with CPU "
            "offload and DeepSpeedCPUAdam)");
  }

  // The trap: DeepSpeed builds its dynamic-scale arguments only when one of these is present.
  fp16.dynamic_args_given = false;
  for (const char* key : {"initial_scale_power", "loss_scale_window", "min_loss_scale",
                          "hysteresis", "consecutive_hysteresis"}) {
    fp16.dynamic_args_given = fp16.dynamic_args_given || r.has(key);
  }
  if (fp16.dynamic_args_given) {
    int64_t power = 16;
    // 2^127 is the largest power of two a float holds: a larger initial scale makes every scaled
    // loss infinite, so the job would only skip steps while the scale halves back down.
    if (auto v = r.get_int("initial_scale_power", 0, 127)) power = *v;
    ls.initial_scale = std::ldexp(1.0, static_cast<int>(power));
    ls.scale_window = 1000;
    if (auto v = r.get_int("loss_scale_window", 1)) ls.scale_window = *v;
    ls.hysteresis = 2;
    if (auto v = r.get_int("hysteresis", 1)) ls.hysteresis = *v;
    ls.consecutive_hysteresis = false;
    if (auto v = r.get_bool("consecutive_hysteresis")) ls.consecutive_hysteresis = *v;
    ls.min_scale = 1.0;
    if (auto v = r.get_number("min_loss_scale", NumberRange::positive())) ls.min_scale = *v;
  } else if (out.zero.stage > 0) {
    ls = optim::LossScaleOptions{};  // DynamicLossScaler() defaults: 2^32, hysteresis 1
  } else {
    // Without ZeRO the FP16 optimizer wrappers start at 2^16 (and have no hysteresis).
    ls = optim::LossScaleOptions{};
    ls.initial_scale = 65536.0;
  }
  ls.dynamic = true;
  ls.static_scale = 1.0;
  if (auto v = r.get_number("loss_scale", NumberRange::non_negative()); v && *v > 0) {
    ls.dynamic = false;
    ls.static_scale = *v;
  }
}

void resolve_bf16(const Json& root, Diagnostics& diag, ResolvedConfig& out) {
  const char* key = "bf16";
  const bool has_bf16 = root.contains("bf16") && !root["bf16"].is_null();
  const bool has_alias = root.contains("bfloat16") && !root["bfloat16"].is_null();
  if (has_bf16 && has_alias) {
    diag.warn("bfloat16: ignored because \"bf16\" is also given (DeepSpeed reads only \"bf16\")");
  } else if (has_alias) {
    key = "bfloat16";
  }
  const Json* s = section_object(root, key, diag);
  if (!s) return;
  SectionReader r(*s, key, AutoPolicy::kError, diag);
  r.check_unknown_keys(keys::kBf16, /*strict=*/true);
  if (auto v = r.get_bool("enabled")) out.bf16.enabled = *v;
  if (auto v = r.get_bool("immediate_grad_update")) out.bf16.immediate_grad_update = *v;
}

void resolve_amp(const Json& root, Diagnostics& diag, const ResolvedConfig& out) {
  const Json* s = section_object(root, "amp", diag);
  if (!s) return;
  // Every other key is an apex.amp.initialize() argument; only "enabled" matters here.
  SectionReader r(*s, "amp", AutoPolicy::kError, diag);
  auto enabled = r.get_bool("enabled");
  if (!enabled || !*enabled) return;
  if (out.zero.stage > 0) {
    diag.error("amp.enabled",
               "Amp and ZeRO are not currently compatible, please use (legacy) fp16 mode which "
               "performs similar to amp opt_mode=O2");
  } else if (out.fp16.enabled || out.bf16.enabled) {
    diag.error("amp.enabled", "Cannot enable both amp with (legacy) fp16 or bfloat16 mode");
  } else {
    diag.error("amp.enabled",
               "NVIDIA apex AMP is not supported by ZeroRT; use \"fp16\" or \"bf16\" instead");
  }
}

}  // namespace

void resolve_precision_sections(const Json& root, Diagnostics& diag, ResolvedConfig& out) {
  resolve_fp16(root, diag, out);
  resolve_bf16(root, diag, out);
  if (out.fp16.enabled && out.bf16.enabled) {
    diag.error_text("bfloat16 and fp16 modes cannot be simultaneously enabled");
  }
  resolve_amp(root, diag, out);
  out.model_dtype = out.fp16.enabled   ? DType::kFloat16
                    : out.bf16.enabled ? DType::kBFloat16
                                       : DType::kFloat32;
}

}  // namespace zrt::config::detail
