#include "bench/harness.h"

#include <thread>

namespace zrt::bench {
namespace {

template <typename F>
void parallel(int threads, F&& body) {
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back([&body, t] { body(t); });
  body(0);
  for (auto& th : pool) th.join();
}

}  // namespace

double measure_memcpy_gbps(size_t bytes, int threads) {
  std::vector<char> src(bytes, 1);
  std::vector<char> dst(bytes, 0);
  const size_t part = bytes / threads;
  auto copy = [&] {
    parallel(threads, [&](int t) {
      const size_t off = t * part;
      const size_t n = t == threads - 1 ? bytes - off : part;
      std::memcpy(dst.data() + off, src.data() + off, n);
    });
  };
  const double s = median(time_runs(2, 7, copy));
  return static_cast<double>(bytes) / s / 1e9;
}

double measure_triad_gbps(size_t elements, int threads) {
  std::vector<float> a(elements, 0.f), b(elements, 1.f), c(elements, 2.f);
  const size_t part = elements / threads;
  auto triad = [&] {
    parallel(threads, [&](int t) {
      const size_t off = t * part;
      const size_t end = t == threads - 1 ? elements : off + part;
      float* __restrict pa = a.data();
      const float* __restrict pb = b.data();
      const float* __restrict pc = c.data();
      for (size_t i = off; i < end; ++i) pa[i] = pb[i] + 3.0f * pc[i];
    });
  };
  const double s = median(time_runs(2, 7, triad));
  return 12.0 * static_cast<double>(elements) / s / 1e9;
}

}  // namespace zrt::bench
