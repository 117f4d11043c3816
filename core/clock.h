// Monotonic wall time in seconds, for step timers, ETAs and benchmarks.
#pragma once

#include <chrono>

namespace zrt {

inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace zrt
