// ZeRO++ symmetric group quantization on CUDA (Note [CUDA quantize launch] in quantize_cuda.h):
// the same fp32 operations as the CPU kernels (Note [Symmetric group quantization] in
// quantize.h), so codes, scales and dequantized values match them bit for bit. No ATen here.
#include <algorithm>
#include <cfloat>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "core/error.h"
#include "kernels/quantize_args.h"
#include "kernels/adam_math.h"  // float_to_bf16_bits / bf16_bits_to_float (host and device)
#include "kernels/cuda_check.h"
#include "kernels/quantize_cuda.h"

namespace zrt::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int64_t kMaxBlocks = 65535;

enum Kind { kF32, kBf16, kF16, kAcc };

template <int D>
__device__ __forceinline__ float load_x(const void* x, int64_t i) {
  if constexpr (D == kF32) {
    return static_cast<const float*>(x)[i];
  } else if constexpr (D == kBf16) {
    return bf16_bits_to_float(static_cast<const uint16_t*>(x)[i]);
  } else {
    return __half2float(__ushort_as_half(static_cast<const unsigned short*>(x)[i]));
  }
}

// quantize_impl.h's group_params and quantize_value, with IEEE division (nvcc's default
// -prec-div=true) and rintf (round half to even).
__device__ __forceinline__ void group_params(float amax, bool non_finite, int bits, float& m,
                                             float& s) {
  if (non_finite) {
    m = 0.0f;
    s = __int_as_float(0x7FC00000);  // the quiet NaN the CPU path stores
    return;
  }
  m = static_cast<float>(1 << (bits - 1)) / amax;
  if (!(m <= FLT_MAX)) {
    m = 0.0f;
    s = 0.0f;
    return;
  }
  s = 1.0f / m;
}

__device__ __forceinline__ int code_of(float x, float m, int bits) {
  if (m == 0.0f) return 0;
  const float qmax = static_cast<float>((1 << (bits - 1)) - 1);
  const float qmin = -static_cast<float>(1 << (bits - 1));
  float r = rintf(__fmul_rn(x, m));
  r = r < qmin ? qmin : r;
  r = r > qmax ? qmax : r;
  return static_cast<int>(r);
}

// The block-wide max of v and OR of bad; every thread gets the result.
__device__ __forceinline__ float block_amax(float v, bool& bad) {
  __shared__ float warp_max[kWarps];
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, offset));
  }
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = v;
  bad = __syncthreads_or(bad ? 1 : 0) != 0;  // also orders the shared writes before the reads
  float amax = 0.0f;
  for (int w = 0; w < kWarps; ++w) amax = fmaxf(amax, warp_max[w]);
  __syncthreads();  // warp_max is reused by the next group
  return amax;
}

template <int D>
__global__ void __launch_bounds__(kThreads)
    quantize_kernel(const void* x, int64_t numel, int64_t group_size, int bits, int64_t groups,
                    uint8_t* q, float* scales) {
  for (int64_t g = blockIdx.x; g < groups; g += gridDim.x) {
    const int64_t begin = g * group_size;
    const int64_t end = min(begin + group_size, numel);
    float amax = 0.0f;
    bool bad = false;
    for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
      const float a = fabsf(load_x<D>(x, i));
      bad = bad || !(a <= FLT_MAX);
      amax = fmaxf(amax, a);  // fmaxf skips NaN; `bad` already records it
    }
    amax = block_amax(amax, bad);
    float m, s;
    group_params(amax, bad, bits, m, s);
    if (threadIdx.x == 0) scales[g] = s;
    if (bits == 8) {
      for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
        q[i] = static_cast<uint8_t>(static_cast<int8_t>(code_of(load_x<D>(x, i), m, bits)));
      }
    } else {
      // begin is even (group_size is even), so bytes [begin/2, ceil(end/2)) are this group's.
      for (int64_t byte = begin / 2 + threadIdx.x; byte < (end + 1) / 2; byte += kThreads) {
        const int64_t i = 2 * byte;
        const int high = code_of(load_x<D>(x, i), m, bits);
        const int low = i + 1 < end ? code_of(load_x<D>(x, i + 1), m, bits) : 0;
        q[byte] = static_cast<uint8_t>(((high & 0xF) << 4) | (low & 0xF));
      }
    }
  }
}

__device__ __forceinline__ int code_at(const uint8_t* q, int bits, int64_t i) {
  if (bits == 8) return static_cast<int8_t>(q[i]);
  const uint8_t b = q[i >> 1];
  const int nibble = (i & 1) == 0 ? (b >> 4) : (b & 0xF);
  return nibble >= 8 ? nibble - 16 : nibble;
}

