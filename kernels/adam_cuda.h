// The CUDA multi-tensor Adam kernel on raw device pointers (kernels/adam_cuda.cu), usable without
// a CUDA LibTorch, plus the few runtime helpers its tests need. Without nvcc at build time every
// function here is a stub: cuda_kernels_built() is false, cuda_device_count() is 0, the rest throw.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/adam_math.h"

namespace zrt::kernels {

// One tensor of a multi-tensor launch; pointers are device pointers.
struct CudaAdamTensor {
  float* param = nullptr;
  const void* grad = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  void* param_copy = nullptr;  // optional, copy_dtype
  int64_t numel = 0;
};

// Note [CUDA multi-tensor Adam]:
// Every tensor is cut into chunks of kCudaAdamChunk elements; each chunk is one block of 512
// threads, each thread holding 4 elements in registers. The tensor pointers, sizes and the
// block → (tensor, chunk) map travel by value in the kernel arguments, sized to stay under the
// classic 4 KB argument limit: at most kCudaAdamMaxTensors tensors and kCudaAdamMaxBlocks blocks
// per launch; a tensor cut by a full launch continues in the next one. Chunks whose pointers
// are 16-byte aligned (8 bytes for 16-bit arrays) and whose length is a multiple of 4 use
// 128-bit loads and stores; others use scalar accesses. The arithmetic is Note [Adam element
// math], so results equal the CPU kernel's bit for bit.
inline constexpr int64_t kCudaAdamChunk = 65536;
inline constexpr int kCudaAdamMaxTensors = 30;
inline constexpr int kCudaAdamMaxBlocks = 320;

// True when this build compiled adam_cuda.cu.
bool cuda_kernels_built();
// Number of CUDA devices; 0 without devices, without a driver, or without the CUDA kernels.
int cuda_device_count();

// One Adam step over `count` tensors sharing grad_dtype and copy_dtype (used by tensors with a
// param_copy), launched on `stream` (a cudaStream_t; nullptr = the legacy default stream).
// Returns the number of kernel launches. Asynchronous: errors of the launch itself are thrown,
// errors during execution surface at the next synchronisation.
int cuda_adam_step(const CudaAdamTensor* tensors, size_t count, DType grad_dtype, DType copy_dtype,
                   const AdamScalars& scalars, void* stream);

// Minimal runtime helpers for tests and benchmarks that have no CUDA LibTorch.
void* cuda_malloc(size_t bytes);
void cuda_free(void* ptr);
void cuda_copy_to_device(void* dst, const void* src, size_t bytes);
void cuda_copy_to_host(void* dst, const void* src, size_t bytes);
void cuda_copy_on_device(void* dst, const void* src, size_t bytes);
void cuda_memset(void* ptr, int byte, size_t bytes);
void cuda_synchronize();

}  // namespace zrt::kernels
