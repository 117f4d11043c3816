// CPU Adam: run-time ISA choice (CPUID + ZRT_CPU_ADAM_ISA), the scalar path, and the tiling of a
// multi-tensor step over the kernel thread pool.
#include "kernels/cpu_adam.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <vector>

#include "core/env.h"
#include "core/error.h"
#include "kernels/cpu_adam_impl.h"
#include "kernels/cpu_thread_pool.h"

namespace zrt::kernels {

namespace detail {

void adam_range_scalar(const RangeArgs& a) {
  adam_scalar_elements(*a.tensor, a.begin, a.end, *a.scalars);
}

}  // namespace detail

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar:
      return "scalar";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
  }
  return "?";
}

std::optional<CpuIsa> parse_cpu_isa(const std::string& text) {
  std::string t = text;
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
  if (t == "scalar") return CpuIsa::kScalar;
  if (t == "avx2") return CpuIsa::kAvx2;
  if (t == "avx512") return CpuIsa::kAvx512;
  return std::nullopt;
}

bool cpu_isa_supported(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar:
      return true;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    // __builtin_cpu_supports also checks that the OS saves the vector registers (XCR0).
    case CpuIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    case CpuIsa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             cpu_isa_supported(CpuIsa::kAvx2);
#else
    case CpuIsa::kAvx2:
    case CpuIsa::kAvx512:
      return false;
#endif
  }
  return false;
}

CpuIsa best_cpu_isa() {
  if (cpu_isa_supported(CpuIsa::kAvx512)) return CpuIsa::kAvx512;
  if (cpu_isa_supported(CpuIsa::kAvx2)) return CpuIsa::kAvx2;
  return CpuIsa::kScalar;
}

CpuIsa cpu_adam_isa() {
  const auto value = env::get_string(env::kCpuAdamIsa);
  if (!value) return best_cpu_isa();
  const auto isa = parse_cpu_isa(*value);
  ZRT_CHECK_AS(ConfigError, isa.has_value(), "environment variable ", env::kCpuAdamIsa, "='",
               *value, "' is not one of avx512, avx2, scalar");
  ZRT_CHECK_AS(ConfigError, cpu_isa_supported(*isa), "environment variable ", env::kCpuAdamIsa, "=",
               *value, " but this CPU does not support ", cpu_isa_name(*isa),
               " (best available: ", cpu_isa_name(best_cpu_isa()), ")");
  return *isa;
}

const char* cpu_adam_isa_name() { return cpu_isa_name(cpu_adam_isa()); }

namespace {

using RangeFn = void (*)(const detail::RangeArgs&);

RangeFn range_function(CpuIsa isa) {
  switch (isa) {
#if defined(__x86_64__)
    case CpuIsa::kAvx512:
      return &detail::adam_range_avx512;
    case CpuIsa::kAvx2:
      return &detail::adam_range_avx2;
#endif
    default:
      return &detail::adam_range_scalar;
  }
}

void check_tensor(const CpuAdamTensor& t, size_t index) {
  ZRT_CHECK(t.numel >= 0, "cpu_adam_step: tensor ", index, " has numel ", t.numel);
  if (t.numel == 0) return;
  ZRT_CHECK(
      t.param != nullptr && t.grad != nullptr && t.exp_avg != nullptr && t.exp_avg_sq != nullptr,
      "cpu_adam_step: tensor ", index, " (numel ", t.numel, ") has a null pointer");
  ZRT_CHECK(t.param_copy == nullptr || t.copy_dtype != DType::kFloat32, "cpu_adam_step: tensor ",
            index, ": the parameter copy must be bf16 or fp16, not fp32");
}

}  // namespace

// Note [CPU Adam tiles]:
// Every tensor is cut into tiles of kCpuAdamTileElems elements (config.tile_elems) (the last one
// shorter); threads claim tiles from one atomic counter until none is left. Tiles keep each thread
// streaming through long contiguous stretches (≈ 1.8 MB of p, g, m, v per tile in fp32, so the
// hardware prefetchers stay busy) while a thread that is preempted on a shared machine delays only
// its current tile instead of a fixed half of the work. Tile starts are multiples of 64 elements
// within a tensor, so every tile has the same alignment as its tensor. The result does not depend
// on which thread ran which tile: the update is elementwise.
void cpu_adam_step(const CpuAdamTensor* tensors, size_t count, const AdamScalars& scalars,
                   const CpuAdamConfig& config) {
  ZRT_CHECK(count == 0 || tensors != nullptr, "cpu_adam_step: null tensor list");
  CpuIsa isa;
  if (config.isa) {
    ZRT_CHECK(cpu_isa_supported(*config.isa), "cpu_adam_step: this CPU does not support ",
              cpu_isa_name(*config.isa));
    isa = *config.isa;
  } else {
    isa = cpu_adam_isa();
  }
  const RangeFn fn = range_function(isa);
  const int64_t tile = config.tile_elems;
  ZRT_CHECK(tile > 0 && tile % 64 == 0, "cpu_adam_step: tile_elems=", tile,
            " must be a positive multiple of 64");

  std::vector<int64_t> first_tile(count + 1, 0);
  for (size_t k = 0; k < count; ++k) {
    check_tensor(tensors[k], k);
    const int64_t tiles = (tensors[k].numel + tile - 1) / tile;
    first_tile[k + 1] = first_tile[k] + tiles;
  }
  const int64_t total_tiles = first_tile[count];
  if (total_tiles == 0) return;

  const int wanted = config.num_threads > 0 ? config.num_threads : cpu_kernel_threads();
  const int threads = static_cast<int>(std::min<int64_t>(wanted, total_tiles));
  std::atomic<int64_t> next_tile{0};
  run_on_threads(threads, [&](int) {
    for (;;) {
      const int64_t index = next_tile.fetch_add(1, std::memory_order_relaxed);
      if (index >= total_tiles) return;
      const auto it = std::upper_bound(first_tile.begin(), first_tile.end(), index);
      const size_t k = static_cast<size_t>(it - first_tile.begin()) - 1;
      const int64_t begin = (index - first_tile[k]) * tile;
      const int64_t end = std::min(begin + tile, tensors[k].numel);
      fn(detail::RangeArgs{&tensors[k], begin, end, &scalars, config.streaming_copy});
    }
  });
}

}  // namespace zrt::kernels