template <int O>
__global__ void __launch_bounds__(kThreads)
    dequantize_kernel(const uint8_t* q, const float* scales, int64_t numel, int64_t group_size,
                      int bits, void* out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < numel;
       i += stride) {
    const float v = __fmul_rn(static_cast<float>(code_at(q, bits, i)), scales[i / group_size]);
    if constexpr (O == kAcc) {
      float* acc = static_cast<float*>(out);
      acc[i] = __fadd_rn(acc[i], v);
    } else if constexpr (O == kF32) {
      static_cast<float*>(out)[i] = v;
    } else if constexpr (O == kBf16) {
      static_cast<uint16_t*>(out)[i] = float_to_bf16_bits(v);
    } else {
      static_cast<unsigned short*>(out)[i] = __half_as_ushort(__float2half_rn(v));
    }
  }
}

int blocks_for(int64_t work) {
  return static_cast<int>(std::min<int64_t>(kMaxBlocks, std::max<int64_t>(1, work)));
}

template <int O>
void launch_dequantize(const uint8_t* q, const float* scales, int64_t numel, int64_t group_size,
                       int bits, void* out, cudaStream_t stream) {
  const int blocks = blocks_for((numel + kThreads - 1) / kThreads);
  dequantize_kernel<O><<<blocks, kThreads, 0, stream>>>(q, scales, numel, group_size, bits, out);
  ZRT_KERNELS_CUDA_CHECK(cudaGetLastError());
}

void dequantize_impl(const char* fn, const uint8_t* q, const float* scales, int64_t numel,
                     int64_t group_size, int bits, void* out, int kind, void* stream_ptr) {
  if (numel == 0) return;
  ZRT_CHECK(q != nullptr && scales != nullptr && out != nullptr, fn, ": null pointer for numel ",
            numel);
  const auto stream = static_cast<cudaStream_t>(stream_ptr);
  switch (kind) {
    case kF32:
      return launch_dequantize<kF32>(q, scales, numel, group_size, bits, out, stream);
    case kBf16:
      return launch_dequantize<kBf16>(q, scales, numel, group_size, bits, out, stream);
    case kF16:
      return launch_dequantize<kF16>(q, scales, numel, group_size, bits, out, stream);
    default:
      return launch_dequantize<kAcc>(q, scales, numel, group_size, bits, out, stream);
  }
}

int kind_of(DType dtype) {
  return dtype == DType::kFloat32 ? kF32 : dtype == DType::kBFloat16 ? kBf16 : kF16;
}

}  // namespace

void cuda_quantize_symmetric(const void* x, DType x_dtype, int64_t numel, int64_t group_size,
                             int bits, uint8_t* q, float* scales, void* stream_ptr) {
  constexpr const char* fn = "cuda_quantize_symmetric";
  detail::check_quantize_args(fn, numel, group_size, bits);
  detail::check_quantize_dtype(fn, "x_dtype", x_dtype);
  ZRT_CHECK(bits == 8 || group_size % 2 == 0, fn, ": group_size=", group_size,
            " must be even for 4-bit codes on CUDA (Note [CUDA quantize launch])");
  if (numel == 0) return;
  ZRT_CHECK(x != nullptr && q != nullptr && scales != nullptr, fn, ": null pointer for numel ",
            numel);
  const auto stream = static_cast<cudaStream_t>(stream_ptr);
  const int64_t groups = (numel - 1) / group_size + 1;
  const int blocks = blocks_for(groups);
  switch (x_dtype) {
    case DType::kFloat32:
      quantize_kernel<kF32>
          <<<blocks, kThreads, 0, stream>>>(x, numel, group_size, bits, groups, q, scales);
      break;
    case DType::kBFloat16:
      quantize_kernel<kBf16>
          <<<blocks, kThreads, 0, stream>>>(x, numel, group_size, bits, groups, q, scales);
      break;
    case DType::kFloat16:
      quantize_kernel<kF16>
          <<<blocks, kThreads, 0, stream>>>(x, numel, group_size, bits, groups, q, scales);
      break;
  }
  ZRT_KERNELS_CUDA_CHECK(cudaGetLastError());
}

void cuda_dequantize_symmetric(const uint8_t* q, const float* scales, int64_t numel,
                               int64_t group_size, int bits, void* out, DType out_dtype,
                               void* stream) {
  constexpr const char* fn = "cuda_dequantize_symmetric";
  detail::check_quantize_args(fn, numel, group_size, bits);
  detail::check_quantize_dtype(fn, "out_dtype", out_dtype);
  dequantize_impl(fn, q, scales, numel, group_size, bits, out, kind_of(out_dtype), stream);
}

void cuda_dequantize_accumulate(const uint8_t* q, const float* scales, int64_t numel,
                                int64_t group_size, int bits, float* acc, void* stream) {
  constexpr const char* fn = "cuda_dequantize_accumulate";
  detail::check_quantize_args(fn, numel, group_size, bits);
  dequantize_impl(fn, q, scales, numel, group_size, bits, acc, kAcc, stream);
}

}  // namespace zrt::kernels
