// Prefix and suffix tests for std::string: std::string::starts_with / ends_with are C++20, and the
// Debian LibTorch 1.13 build is C++17.
#pragma once

#include <string>

namespace zrt {

inline bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

inline bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace zrt
