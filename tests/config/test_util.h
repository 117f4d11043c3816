// Helpers shared by the config tests: JSON literals and checks on ConfigError messages.
#pragma once

#include <functional>
#include <string>

#include <gtest/gtest.h>

#include "config/hf_trainer.h"
#include "config/resolved.h"
#include "core/error.h"
#include "core/json.h"

namespace zrt::test {

using config::ResolveOptions;
using config::ResolvedConfig;
using config::resolve_config;

inline Json J(const std::string& text) { return Json::parse(text); }

// The message of the ConfigError thrown by fn, or "<no error>" / "<other: ...>".
inline std::string config_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<other: ") + e.what() + ">";
  }
  return "<no error>";
}

inline std::string resolve_error(const std::string& json, int world_size = 1) {
  return config_error([&] {
    ResolveOptions options;
    options.world_size = world_size;
    resolve_config(J(json), options);
  });
}

inline ResolvedConfig resolve(const std::string& json, int world_size = 1) {
  ResolveOptions options;
  options.world_size = world_size;
  return resolve_config(J(json), options);
}

// The HF-Trainer layer's view of a DeepSpeed config given as JSON text.
inline config::HfTrainerDeepSpeedConfig hf_config(const std::string& json) {
  return config::HfTrainerDeepSpeedConfig(config::DeepSpeedConfig(J(json)));
}

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace zrt::test

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_PRED2(::zrt::test::contains, haystack, needle)
