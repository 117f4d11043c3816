// The project's Python for tests that run the real peers or read our files with torch: the venv
// made by scripts/install_deps.sh (torch 2.x, deepspeed, transformers, ...). CTest passes its path
// as ZRT_PYTHON (cmake -DZRT_PYTHON=...). Without it, a test that needs Python skips with the
// reason on a developer's machine and fails under CI (CI=true): CI must never pass by skipping.
#pragma once

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

namespace zrt::test {

inline std::string python_path() {
  const char* p = std::getenv("ZRT_PYTHON");
  return p != nullptr && *p != '\0' ? p : "python3";
}

// True when the project's Python imports every module in `modules` (comma separated); cached.
inline bool python_can_import(const std::string& modules) {
  static std::map<std::string, bool> cache;
  auto it = cache.find(modules);
  if (it == cache.end()) {
    const auto r = run_command(python_path() + " -c 'import " + modules + "'");
    it = cache.emplace(modules, r.exit_code == 0).first;
  }
  return it->second;
}

inline bool running_in_ci() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string(ci) == "true";
}

// Runs `script` (written to a temporary file) with the project's Python; argv[1..] = args.
inline CommandResult run_python(const std::string& script, const std::string& args = "") {
  TempDir dir("zrt_py");
  const std::string file = dir / "script.py";
  std::ofstream(file) << script;
  return run_command(python_path() + " " + file + " " + args);
}

}  // namespace zrt::test

// Skips the test (fails it under CI) unless the project's Python imports `modules`.
#define ZRT_REQUIRE_PYTHON(modules)                                                         \
  do {                                                                                      \
    if (!::zrt::test::python_can_import(modules)) {                                         \
      const std::string why_ = ::zrt::test::python_path() + " cannot import " + (modules) + \
                               " (run scripts/install_deps.sh to make the venv)";           \
      if (::zrt::test::running_in_ci()) FAIL() << why_;                                     \
      GTEST_SKIP() << why_;                                                                 \
    }                                                                                       \
  } while (false)
