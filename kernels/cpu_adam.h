// The CPU Adam kernel on raw pointers: one pass over memory per step (read p, g, m, v; write p, m,
// v and optionally a bf16/fp16 copy of p), AVX-512 / AVX2 / scalar paths chosen at run time, tiles
// spread over the kernel thread pool. No LibTorch in this header; the at::Tensor front end is
// kernels/adam_launch.h. The arithmetic is Note [Adam element math] in kernels/adam_math.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "core/dtype.h"
#include "kernels/adam_math.h"

namespace zrt::kernels {

enum class CpuIsa { kScalar, kAvx2, kAvx512 };

// "scalar", "avx2", "avx512".
const char* cpu_isa_name(CpuIsa isa);
// Parses the names above (case-insensitive); nullopt otherwise.
std::optional<CpuIsa> parse_cpu_isa(const std::string& text);
// Whether this CPU (and OS) can run the path: AVX-512 needs F, BW and VL; AVX2 needs AVX2, FMA
// and F16C. The scalar path always runs.
bool cpu_isa_supported(CpuIsa isa);
// The widest supported path.
CpuIsa best_cpu_isa();
// The path cpu_adam_step takes when not told: ZRT_CPU_ADAM_ISA if set, else best_cpu_isa().
// Throws ConfigError for an unknown value or a path this CPU cannot run.
CpuIsa cpu_adam_isa();
// cpu_isa_name(cpu_adam_isa()), for zrt-report.
const char* cpu_adam_isa_name();

// One tensor of a multi-tensor step: `numel` contiguous elements of each array. The arrays may
// start at any element address (views at an offset are fine); they must not overlap each other.
struct CpuAdamTensor {
  float* param = nullptr;       // fp32 master, updated in place
  const void* grad = nullptr;   // grad_dtype elements, read only
  float* exp_avg = nullptr;     // m, fp32
  float* exp_avg_sq = nullptr;  // v, fp32
  void* param_copy = nullptr;   // optional: receives the updated p as copy_dtype (bf16 or fp16)
  int64_t numel = 0;
  DType grad_dtype = DType::kFloat32;
  DType copy_dtype = DType::kBFloat16;
};

// Elements per tile: the unit of work a thread claims (Note [CPU Adam tiles]).
inline constexpr int64_t kCpuAdamTileElems = 64 * 1024;

struct CpuAdamConfig {
  int num_threads = 0;         // 0: cpu_kernel_threads()
  std::optional<CpuIsa> isa;   // unset: cpu_adam_isa(); set: must be supported
  bool streaming_copy = true;  // non-temporal stores for param_copy (Note [Streaming copy])
  int64_t tile_elems = kCpuAdamTileElems;  // a multiple of 64; for benchmarks and tests
};

// One Adam step over every tensor with the same scalars (one parameter group). Tensors of any
// size, including 0, are fine. Thread-safe (concurrent calls are serialised by the pool).
void cpu_adam_step(const CpuAdamTensor* tensors, size_t count, const AdamScalars& scalars,
                   const CpuAdamConfig& config = {});

}  // namespace zrt::kernels
