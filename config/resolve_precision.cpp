// Resolves the precision sections: "fp16" (DeepSpeed 0.19's pydantic model: every loss-scaler
// field has its default), "bf16" (alias "bfloat16"), and the model dtype. "amp" is a key
// DeepSpeed 0.19 removed (resolve.cpp refuses it).
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
  SectionReader r(s ? *s : empty_object(), "fp16", diag);
  if (s) r.check_unknown_keys(keys::kFp16, /*strict=*/true);
  if (auto v = r.get_bool("enabled")) fp16.enabled = *v;
  if (auto v = r.get_bool("auto_cast")) fp16.auto_cast = *v;
  if (auto v = r.get_bool("fp16_master_weights_and_grads"); v && *v) {
    r.error("fp16_master_weights_and_grads",
            "not supported by ZeroRT (DeepSpeed allows it only for ZeRO stage 2 with CPU "
            "offload and DeepSpeedCPUAdam)");
  }

  // DeepSpeed 0.19's fp16 section is a pydantic model: every field has its default, and the
  // loss scaler always gets them (the "only {enabled: true} means 2^32" trap of older versions
  // is gone).
  ls = optim::LossScaleOptions{};  // 2^16, window 1000, hysteresis 2, min 1, whatever is given
  // 2^127 is the largest power of two a float holds: a larger initial scale makes every scaled
  // loss infinite, so the job would only skip steps while the scale halves back down.
  if (auto v = r.get_int("initial_scale_power", 0, 127)) {
    ls.initial_scale = std::ldexp(1.0, static_cast<int>(*v));
  }
  // Integers (pydantic), checked > 0 only where DeepSpeed uses them: with dynamic scaling on.
  std::optional<int64_t> window = r.get_int("loss_scale_window");
  std::optional<int64_t> min_scale = r.get_int("min_loss_scale");
  if (auto v = r.get_int("hysteresis", 1)) ls.hysteresis = *v;
  if (auto v = r.get_bool("consecutive_hysteresis")) ls.consecutive_hysteresis = *v;
  ls.dynamic = true;
  ls.static_scale = 1.0;
  if (auto v = r.get_number("loss_scale", NumberRange::non_negative()); v && *v > 0) {
    ls.dynamic = false;
    ls.static_scale = *v;
  }
  const bool dynamic_on = fp16.enabled && ls.dynamic;
  if (window) {
    if (dynamic_on && *window <= 0) {
      diag.error_text(
          "fp16.loss_scale_window must be > 0 when dynamic loss scaling is enabled "
          "(loss_scale=0)");
    }
    ls.scale_window = *window;
  }
  if (min_scale) {
    if (dynamic_on && *min_scale <= 0) {
      diag.error_text(
          "fp16.min_loss_scale must be > 0 when dynamic loss scaling is enabled (loss_scale=0)");
    }
    ls.min_scale = static_cast<double>(*min_scale);
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
  SectionReader r(*s, key, diag);
  r.check_unknown_keys(keys::kBf16, /*strict=*/true);
  if (auto v = r.get_bool("enabled")) out.bf16.enabled = *v;
  if (auto v = r.get_bool("immediate_grad_update")) out.bf16.immediate_grad_update = *v;
  // DeepSpeed 0.19.8 skips a bf16 step whose gradients are not finite (true, its default) or
  // applies it (false); ZeroRT stops with an error at such a step either way (docs/DEEPSPEED.md
  // §1.5).
  if (auto v = r.get_bool("check_grad_overflow"); v && !*v) {
    diag.note(str(r.key_path("check_grad_overflow"),
                  ": false: ZeroRT still checks, and stops with an error at a non-finite gradient "
                  "rather than apply it"));
  }
  for (const char* key : {"bf16_master_weights_and_grads", "bf16_optimizer_states"}) {
    if (auto v = r.get_bool(key); v && *v) {
      r.error(key,
              "not supported by ZeroRT: its master weights, gradient partitions and optimizer "
              "states are fp32; remove the key or set it to false");
    }
  }
}

}  // namespace

void resolve_precision_sections(const Json& root, Diagnostics& diag, ResolvedConfig& out) {
  resolve_fp16(root, diag, out);
  resolve_bf16(root, diag, out);
  if (out.fp16.enabled && out.bf16.enabled) {
    diag.error_text("bfloat16 and fp16 modes cannot be simultaneously enabled");
  }
  out.model_dtype = out.fp16.enabled   ? DType::kFloat16
                    : out.bf16.enabled ? DType::kBFloat16
                                       : DType::kFloat32;
}

}  // namespace zrt::config::detail
