// Helpers for the launcher tests: a scratch directory, writing files, catching typed errors.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include <unistd.h>

namespace zrt::launch::test_util {

// A fresh directory under the system temp dir, removed on destruction.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name)
      : path_(std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  std::string path() const { return path_.string(); }
  // Writes `text` to `name` inside the directory; returns the full path.
  std::string write(const std::string& name, const std::string& text) const {
    const std::string file = (path_ / name).string();
    std::ofstream(file) << text;
    return file;
  }

 private:
  std::filesystem::path path_;
};

// The message of the `Error` subclass `fn` throws, or "" (and a test failure) when it does not.
template <typename ErrorType, typename Fn>
std::string error_message(Fn fn) {
  try {
    fn();
  } catch (const ErrorType& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

}  // namespace zrt::launch::test_util
