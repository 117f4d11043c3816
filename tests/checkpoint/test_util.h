// Helpers shared by the checkpoint tests: a self-deleting temp directory, running Python
// (/usr/bin/python3, the interpreter that has torch) and small tensor factories.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tests/support/run_command.h"

namespace zrt::ckpt::test {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "zrt_ckpt_XXXXXX").string();
    char* p = ::mkdtemp(&tmpl[0]);
    if (p == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = p;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

constexpr const char* kPython = "/usr/bin/python3";

struct PythonResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

// Runs `script` with /usr/bin/python3 (argv[1..] = args).
inline PythonResult run_python(const std::string& script, const std::string& args = "") {
  TempDir dir;
  const std::string file = dir / "script.py";
  std::ofstream(file) << script;
  const auto c = zrt::test::run_command(std::string(kPython) + " " + file + " " + args);
  PythonResult r;
  r.exit_code = c.exit_code;
  r.output = c.output;
  return r;
}

// True when /usr/bin/python3 can import torch (checked once).
inline bool python_has_torch() {
  static const bool ok = run_python("import torch\n").exit_code == 0;
  return ok;
}

#define ZRT_REQUIRE_PYTHON_TORCH()                                                    \
  do {                                                                                \
    if (!::zrt::ckpt::test::python_has_torch()) {                                     \
      GTEST_SKIP() << "/usr/bin/python3 cannot import torch (install python3-torch)"; \
    }                                                                                 \
  } while (false)

inline std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

}  // namespace zrt::ckpt::test
