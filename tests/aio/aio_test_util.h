// Helpers shared by the aio tests: scratch folders on a chosen file system, random bytes, and a
// scoped environment variable (the tests are programs of their own, so they may set it).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <system_error>

#include <gtest/gtest.h>

#include "aio/aligned_buffer.h"
#include "core/error.h"
#include <stdlib.h>

namespace zrt::aio::test {

// A fresh folder under `parent` (/tmp is ext4 here, /dev/shm tmpfs), removed on destruction.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& parent = "/tmp") {
    std::string tmpl = parent + "/zrt_aio_test_XXXXXX";
    if (::mkdtemp(&tmpl[0]) == nullptr) throw std::runtime_error("mkdtemp failed for " + tmpl);
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// `bytes` random bytes (from `seed`) in an aligned buffer.
inline AlignedBuffer random_buffer(int64_t bytes, uint32_t seed) {
  AlignedBuffer buffer(bytes, BufferInit::kUninitialized);
  std::mt19937 rng(seed);
  auto* p = buffer.as<unsigned char>();
  for (int64_t i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>(rng() >> 24);
  return buffer;
}

inline bool same_bytes(const AlignedBuffer& a, const AlignedBuffer& b, int64_t bytes) {
  return std::memcmp(a.data(), b.data(), static_cast<size_t>(bytes)) == 0;
}

// The message of the zrt::Error `fn` throws; a marker text when it throws none.
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no zrt::Error>";
}

inline ::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "'\n  does not contain '" << part << "'";
}

// Sets an environment variable for the scope (the engine reads it at construction).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) {
      had_ = true;
      old_ = old;
    }
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) {
      ::setenv(name_.c_str(), old_.c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  bool had_ = false;
  std::string old_;
};

}  // namespace zrt::aio::test
