// Helpers shared by the checkpoint tests: the temp directory and Python of tests/support, file
// helpers and small tensor factories.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tests/support/python.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

namespace zrt::test {

#define ZRT_REQUIRE_PYTHON_TORCH() ZRT_REQUIRE_PYTHON("torch")

inline std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

}  // namespace zrt::test
