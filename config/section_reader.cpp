#include "config/section_reader.h"

#include <cmath>
#include <utility>

#include "core/error.h"

namespace zrt::config {
namespace {

bool is_auto(const Json& value) { return value.is_string() && value == "auto"; }

std::string int_description(int64_t min, int64_t max) {
  if (min == kInt64Min && max == kInt64Max) return "an integer";
  if (min == 0 && max == kInt64Max) return "a non-negative integer";
  if (min == 1 && max == kInt64Max) return "a positive integer";
  if (max == kInt64Max) return str("an integer >= ", min);
  return str("an integer in [", min, ", ", max, "]");
}

// Which TrainingArguments flag fills each key the HF-Trainer layer knows (spec §3.3, §3.4):
// the advice after the HF layer ran, and where the value comes from (for configs used directly).
struct AutoHint {
  std::string_view key;
  std::string_view hint;
  std::string_view filled_from;
};
constexpr AutoHint kAutoHints[] = {
    {"train_micro_batch_size_per_gpu", "pass --per_device_train_batch_size or set a number",
     "--per_device_train_batch_size"},
    {"gradient_accumulation_steps", "pass --gradient_accumulation_steps or set a number",
     "--gradient_accumulation_steps"},
    {"train_batch_size",
     "it is computed as world_size * --per_device_train_batch_size * "
     "--gradient_accumulation_steps; or set a number",
     "world_size * --per_device_train_batch_size * --gradient_accumulation_steps"},
    {"gradient_clipping", "pass --max_grad_norm or set a number", "--max_grad_norm"},
    {"optimizer.params.lr", "pass --learning_rate or set a number", "--learning_rate"},
    {"optimizer.params.betas", "pass --adam_beta1 and --adam_beta2 or set a list of two numbers",
     "--adam_beta1 and --adam_beta2"},
    {"optimizer.params.eps", "pass --adam_epsilon or set a number", "--adam_epsilon"},
    {"optimizer.params.weight_decay", "pass --weight_decay or set a number", "--weight_decay"},
    {"scheduler.params.warmup_min_lr", "the HF-Trainer layer fills it with 0; or set a number",
     "the constant 0"},
    {"scheduler.params.warmup_max_lr", "pass --learning_rate or set a number", "--learning_rate"},
    {"scheduler.params.total_num_steps",
     "pass --num_training_steps (or --max_steps) or set a number", "the number of training steps"},
    {"scheduler.params.warmup_num_steps",
     "pass --warmup_steps (a count, or a ratio of the training steps when < 1) with "
     "--num_training_steps, or set a number",
     "--warmup_steps"},
    {"fp16.enabled", "pass --fp16 (or --fp16 false) or set true or false", "--fp16"},
    {"bf16.enabled", "pass --bf16 (or --bf16 false) or set true or false", "--bf16"},
};

}  // namespace

bool NumberRange::contains(double x) const {
  if (min_exclusive ? !(x > min) : !(x >= min)) return false;
  if (max_exclusive ? !(x < max) : !(x <= max)) return false;
  return true;
}

const Json& empty_object() {
  static const Json kEmpty = Json::object();
  return kEmpty;
}

std::string describe_value(const Json& value) {
  switch (value.type()) {
    case Json::value_t::string: {
      std::string text = value.dump();
      if (text.size() > 60) text = text.substr(0, 57) + "...\"";
      return text + " (a string)";
    }
    case Json::value_t::object:
      return "an object";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::null:
      return "null";
    default:
      return value.dump();
  }
}

std::optional<int64_t> json_to_int64(const Json& value, std::string* why) {
  auto fail = [&](std::string reason) -> std::optional<int64_t> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  if (value.is_number_integer() && !value.is_number_unsigned()) return value.get<int64_t>();
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(kInt64Max)) return fail("too large for a 64-bit integer");
    return static_cast<int64_t>(u);
  }
  if (value.is_number_float()) {
    const double x = value.get<double>();
    if (!std::isfinite(x) || x >= 9223372036854775808.0 || x < -9223372036854775808.0) {
      return fail("too large for a 64-bit integer");
    }
    if (std::floor(x) != x) return fail("a number with a fractional part");
    return static_cast<int64_t>(x);
  }
  if (value.is_boolean()) return fail("a boolean");
  if (value.is_string()) return fail("a string");
  return fail(value.is_object() ? "an object" : value.is_array() ? "an array" : "null");
}

SectionReader::SectionReader(const Json& object, std::string path, Diagnostics& diag)
    : object_(object), path_(std::move(path)), diag_(diag) {
  ZRT_INTERNAL_ASSERT(object_.is_object(), "SectionReader needs an object at ", path_);
}

bool SectionReader::has(std::string_view key) const {
  auto it = object_.find(key);
  return it != object_.end() && !it->is_null();
}

