// ZeRO++ symmetric group quantization on raw CUDA device pointers (kernels/quantize_cuda.cu), the
// same math and layout as the CPU kernels of kernels/quantize.h, bit for bit: Note [Symmetric
// group quantization] and Note [Quantized layout] there. No LibTorch. Without nvcc at build time
// every function here throws (kernels/quantize_cuda_stub.cpp).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace zrt::kernels {

// Note [CUDA quantize launch]:
// Quantization runs one block of 256 threads per group (a grid-stride loop over groups when there
// are more than 65535): the block reduces amax and a non-finite flag, thread 0 writes the scale,
// and the threads write the group's codes. With 4-bit codes a byte must belong to one group, so
// group_size must be even (DeepSpeed's qwZ/qgZ group sizes are multiples of 8); the CPU kernels
// have no such limit. Dequantization is elementwise. Products and sums use __fmul_rn / __fadd_rn,
// which nvcc never contracts into an FMA, so dequantize_accumulate rounds like the CPU path.

// All pointers are device pointers; `stream` is a cudaStream_t (nullptr: the legacy default
// stream). Asynchronous: argument errors and launch errors are thrown, errors during execution
// surface at the next synchronisation. Arguments as for quantize_symmetric & co.
void cuda_quantize_symmetric(const void* x, DType x_dtype, int64_t numel, int64_t group_size,
                             int bits, uint8_t* q, float* scales, void* stream);
void cuda_dequantize_symmetric(const uint8_t* q, const float* scales, int64_t numel,
                               int64_t group_size, int bits, void* out, DType out_dtype,
                               void* stream);
void cuda_dequantize_accumulate(const uint8_t* q, const float* scales, int64_t numel,
                                int64_t group_size, int bits, float* acc, void* stream);

}  // namespace zrt::kernels
