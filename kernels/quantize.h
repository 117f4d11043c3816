// Symmetric block quantization for ZeRO++ on raw host pointers: int8 / int4 codes with one fp32
// scale per group of consecutive elements, as qwZ (quantized weight all-gather) and qgZ (quantized
// gradient reduce-scatter) send them. AVX-512 / AVX2 / scalar paths chosen at run time, all
// bitwise equal; groups spread over the kernel thread pool. No LibTorch here, and no
// communication: the collectives that carry the codes live in zero/ and comm/. The CUDA
// counterpart is kernels/quantize_cuda.h.
#pragma once

#include <cstdint>
#include <optional>

#include "core/dtype.h"
#include "kernels/cpu_adam.h"  // CpuIsa and its helpers

namespace zrt::kernels {

// Note [Symmetric group quantization]:
// For a group of consecutive elements with amax = max |x| (in fp32), every kernel (scalar, AVX2,
// AVX-512, CUDA) computes, in fp32 with one rounding per operation:
//   m = 2^(bits−1) / amax                    the multiplier; DeepSpeed writes 2^bits / (2·amax),
//                                            the same real number, so the same rounded float,
//                                            but 2·amax overflows for amax > FLT_MAX/2
//   q = clamp(round_half_even(x·m), −2^(bits−1), 2^(bits−1) − 1)
//   s = 1 / m                                the stored scale; dequantization is x' = q·s
// Only +amax itself (x·m ≥ 2^(bits−1) − 1/2) is clamped; −amax maps to −2^(bits−1) exactly.
// Special groups:
//   - amax == 0, or amax so small that m overflows to +inf (amax < 2^(bits−1) / FLT_MAX, about
//     2^(bits−129)): q = 0 and s = 0, so the group dequantizes to exact zeros. (DeepSpeed stores
//     s = 1 for an all-zero group; the dequantized zeros are the same.)
//   - a group containing NaN or ±inf: q = 0 and s = NaN, so every element of that group
//     dequantizes to NaN (and dequantize_accumulate turns the group's sums into NaN). This is the
//     propagation contract: a non-finite value is never silently replaced by a finite one, so the
//     overflow check after a qgZ reduce-scatter still sees it. Other groups are unaffected.
// Round-trip error bound: for every finite group,
//   |x − x'| ≤ amax / 2^(bits−1)  (= s, one quantization step)
// and |x − x'| ≤ s/2 for every element but the clamped +amax, each up to a few fp32 roundings
// (relative 2^-21 of amax); the bound also assumes s is a normal float (amax ≥ 2^(bits−127)).
// The tests check exactly this.

// Note [Quantized layout]:
// bits = 8: one int8 code per element. bits = 4: two elements per byte, element 2i in the high
// nibble and element 2i+1 in the low nibble, each a two's-complement nibble (−8..7); an odd last
// element sits in the high nibble with the low nibble 0. Groups are `group_size` consecutive
// elements (the last one may be shorter), so group k covers elements [k·group_size,
// min((k+1)·group_size, numel)); with bits = 4 and an odd group_size a byte may hold the end of
// one group and the start of the next. scales[k] is group k's s; there are
// ceil(numel / group_size) scales.

struct QuantizeConfig {
  int num_threads = 0;        // 0: cpu_kernel_threads()
  std::optional<CpuIsa> isa;  // unset: cpu_quant_isa(); set: must be supported
};

// The path the quantization kernels take when not told: ZRT_CPU_QUANT_ISA if set, else
// best_cpu_isa(). Throws ConfigError for an unknown value or a path this CPU cannot run.
CpuIsa cpu_quant_isa();

// Bytes of codes for numel elements: ceil(numel · bits / 8).
int64_t quantized_bytes(int64_t numel, int bits);
// Number of groups (= scales): ceil(numel / group_size).
int64_t quantized_groups(int64_t numel, int64_t group_size);

// Quantizes numel elements of x (x_dtype: fp32, bf16 or fp16) into q (quantized_bytes(numel,
// bits) bytes) and scales (quantized_groups(numel, group_size) floats). See Note [Symmetric group
// quantization] and Note [Quantized layout]. bits is 8 or 4; group_size > 0; numel 0 does nothing.
// The arrays must not overlap. Thread-safe (concurrent calls are serialised by the pool).
void quantize_symmetric(const void* x, DType x_dtype, int64_t numel, int64_t group_size, int bits,
                        uint8_t* q, float* scales, const QuantizeConfig& config = {});

// The inverse: out[i] = q_i · scales[group of i], written as out_dtype (fp32, or bf16 / fp16
// rounded to nearest even).
void dequantize_symmetric(const uint8_t* q, const float* scales, int64_t numel, int64_t group_size,
                          int bits, void* out, DType out_dtype, const QuantizeConfig& config = {});

// acc[i] = acc[i] + q_i · scales[group of i] in fp32 (the product rounded, then the sum rounded:
// no fused multiply-add, so the result is the fp32 sum of dequantize_symmetric's fp32 values).
// The reduce step of qgZ: each rank's quantized chunk added in turn.
void dequantize_accumulate(const uint8_t* q, const float* scales, int64_t numel, int64_t group_size,
                           int bits, float* acc, const QuantizeConfig& config = {});

// Note [qwZ group count]:
// DeepSpeed's qwZ quantizer (CUDAQuantizer.quantize in zero/partition_parameters.py) picks the
// number of groups g for a flat tensor of numel elements as follows: start at
// ceil(numel / 8000), increase g until numel is divisible by 8·g, then double g while numel is
// divisible by 16·g and numel / g > 8000; it fails unless 8·g divides numel, numel / g < 16000
// and numel > g. Since the first loop ends with g ≥ numel / 8000, the doubling never happens, so
// the rule is: numel must be a positive multiple of 8, and g is the smallest divisor of numel / 8
// with g ≥ ceil(numel / 8000); the group size numel / g is then a multiple of 8 and at most 8000.
// We find that divisor by trial division up to sqrt(numel / 8) instead of DeepSpeed's linear
// search; the answer is the same. Throws zrt::Error for numel ≤ 0 or not a multiple of 8.
int64_t qwz_group_count(int64_t numel);

}  // namespace zrt::kernels
