// DeepSpeedConfig: a DeepSpeed config as a Json object with dotted-key access, the semantics of
// accelerate's HfDeepSpeedConfig (docs/DEEPSPEED.md §3.1). This is the mutable stage the
// HF-Trainer layer fills ("auto" substitution) before resolve_config() types and validates it.
//
// Dotted keys ("zero_optimization.offload_optimizer.device") are walked one object at a time;
// a missing or null node means "not set". Walking through a value that is not an object is a
// ConfigError naming both keys (accelerate would raise AttributeError).
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include "core/json.h"

namespace zrt::config {

class DeepSpeedConfig {
 public:
  // Takes a copy of `config`, which must be a JSON object; computes stage and offload.
  explicit DeepSpeedConfig(Json config);

  // Loads from a file path, a JSON string or urlsafe base64 (config/load.h).
  static DeepSpeedConfig from_source(const std::string& path_json_or_base64);

  const Json& json() const { return config_; }
  Json& json() { return config_; }

  // (parent object, last key) of a dotted key; parent is nullptr when an intermediate node is
  // missing or null. The key itself need not exist.
  std::pair<const Json*, std::string> find_config_node(std::string_view dotted) const;
  std::pair<Json*, std::string> find_config_node(std::string_view dotted);

  // The value at `dotted`, or `default_value` when the parent or the key is missing. A key
  // present with a null value returns null (Python's dict.get).
  Json get_value(std::string_view dotted, const Json& default_value = nullptr) const;

  // Python truthiness of the value; an unset (missing or null) key is neither true nor false.
  // Strings are truthy: "auto" and "false" are both is_true.
  bool is_true(std::string_view dotted) const;
  bool is_false(std::string_view dotted) const;

  // The raw zero_optimization.stage as loaded (compared like Python: 2.0 == 2).
  bool is_zero2() const;
  bool is_zero3() const;
  // Offload counts only for stage 2/3: offload_optimizer.device or offload_param.device is
  // "cpu" or "nvme". A stage-1 offload is not "offload" here (accelerate's rule).
  bool is_offload() const { return offload_; }

  // Removes the subtree at `dotted`. If any node on the way is missing: with must_exist a
  // ConfigError "Can't find <dotted> entry in the config: <the whole config, Python repr>",
  // otherwise nothing happens.
  void del_config_sub_tree(std::string_view dotted, bool must_exist = false);

  // Recomputes the stage and offload flags from the current JSON (the constructor does this
  // once; accelerate never recomputes, so neither do the other members).
  void set_stage_and_offload();

 private:
  Json config_;
  Json stage_;
  bool offload_ = false;
};

}  // namespace zrt::config
