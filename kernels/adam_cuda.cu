// The CUDA multi-tensor Adam kernel (Note [CUDA multi-tensor Adam] in adam_cuda.h) and its host
// launcher on raw pointers. No ATen here, so it builds against a CPU-only LibTorch; the
// at::Tensor front end is adam_cuda_launch.cpp.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "core/error.h"
#include "kernels/adam_cuda.h"
#include "kernels/cuda_check.h"

namespace zrt::kernels {
namespace {

constexpr int kThreads = 512;
constexpr int kIlp = 4;
static_assert(kCudaAdamChunk % (kThreads * kIlp) == 0, "chunk must be a whole number of sweeps");

enum GradKind { kGradF32, kGradBf16, kGradF16 };
enum CopyKind { kCopyBf16, kCopyF16 };

// Passed by value; stays under the 4 KB kernel-argument limit (checked below).
struct TensorList {
  float* param[kCudaAdamMaxTensors];
  const void* grad[kCudaAdamMaxTensors];
  float* exp_avg[kCudaAdamMaxTensors];
  float* exp_avg_sq[kCudaAdamMaxTensors];
  void* copy[kCudaAdamMaxTensors];
  int64_t numel[kCudaAdamMaxTensors];
  unsigned char block_tensor[kCudaAdamMaxBlocks];
  int block_chunk[kCudaAdamMaxBlocks];
};
static_assert(sizeof(TensorList) + sizeof(AdamScalars) <= 4096, "kernel arguments exceed 4 KB");

template <int G>
__device__ __forceinline__ float load_grad(const void* g, int64_t i) {
  if constexpr (G == kGradF32) {
    return static_cast<const float*>(g)[i];
  } else if constexpr (G == kGradBf16) {
    return bf16_bits_to_float(static_cast<const uint16_t*>(g)[i]);
  } else {
    return __half2float(__ushort_as_half(static_cast<const unsigned short*>(g)[i]));
  }
}

template <int C>
__device__ __forceinline__ uint16_t to_copy_bits(float p) {
  if constexpr (C == kCopyBf16) {
    return float_to_bf16_bits(p);
  } else {
    return __half_as_ushort(__float2half_rn(p));
  }
}

__device__ __forceinline__ bool aligned(const void* ptr, unsigned bytes) {
  return (reinterpret_cast<uintptr_t>(ptr) & (bytes - 1)) == 0;
}

template <int G, int C>
__global__ void __launch_bounds__(kThreads)
    adam_multi_tensor_kernel(TensorList list, AdamScalars s) {
  const int t = list.block_tensor[blockIdx.x];
  const int64_t base = static_cast<int64_t>(list.block_chunk[blockIdx.x]) * kCudaAdamChunk;
  const int64_t len = min(kCudaAdamChunk, list.numel[t] - base);
  float* p = list.param[t] + base;
  float* m = list.exp_avg[t] + base;
  float* v = list.exp_avg_sq[t] + base;
  const unsigned grad_size = G == kGradF32 ? 4 : 2;
  const void* g = static_cast<const char*>(list.grad[t]) + base * grad_size;
  uint16_t* copy = list.copy[t] ? static_cast<uint16_t*>(list.copy[t]) + base : nullptr;

  const bool vector_ok = len % kIlp == 0 && aligned(p, 16) && aligned(m, 16) && aligned(v, 16) &&
                         aligned(g, 4 * grad_size) && (copy == nullptr || aligned(copy, 8));
  if (vector_ok) {
    for (int64_t i = threadIdx.x * kIlp; i < len; i += kThreads * kIlp) {
      float4 pv = *reinterpret_cast<float4*>(p + i);
      float4 mv = *reinterpret_cast<float4*>(m + i);
      float4 vv = *reinterpret_cast<float4*>(v + i);
      float gv[kIlp];
      if constexpr (G == kGradF32) {
        const float4 g4 = *reinterpret_cast<const float4*>(static_cast<const float*>(g) + i);
        gv[0] = g4.x, gv[1] = g4.y, gv[2] = g4.z, gv[3] = g4.w;
      } else {
        const uint2 raw = *reinterpret_cast<const uint2*>(static_cast<const uint16_t*>(g) + i);
        const uint16_t h[kIlp] = {static_cast<uint16_t>(raw.x), static_cast<uint16_t>(raw.x >> 16),
                                  static_cast<uint16_t>(raw.y), static_cast<uint16_t>(raw.y >> 16)};
#pragma unroll
        for (int j = 0; j < kIlp; ++j) gv[j] = load_grad<G>(h, j);
      }
      adam_update_element(pv.x, gv[0], mv.x, vv.x, s);
      adam_update_element(pv.y, gv[1], mv.y, vv.y, s);
      adam_update_element(pv.z, gv[2], mv.z, vv.z, s);
      adam_update_element(pv.w, gv[3], mv.w, vv.w, s);
      *reinterpret_cast<float4*>(p + i) = pv;
      *reinterpret_cast<float4*>(m + i) = mv;
      *reinterpret_cast<float4*>(v + i) = vv;
      if (copy != nullptr) {
        uint2 out;
        out.x = to_copy_bits<C>(pv.x) | (static_cast<uint32_t>(to_copy_bits<C>(pv.y)) << 16);
        out.y = to_copy_bits<C>(pv.z) | (static_cast<uint32_t>(to_copy_bits<C>(pv.w)) << 16);
        *reinterpret_cast<uint2*>(copy + i) = out;
      }
    }
    return;
  }
  // Unaligned or ragged chunk: each thread handles kIlp elements kThreads apart per sweep, loading
  // all of them before computing so the loads are in flight together.
  for (int64_t i0 = 0; i0 < len; i0 += kThreads * kIlp) {
    float pr[kIlp], gr[kIlp], mr[kIlp], vr[kIlp];
#pragma unroll
    for (int j = 0; j < kIlp; ++j) {
      const int64_t i = i0 + threadIdx.x + j * kThreads;
      if (i < len) {
        pr[j] = p[i];
        gr[j] = load_grad<G>(g, i);
        mr[j] = m[i];
        vr[j] = v[i];
      }
    }
#pragma unroll
    for (int j = 0; j < kIlp; ++j) {
      const int64_t i = i0 + threadIdx.x + j * kThreads;
      if (i < len) {
        adam_update_element(pr[j], gr[j], mr[j], vr[j], s);
        p[i] = pr[j];
        m[i] = mr[j];
        v[i] = vr[j];
        if (copy != nullptr) copy[i] = to_copy_bits<C>(pr[j]);
      }
    }
  }
}

template <int G, int C>
void launch(const TensorList& list, int blocks, const AdamScalars& s, cudaStream_t stream) {
  adam_multi_tensor_kernel<G, C><<<blocks, kThreads, 0, stream>>>(list, s);
  ZRT_KERNELS_CUDA_CHECK(cudaGetLastError());
}

void launch_for(DType grad, DType copy, const TensorList& list, int blocks, const AdamScalars& s,
                cudaStream_t stream) {
  const bool bf16_copy = copy == DType::kBFloat16;
  switch (grad) {
    case DType::kFloat32:
      return bf16_copy ? launch<kGradF32, kCopyBf16>(list, blocks, s, stream)
                       : launch<kGradF32, kCopyF16>(list, blocks, s, stream);
    case DType::kBFloat16:
      return bf16_copy ? launch<kGradBf16, kCopyBf16>(list, blocks, s, stream)
                       : launch<kGradBf16, kCopyF16>(list, blocks, s, stream);
    case DType::kFloat16:
      return bf16_copy ? launch<kGradF16, kCopyBf16>(list, blocks, s, stream)
                       : launch<kGradF16, kCopyF16>(list, blocks, s, stream);
  }
}

}  // namespace

bool cuda_kernels_built() { return true; }

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver / no device" error
    return 0;
  }
  return n;
}