const Json* SectionReader::get(std::string_view key) {
  auto it = object_.find(key);
  if (it == object_.end() || it->is_null()) return nullptr;
  if (is_auto(*it)) {
    // Nothing may be "auto" any more: the HF-Trainer layer fills (or refuses) every "auto" on
    // its path, and a config used directly has no one to fill it (DeepSpeed's pydantic sections
    // would drop it silently; ZeroRT refuses it, config/README.md).
    diag_.auto_error(key_path(key));
    return nullptr;
  }
  return &*it;
}

void SectionReader::error(std::string_view key, std::string_view message) {
  diag_.error(key_path(key), message);
}

std::optional<bool> SectionReader::get_bool(std::string_view key) {
  const Json* value = get(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_boolean()) {
    error(key, str("expected true or false, got ", describe_value(*value)));
    return std::nullopt;
  }
  return value->get<bool>();
}

std::optional<int64_t> SectionReader::get_int(std::string_view key, int64_t min, int64_t max) {
  const Json* value = get(key);
  if (value == nullptr) return std::nullopt;
  std::string why;
  auto result = json_to_int64(*value, &why);
  if (!result) {
    error(key, str("expected ", int_description(min, max), ", got ", describe_value(*value),
                   value->is_number() ? str(" (", why, ")") : std::string()));
    return std::nullopt;
  }
  if (*result < min || *result > max) {
    error(key, str("expected ", int_description(min, max), ", got ", describe_value(*value)));
    return std::nullopt;
  }
  return result;
}

std::optional<double> SectionReader::get_number(std::string_view key, NumberRange range) {
  const Json* value = get(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_number()) {
    error(key, str("expected ", range.description, ", got ", describe_value(*value)));
    return std::nullopt;
  }
  const double x = value->get<double>();
  if (!std::isfinite(x) || !range.contains(x)) {
    error(key, str("expected ", range.description, ", got ", describe_value(*value)));
    return std::nullopt;
  }
  return x;
}

std::optional<std::string> SectionReader::get_string(std::string_view key) {
  const Json* value = get(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_string()) {
    error(key, str("expected a string, got ", describe_value(*value)));
    return std::nullopt;
  }
  return value->get<std::string>();
}

std::optional<std::vector<double>> SectionReader::get_number_list(std::string_view key,
                                                                  NumberRange range) {
  const Json* value = get(key);
  if (value == nullptr) return std::nullopt;
  const std::string expected = str("expected ", range.description, " or a list of them, got ");
  if (value->is_number()) {
    const double x = value->get<double>();
    if (!range.contains(x)) {
      error(key, expected + describe_value(*value));
      return std::nullopt;
    }
    return std::vector<double>{x};
  }
  if (!value->is_array() || value->empty()) {
    error(key, expected + (value->is_array() ? "an empty list" : describe_value(*value)));
    return std::nullopt;
  }
  std::vector<double> out;
  for (const Json& item : *value) {
    if (!item.is_number() || !range.contains(item.get<double>())) {
      error(key, str(expected, value->dump(), " (element ", describe_value(item), ")"));
      return std::nullopt;
    }
    out.push_back(item.get<double>());
  }
  return out;
}

const Json* SectionReader::get_object(std::string_view key) {
  const Json* value = get(key);
  if (value == nullptr) return nullptr;
  if (!value->is_object()) {
    error(key, str("expected an object, got ", describe_value(*value)));
    return nullptr;
  }
  return value;
}

void SectionReader::check_unknown_keys(const std::vector<std::string_view>& known, bool strict) {
  for (const auto& [key, value] : object_.items()) {
    bool found = false;
    for (std::string_view k : known) found = found || (k == key);
    if (found) continue;
    const std::string suffix = did_you_mean_suffix(key, known);
    if (strict) {
      diag_.error(key_path(key), str("unknown key", suffix));
    } else {
      diag_.warn(str(key_path(key), ": unknown key, ignored", suffix));
    }
  }
}

std::string auto_error_message(std::string_view dotted_key, bool hf_trainer) {
  const AutoHint* found = nullptr;
  for (const AutoHint& h : kAutoHints) {
    if (h.key == dotted_key) found = &h;
  }
  if (hf_trainer) {
    return str(dotted_key, " is \"auto\": ",
               found ? found->hint : "nothing fills this key from the command line; set a value");
  }
  if (found) {
    return str(dotted_key, " is \"auto\", which only the HF Trainer fills (from ",
               found->filled_from, "); a DeepSpeed config used without it must give the value");
  }
  return str(
      dotted_key,
      " is \"auto\", which nothing fills (\"auto\" is an HF-Trainer placeholder); set a value");
}

}  // namespace zrt::config
