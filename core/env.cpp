#include "core/env.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "core/error.h"

namespace zrt::env {

std::optional<std::string> get_string(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::optional<int64_t> get_int(const char* name) {
  auto s = get_string(name);
  if (!s) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s->c_str(), &end, 10);
  ZRT_CHECK_AS(ConfigError, errno == 0 && end != s->c_str() && *end == '\0',
               "environment variable ", name, "='", *s, "' is not an integer");
  return static_cast<int64_t>(v);
}

std::optional<double> get_double(const char* name) {
  auto s = get_string(name);
  if (!s) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s->c_str(), &end);
  ZRT_CHECK_AS(ConfigError, errno == 0 && end != s->c_str() && *end == '\0' && std::isfinite(v),
               "environment variable ", name, "='", *s, "' is not a number");
  return v;
}

std::optional<bool> get_bool(const char* name) {
  auto s = get_string(name);
  if (!s) return std::nullopt;
  std::string t = *s;
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
  if (t == "1" || t == "true" || t == "yes" || t == "on") return true;
  if (t == "0" || t == "false" || t == "no" || t == "off") return false;
  throw ConfigError(
      str("environment variable ", name, "='", *s, "' is not a boolean (use 1 or 0)"));
}

}  // namespace zrt::env