int cuda_adam_step(const CudaAdamTensor* tensors, size_t count, DType grad_dtype, DType copy_dtype,
                   const AdamScalars& scalars, void* stream_ptr) {
  ZRT_CHECK(copy_dtype != DType::kFloat32,
            "cuda_adam_step: the parameter copy must be bf16 or fp16");
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  TensorList list;
  int num_tensors = 0;
  int num_blocks = 0;
  int launches = 0;
  for (size_t k = 0; k < count; ++k) {
    const CudaAdamTensor& t = tensors[k];
    ZRT_CHECK(t.numel >= 0, "cuda_adam_step: tensor ", k, " has numel ", t.numel);
    if (t.numel == 0) continue;
    const int64_t chunks = (t.numel + kCudaAdamChunk - 1) / kCudaAdamChunk;
    ZRT_CHECK(chunks <= INT32_MAX, "cuda_adam_step: tensor ", k, " is too large (", t.numel, ")");
    for (int64_t c = 0; c < chunks; ++c) {
      if (c == 0 || num_tensors == 0) {  // (re)register the tensor in this launch's list
        list.param[num_tensors] = t.param;
        list.grad[num_tensors] = t.grad;
        list.exp_avg[num_tensors] = t.exp_avg;
        list.exp_avg_sq[num_tensors] = t.exp_avg_sq;
        list.copy[num_tensors] = t.param_copy;
        list.numel[num_tensors] = t.numel;
        ++num_tensors;
      }
      list.block_tensor[num_blocks] = static_cast<unsigned char>(num_tensors - 1);
      list.block_chunk[num_blocks] = static_cast<int>(c);
      ++num_blocks;
      const bool last_chunk = c == chunks - 1;
      const bool tensors_full = num_tensors == kCudaAdamMaxTensors && last_chunk;
      if (num_blocks == kCudaAdamMaxBlocks || tensors_full) {
        launch_for(grad_dtype, copy_dtype, list, num_blocks, scalars, stream);
        ++launches;
        num_blocks = 0;
        num_tensors = 0;  // a tensor with chunks left is registered again by the check above
      }
    }
  }
  if (num_blocks > 0) {
    launch_for(grad_dtype, copy_dtype, list, num_blocks, scalars, stream);
    ++launches;
  }
  return launches;
}

void* cuda_malloc(size_t bytes) {
  void* ptr = nullptr;
  ZRT_KERNELS_CUDA_CHECK(cudaMalloc(&ptr, bytes));
  return ptr;
}

void cuda_free(void* ptr) { ZRT_KERNELS_CUDA_CHECK(cudaFree(ptr)); }

void cuda_copy_to_device(void* dst, const void* src, size_t bytes) {
  ZRT_KERNELS_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

void cuda_copy_to_host(void* dst, const void* src, size_t bytes) {
  ZRT_KERNELS_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

void cuda_copy_on_device(void* dst, const void* src, size_t bytes) {
  ZRT_KERNELS_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
}

void cuda_memset(void* ptr, int byte, size_t bytes) {
  ZRT_KERNELS_CUDA_CHECK(cudaMemset(ptr, byte, bytes));
}

void cuda_synchronize() { ZRT_KERNELS_CUDA_CHECK(cudaDeviceSynchronize()); }

}  // namespace zrt::kernels
