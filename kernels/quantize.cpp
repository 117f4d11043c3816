// Symmetric group quantization: argument checks, run-time ISA choice (CPUID +
// ZRT_CPU_QUANT_ISA), the scalar path, the split of groups over the kernel thread pool, and
// qwZ's group-count rule.
#include "kernels/quantize.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "core/env.h"
#include "core/error.h"
#include "kernels/quantize_args.h"
#include "kernels/cpu_thread_pool.h"
#include "kernels/quantize_impl.h"

namespace zrt::kernels {

namespace detail {

void quantize_groups_scalar(const QuantizeArgs& a) {
  for (int64_t g = a.group_begin; g < a.group_end; ++g) {
    int64_t begin, end;
    group_bounds(g, a.group_size, a.numel, begin, end);
    float amax = 0.0f;
    bool non_finite = false;
    for (int64_t i = begin; i < end; ++i) {
      const float v = load_element(a.x, a.x_dtype, i);
      non_finite = non_finite || not_finite(v);
      amax = std::max(amax, std::fabs(v));
    }
    const GroupParams p = group_params(amax, non_finite, a.bits);
    a.scales[g] = p.s;
    quantize_elements(a, begin, end, p.m);
  }
}

void dequantize_groups_scalar(const DequantizeArgs& a) {
  for (int64_t g = a.group_begin; g < a.group_end; ++g) {
    int64_t begin, end;
    group_bounds(g, a.group_size, a.numel, begin, end);
    dequantize_elements(a, begin, end, a.scales[g]);
  }
}

}  // namespace detail

CpuIsa cpu_quant_isa() {
  const auto value = env::get_string(env::kCpuQuantIsa);
  if (!value) return best_cpu_isa();
  const auto isa = parse_cpu_isa(*value);
  ZRT_CHECK_AS(ConfigError, isa.has_value(), "environment variable ", env::kCpuQuantIsa, "='",
               *value, "' is not one of avx512, avx2, scalar");
  ZRT_CHECK_AS(ConfigError, cpu_isa_supported(*isa), "environment variable ", env::kCpuQuantIsa,
               "=", *value, " but this CPU does not support ", cpu_isa_name(*isa),
               " (best available: ", cpu_isa_name(best_cpu_isa()), ")");
  return *isa;
}

int64_t quantized_bytes(int64_t numel, int bits) {
  ZRT_CHECK(bits == 8 || bits == 4, "quantized_bytes: bits=", bits, " must be 8 or 4");
  ZRT_CHECK(numel >= 0, "quantized_bytes: numel=", numel, " must be >= 0");
  return bits == 8 ? numel : (numel + 1) / 2;
}

int64_t quantized_groups(int64_t numel, int64_t group_size) {
  ZRT_CHECK(group_size > 0, "quantized_groups: group_size=", group_size, " must be > 0");
  ZRT_CHECK(numel >= 0, "quantized_groups: numel=", numel, " must be >= 0");
  return numel == 0 ? 0 : (numel - 1) / group_size + 1;
}

namespace {

// Elements below which a call runs inline on the caller: waking the pool costs a few
// microseconds, about what 64K elements take on one core.
constexpr int64_t kInlineElems = 64 * 1024;
// Elements per unit of work a thread claims (rounded to whole groups).
constexpr int64_t kChunkElems = 64 * 1024;

CpuIsa choose_isa(const char* fn, const QuantizeConfig& config) {
  if (!config.isa) return cpu_quant_isa();
  ZRT_CHECK(cpu_isa_supported(*config.isa), fn, ": this CPU does not support ",
            cpu_isa_name(*config.isa));
  return *config.isa;
}

// Note [Quantize work split]:
// Work is split by whole groups: a thread claims a chunk of about kChunkElems elements' worth of
// consecutive groups from an atomic counter and runs the ISA's group loop on it. Scales are per
// group, so no two threads write the same scale. With 4-bit codes and an odd group_size a byte
// can hold the last element of one group and the first of the next; the chunk length in groups
// is then made even, so every chunk starts at an even element and owns all of its bytes (4-bit
// codes are written high nibble first, see put_code). The result does not depend on the thread
// count: each group's codes and scale are a function of that group alone.
template <typename Args, typename Fn>
void run_groups(const char* fn_name, Args args, int64_t num_groups, int64_t group_size,
                const QuantizeConfig& config, Fn fn) {
  ZRT_CHECK(config.num_threads >= 0, fn_name, ": num_threads=", config.num_threads,
            " must be >= 0");
  int64_t chunk = std::max<int64_t>(1, kChunkElems / group_size);
  if (args.bits == 4 && group_size % 2 == 1) chunk += chunk % 2;
  const int64_t chunks = (num_groups + chunk - 1) / chunk;
  const int wanted = config.num_threads > 0 ? config.num_threads : cpu_kernel_threads();
  const int threads = static_cast<int>(std::min<int64_t>(wanted, chunks));
  if (args.numel < kInlineElems || threads <= 1) {
    args.group_begin = 0;
    args.group_end = num_groups;
    fn(args);
    return;
  }
  std::atomic<int64_t> next{0};
  run_on_threads(threads, [&](int) {
    for (;;) {
      const int64_t c = next.fetch_add(1, std::memory_order_relaxed);
      if (c >= chunks) return;
      Args mine = args;
      mine.group_begin = c * chunk;
      mine.group_end = std::min(num_groups, mine.group_begin + chunk);
      fn(mine);
    }
  });
}

using QuantizeFn = void (*)(const detail::QuantizeArgs&);
using DequantizeFn = void (*)(const detail::DequantizeArgs&);

QuantizeFn quantize_function(CpuIsa isa) {
  switch (isa) {
#if defined(__x86_64__)
    case CpuIsa::kAvx512:
      return &detail::quantize_groups_avx512;
    case CpuIsa::kAvx2:
      return &detail::quantize_groups_avx2;
#endif
    default:
      return &detail::quantize_groups_scalar;
  }
}

DequantizeFn dequantize_function(CpuIsa isa) {
  switch (isa) {
#if defined(__x86_64__)
    case CpuIsa::kAvx512:
      return &detail::dequantize_groups_avx512;
    case CpuIsa::kAvx2:
      return &detail::dequantize_groups_avx2;
#endif
    default:
      return &detail::dequantize_groups_scalar;
  }
}

void dequantize_impl(const char* fn, const uint8_t* q, const float* scales, int64_t numel,
                     int64_t group_size, int bits, void* out, DType out_dtype, bool accumulate,
                     const QuantizeConfig& config) {
  detail::check_quantize_args(fn, numel, group_size, bits);
  if (!accumulate) detail::check_quantize_dtype(fn, "out_dtype", out_dtype);
  const DequantizeFn kernel = dequantize_function(choose_isa(fn, config));
  if (numel == 0) return;
  ZRT_CHECK(q != nullptr && scales != nullptr && out != nullptr, fn,
            ": null pointer (q=", static_cast<const void*>(q),
            ", scales=", static_cast<const void*>(scales), accumulate ? ", acc=" : ", out=", out,
            ") for numel ", numel);
  const detail::DequantizeArgs args{q,   scales,    numel,      group_size, bits,
                                    out, out_dtype, accumulate, 0,          0};
  run_groups(fn, args, quantized_groups(numel, group_size), group_size, config, kernel);
}

}  // namespace

void quantize_symmetric(const void* x, DType x_dtype, int64_t numel, int64_t group_size, int bits,
                        uint8_t* q, float* scales, const QuantizeConfig& config) {
  constexpr const char* fn = "quantize_symmetric";
  detail::check_quantize_args(fn, numel, group_size, bits);
  detail::check_quantize_dtype(fn, "x_dtype", x_dtype);
  const QuantizeFn kernel = quantize_function(choose_isa(fn, config));
  if (numel == 0) return;
  ZRT_CHECK(x != nullptr && q != nullptr && scales != nullptr, fn, ": null pointer (x=", x,
            ", q=", static_cast<const void*>(q), ", scales=", static_cast<const void*>(scales),
            ") for numel ", numel);
  const detail::QuantizeArgs args{x, x_dtype, numel, group_size, bits, q, scales, 0, 0};
  run_groups(fn, args, quantized_groups(numel, group_size), group_size, config, kernel);
}

void dequantize_symmetric(const uint8_t* q, const float* scales, int64_t numel, int64_t group_size,
                          int bits, void* out, DType out_dtype, const QuantizeConfig& config) {
  dequantize_impl("dequantize_symmetric", q, scales, numel, group_size, bits, out, out_dtype, false,
                  config);
}

void dequantize_accumulate(const uint8_t* q, const float* scales, int64_t numel, int64_t group_size,
                           int bits, float* acc, const QuantizeConfig& config) {
  dequantize_impl("dequantize_accumulate", q, scales, numel, group_size, bits, acc, DType::kFloat32,
                  true, config);
}

// Note [qwZ group count] (quantize.h).
int64_t qwz_group_count(int64_t numel) {
  ZRT_CHECK(numel > 0 && numel % 8 == 0, "qwz_group_count: numel=", numel,
            " must be a positive multiple of 8 (DeepSpeed's qwZ quantizer requires it)");
  const int64_t k = numel / 8;
  const int64_t lower = (numel + 7999) / 8000;
  // The smallest divisor of k that is >= lower: divisors come in pairs (d, k / d) with
  // d <= sqrt(k); k itself is always a candidate since lower <= k.
  int64_t best = k;
  for (int64_t d = 1; d * d <= k; ++d) {
    if (k % d != 0) continue;
    if (d >= lower) best = std::min(best, d);
    if (k / d >= lower) best = std::min(best, k / d);
  }
  return best;
}

}  // namespace zrt::kernels
