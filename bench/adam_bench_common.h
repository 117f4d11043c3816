// Pieces shared by adam_bench.cpp (the main CPU table) and adam_bench_extra.cpp (the CPU option
// sweep and the CUDA run): size parsing and printing, the relative-difference check.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include <ATen/ATen.h>

#include "core/json.h"

namespace zrt::bench {

// "64M" → 64·2^20, "1G" → 2^30, "1000" → 1000.
inline int64_t parse_count(std::string s) {
  int64_t mult = 1;
  const char unit = s.empty() ? ' ' : s.back();
  if (unit == 'K' || unit == 'k') mult = 1LL << 10;
  if (unit == 'M' || unit == 'm') mult = 1LL << 20;
  if (unit == 'G' || unit == 'g') mult = 1LL << 30;
  if (mult != 1) s.pop_back();
  return std::stoll(s) * mult;
}

// 2^20 → "1M", 3·2^30 → "3G", 1000 → "1000".
inline std::string format_count(int64_t n) {
  if (n >= (1LL << 30) && n % (1LL << 30) == 0) return std::to_string(n >> 30) + "G";
  if (n >= (1LL << 20) && n % (1LL << 20) == 0) return std::to_string(n >> 20) + "M";
  if (n >= (1LL << 10) && n % (1LL << 10) == 0) return std::to_string(n >> 10) + "K";
  return std::to_string(n);
}

// max |a − b| / max(max |b|, 1e-30), the tests' measure.
inline double max_rel_diff(const at::Tensor& a, const at::Tensor& b) {
  if (b.numel() == 0) return 0.0;
  const double num = (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
  return num / std::max(b.abs().max().item<double>(), 1e-30);
}

// The option sweep at one size and thread count: ISA paths, tile sizes, streaming copy on/off.
// Appends rows to (*out)["sweep"]; prints a table unless json.
void sweep_cpu_options(int64_t n, int threads, bool json, Json* out);

// The CUDA part: the multi-tensor kernel on one flat buffer per size against the device's
// measured copy bandwidth. Prints "skipped: ..." and returns 0 when no GPU can run it.
int run_cuda(int argc, char** argv);

}  // namespace zrt::bench
