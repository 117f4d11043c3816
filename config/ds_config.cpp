#include "config/ds_config.h"

#include <vector>

#include "config/load.h"
#include "config/py_format.h"
#include "core/error.h"

namespace zrt::config {
namespace {

std::vector<std::string> split_dotted(std::string_view dotted) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = dotted.find('.', start);
    parts.emplace_back(dotted.substr(start, dot - start));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return parts;
}

std::string joined(const std::vector<std::string>& parts, std::size_t count) {
  std::string out;
  for (std::size_t i = 0; i < count; ++i) {
    if (i) out += '.';
    out += parts[i];
  }
  return out;
}

template <typename JsonT>
std::pair<JsonT*, std::string> find_node(JsonT& root, std::string_view dotted) {
  std::vector<std::string> parts = split_dotted(dotted);
  std::string key = parts.back();
  JsonT* node = &root;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    auto it = node->find(parts[i]);
    if (it == node->end() || it->is_null()) return {nullptr, key};
    if (!it->is_object()) {
      throw ConfigError(str("cannot look up \"", dotted, "\" in the DeepSpeed config: \"",
                            joined(parts, i + 1), "\" is ", py_repr(*it), ", not an object"));
    }
    node = &*it;
  }
  return {node, key};
}

}  // namespace

DeepSpeedConfig::DeepSpeedConfig(Json config) : config_(load_config_json(config)) {
  set_stage_and_offload();
}

DeepSpeedConfig DeepSpeedConfig::from_source(const std::string& path_json_or_base64) {
  return DeepSpeedConfig(load_config_source(path_json_or_base64));
}

std::pair<const Json*, std::string> DeepSpeedConfig::find_config_node(
    std::string_view dotted) const {
  return find_node(config_, dotted);
}

std::pair<Json*, std::string> DeepSpeedConfig::find_config_node(std::string_view dotted) {
  return find_node(config_, dotted);
}

Json DeepSpeedConfig::get_value(std::string_view dotted, const Json& default_value) const {
  auto [parent, key] = find_config_node(dotted);
  if (parent == nullptr) return default_value;
  auto it = parent->find(key);
  if (it == parent->end()) return default_value;
  return *it;
}

bool DeepSpeedConfig::is_true(std::string_view dotted) const {
  const Json value = get_value(dotted);
  return !value.is_null() && py_truthy(value);
}

bool DeepSpeedConfig::is_false(std::string_view dotted) const {
  const Json value = get_value(dotted);
  return !value.is_null() && !py_truthy(value);
}

bool DeepSpeedConfig::is_zero2() const { return py_equal(stage_, Json(2)); }
bool DeepSpeedConfig::is_zero3() const { return py_equal(stage_, Json(3)); }

void DeepSpeedConfig::set_stage_and_offload() {
  stage_ = get_value("zero_optimization.stage", -1);
  offload_ = false;
  if (is_zero2() || is_zero3()) {
    for (const char* key :
         {"zero_optimization.offload_optimizer.device", "zero_optimization.offload_param.device"}) {
      const Json device = get_value(key);
      if (device == "cpu" || device == "nvme") offload_ = true;
    }
  }
}

void DeepSpeedConfig::del_config_sub_tree(std::string_view dotted, bool must_exist) {
  std::vector<std::string> parts = split_dotted(dotted);
  Json* parent = nullptr;
  Json* node = &config_;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (!node->is_object()) {
      throw ConfigError(str("cannot look up \"", dotted, "\" in the DeepSpeed config: \"",
                            joined(parts, i), "\" is ", py_repr(*node), ", not an object"));
    }
    auto it = node->find(parts[i]);
    if (it == node->end() || it->is_null()) {
      if (must_exist) {
        throw ConfigError(str("Can't find ", dotted, " entry in the config: ", py_repr(config_)));
      }
      return;
    }
    parent = node;
    node = &*it;
  }
  parent->erase(parts.back());
}

}  // namespace zrt::config
