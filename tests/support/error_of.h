// error_of<E>(fn): the message of the E that `fn` throws, for tests that check error texts with
// EXPECT_THAT(..., HasSubstr(...)). Returns "<no E>" when fn returns normally; any other
// exception propagates and fails the test.
#pragma once

#include <functional>
#include <string>

namespace zrt::test {

template <class E>
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  return "<no exception of the expected type>";
}

}  // namespace zrt::test
