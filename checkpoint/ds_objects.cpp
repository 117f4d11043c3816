#include "checkpoint/ds_objects.h"

#include "checkpoint/tensor_types.h"
#include "core/error.h"

namespace zrt::ckpt {
namespace {

const Json& need(const Json& state, const char* key) {
  ZRT_CHECK_AS(CheckpointError, state.is_object() && state.contains(key),
               "loss scaler state has no '", key, "': ", state.dump());
  return state.at(key);
}

}  // namespace

Value ds_loss_scaler_value(const Json& state, at::ScalarType fp16_dtype) {
  const bool dynamic = need(state, "dynamic").get<bool>();
  Value attrs = Value::dict();
  // LossScalerBase.__init__ sets cur_scale and dynamic (False) first; DynamicLossScaler's own
  // attributes follow in its __init__'s order, and its `dynamic = True` keeps the key's place.
  attrs.set("cur_scale", need(state, "cur_scale").get<double>());
  attrs.set("dynamic", dynamic);
  if (!dynamic) return Value::object(kDsLossScalerClass, Value::tuple(), std::move(attrs), {}, {});
  attrs.set("cur_iter", need(state, "cur_iter").get<int64_t>());
  attrs.set("last_overflow_iter", need(state, "last_overflow_iter").get<int64_t>());
  attrs.set("scale_factor", need(state, "scale_factor").get<double>());
  attrs.set("scale_window", need(state, "scale_window").get<int64_t>());
  attrs.set("min_scale", need(state, "min_scale").get<double>());
  attrs.set("delayed_shift", need(state, "delayed_shift").get<int64_t>());
  attrs.set("cur_hysteresis", need(state, "cur_hysteresis").get<int64_t>());
  attrs.set("consecutive_hysteresis", need(state, "consecutive_hysteresis").get<bool>());
  attrs.set("raise_error_at_min_scale", need(state, "raise_error_at_min_scale").get<bool>());
  attrs.set("dtype", Value::object(str("torch.", python_dtype_name(fp16_dtype))));
  return Value::object(kDsDynamicLossScalerClass, Value::tuple(), std::move(attrs), {}, {});
}

Value ds_fragment_address_value(int64_t numel, int64_t start) {
  Value attrs = Value::dict();
  attrs.set("numel", numel);  // the dataclass's field order
  attrs.set("start", start);
  return Value::object(kDsFragmentAddressClass, Value::tuple(), std::move(attrs), {}, {});
}

std::pair<int64_t, int64_t> ds_fragment_address(const Value& saved, const std::string& where) {
  const Value* attrs = nullptr;
  if (saved.is_object() && saved.as_object().type == kDsFragmentAddressClass) {
    attrs = &saved.as_object().state;
  } else if (saved.is_dict()) {
    attrs = &saved;
  }
  ZRT_CHECK_AS(CheckpointError,
               attrs != nullptr && attrs->is_dict() && attrs->contains("numel") &&
                   attrs->contains("start") && attrs->at("numel").is_int() &&
                   attrs->at("start").is_int(),
               where, ": expected a fragment_address (numel, start), got ", saved.repr(200));
  return {attrs->at("numel").as_int(), attrs->at("start").as_int()};
}

Json ds_loss_scaler_state(const Value& saved, const std::string& where, const Json& current) {
  if (saved.is_dict() && saved.contains("dynamic_loss_scale") && !saved.contains("dynamic")) {
    return ds_fp16_optimizer_scaler_state(saved, current, where);
  }
  if (saved.is_dict()) return to_json(saved);
  const bool known = saved.is_object() && (saved.as_object().type == kDsLossScalerClass ||
                                           saved.as_object().type == kDsDynamicLossScalerClass);
  ZRT_CHECK_AS(CheckpointError, known && saved.as_object().state.is_dict(), where,
               ": the loss scaler is ",
               saved.is_object() ? "a " + saved.as_object().type : std::string(saved.kind_name()),
               "; expected DeepSpeed's LossScaler or DynamicLossScaler, or a dict of its state");
  Value attrs = Value::dict();
  for (const auto& [key, value] : saved.as_object().state.as_dict().items()) {
    if (key.is_str() && key.as_str() == "dtype") {
      ZRT_CHECK_AS(CheckpointError,
                   value.is_object() && value.as_object().type.rfind("torch.", 0) == 0, where,
                   ": the loss scaler's dtype is not a torch dtype");
      continue;
    }
    attrs.set(key, value);
  }
  return to_json(attrs);
}

Json ds_fp16_optimizer_scaler_state(const Value& fields, Json current, const std::string& where) {
  ZRT_CHECK_AS(CheckpointError, fields.is_dict(), where, ": the FP16_Optimizer fields are a ",
               fields.kind_name());
  auto field = [&](const char* key) -> const Value& {
    ZRT_CHECK_AS(CheckpointError, fields.contains(key), where, ": FP16_Optimizer field '", key,
                 "' is missing");
    const Value& v = fields.at(key);
    ZRT_CHECK_AS(CheckpointError, v.is_int() || v.is_double() || v.is_bool(), where,
                 ": FP16_Optimizer field '", key, "' is a ", v.kind_name());
    return v;
  };
  auto number = [&](const char* key) {
    const Value& v = field(key);
    return v.is_double() ? v.as_double() : static_cast<double>(v.as_int());
  };
  const bool dynamic = field("dynamic_loss_scale").as_bool();
  current["dynamic"] = dynamic;
  current["cur_scale"] = number("cur_scale");
  if (dynamic) {
    current["cur_iter"] = static_cast<int64_t>(number("cur_iter"));
    current["last_overflow_iter"] = static_cast<int64_t>(number("last_overflow_iter"));
    current["scale_factor"] = number("scale_factor");
    current["scale_window"] = static_cast<int64_t>(number("scale_window"));
    if (current.contains("delayed_shift")) current["cur_hysteresis"] = current["delayed_shift"];
  }
  return current;
}

}  // namespace zrt::ckpt
