// The at::Tensor front end of the quantization kernels (kernels/quantize.h on the CPU,
// kernels/quantize_cuda.h on CUDA): ZeRO++'s qwZ and qgZ call these.
#pragma once

#include <cstdint>

#include <ATen/ATen.h>

namespace zrt::kernels {

// Quantizes `x` (contiguous fp32, bf16 or fp16) in groups of `group_size` elements to `bits`
// (8 or 4) per element: `q` receives quantized_bytes(x.numel(), bits) bytes (uint8), `scales`
// one fp32 per group (Note [Symmetric group quantization]). All three on one device.
void quantize(const at::Tensor& x, int64_t group_size, int bits, const at::Tensor& q,
              const at::Tensor& scales);
// The inverse, into `out` (fp32, bf16 or fp16; its numel is the element count).
void dequantize(const at::Tensor& q, const at::Tensor& scales, int64_t group_size, int bits,
                const at::Tensor& out);
// acc += the dequantized values, in fp32 (`acc` fp32).
void dequantize_add(const at::Tensor& q, const at::Tensor& scales, int64_t group_size, int bits,
                    const at::Tensor& acc);

}  // namespace zrt::kernels
