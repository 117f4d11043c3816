// Shared helpers of the benchmark programs in bench/: timing, statistics, a fixed-width table and
// optional JSON output. Benchmarks are plain programs (never CTest tests); each checks its result
// once before timing.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/clock.h"

namespace zrt::bench {

using zrt::now_seconds;

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Runs `fn` `warmup` times, then `iters` times, returning each timed run's seconds.
inline std::vector<double> time_runs(int warmup, int iters, const std::function<void()>& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> t;
  t.reserve(iters);
  for (int i = 0; i < iters; ++i) {
    const double s = now_seconds();
    fn();
    t.push_back(now_seconds() - s);
  }
  return t;
}

// "1 KiB", "16 MiB".
inline std::string format_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (b >= 1024 && u < 3) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), b == static_cast<int64_t>(b) ? "%.0f %s" : "%.1f %s", b,
                units[u]);
  return buf;
}

// True when argv contains `flag`.
inline bool has_flag(int argc, char** argv, const char* flag) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], flag) == 0) return true;
  }
  return false;
}

// The value after `flag` (e.g. --sizes 1K:256M), or `fallback`.
inline std::string flag_value(int argc, char** argv, const char* flag,
                              const std::string& fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], flag) == 0) return argv[i + 1];
  }
  return fallback;
}

// Multi-threaded memcpy bandwidth of this process (bytes copied / second).
double measure_memcpy_gbps(size_t bytes, int threads);
// STREAM-like triad a = b + s·c with `threads` threads; bytes moved = 3 × 4 B per element.
double measure_triad_gbps(size_t elements, int threads);

}  // namespace zrt::bench
