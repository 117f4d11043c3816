// SectionReader: typed, validating access to one object of a DeepSpeed config. Every problem
// (wrong JSON type, out of range, fractional integer, leftover "auto", unknown key) goes to
// Diagnostics with the full key path; the getter then returns nullopt and resolution goes on,
// so one run reports everything.
//
// Integers follow pydantic v2 (DeepSpeed >= 0.15): 5e8 is accepted as 500000000, 0.5 is
// rejected. ZeroRT is stricter than DeepSpeed's plain dict.get() sections in one way: values
// must have the JSON type the key needs (no "8" for 8, no 1 for true). A null value means "not
// given".
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/diagnostics.h"
#include "core/json.h"

namespace zrt::config {

// Allowed range of a floating-point value, with the words used in messages.
struct NumberRange {
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool min_exclusive = false;
  bool max_exclusive = false;
  const char* description = "a number";

  static NumberRange any() { return {}; }
  static NumberRange non_negative() { return {0.0, kInf, false, false, "a non-negative number"}; }
  static NumberRange positive() { return {0.0, kInf, true, false, "a positive number"}; }
  static NumberRange unit() { return {0.0, 1.0, false, false, "a number in [0, 1]"}; }
  static NumberRange unit_open() { return {0.0, 1.0, false, true, "a number in [0, 1)"}; }

  bool contains(double x) const;

 private:
  static constexpr double kInf = std::numeric_limits<double>::infinity();
};

inline constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();
inline constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// A shared empty JSON object (for reading an absent section with defaults).
const Json& empty_object();

// A short human description of a JSON value for messages: -1, 0.5, "8" (a string), an object.
std::string describe_value(const Json& value);

// Converts a JSON number to int64 under pydantic's rules; on failure sets *why to the reason
// ("a number with a fractional part", "too large for a 64-bit integer", "a string", ...).
std::optional<int64_t> json_to_int64(const Json& value, std::string* why);

class SectionReader {
 public:
  SectionReader(const Json& object, std::string path, Diagnostics& diag);

  const std::string& path() const { return path_; }
  std::string key_path(std::string_view key) const { return join_path(path_, key); }
  const Json& object() const { return object_; }
  Diagnostics& diag() { return diag_; }

  // True when the key is present with a non-null value (an "auto" counts as present).
  bool has(std::string_view key) const;

  // The value, or nullptr when absent, null, or an "auto" (reported as an error).
  const Json* get(std::string_view key);

  std::optional<bool> get_bool(std::string_view key);
  std::optional<int64_t> get_int(std::string_view key, int64_t min = kInt64Min,
                                 int64_t max = kInt64Max);
  std::optional<double> get_number(std::string_view key, NumberRange range = NumberRange::any());
  std::optional<std::string> get_string(std::string_view key);
  // A number or a non-empty list of numbers (DeepSpeed's per-parameter-group values).
  std::optional<std::vector<double>> get_number_list(std::string_view key, NumberRange range);
  // An object (a nested section); nullptr when absent, null, "auto" or another type (error).
  const Json* get_object(std::string_view key);

  // Reports keys not in `known`: an error when strict, a warning otherwise; both with a
  // did-you-mean suggestion.
  void check_unknown_keys(const std::vector<std::string_view>& known, bool strict);

  // Records "<section>.<key>: <message>".
  void error(std::string_view key, std::string_view message);

 private:
  const Json& object_;
  std::string path_;
  Diagnostics& diag_;
};

// The message for a value that is "auto" where nothing may be "auto" any more. After the
// HF-Trainer layer (`hf_trainer`) it names the flag to pass:
// `train_micro_batch_size_per_gpu is "auto": pass --per_device_train_batch_size or set a number`;
// for a config used directly (zrt::initialize(model, "ds.json")) it says that only the HF Trainer
// fills "auto" and from what.
std::string auto_error_message(std::string_view dotted_key, bool hf_trainer);

}  // namespace zrt::config
