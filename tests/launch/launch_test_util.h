// Helpers for the launcher tests: catching typed errors (the temp directory is test::TempDir).
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "tests/support/temp_dir.h"

#include <unistd.h>

namespace zrt::test {

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

}  // namespace zrt::test
