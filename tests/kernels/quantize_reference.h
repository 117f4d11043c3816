// Test-only references for kernels/quantize.h: symmetric group quantization in float64 (the
// mathematical definition, Note [Symmetric group quantization]), a nibble reader, and DeepSpeed's
// qwZ group-count loop written out literally (Note [qwZ group count]). No LibTorch.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace zrt::kernels::test {

// Per-element float64 reference of one quantization: the exact real q·m before rounding, and the
// exact scale amax / 2^(bits−1).
struct ReferenceGroup {
  double amax = 0.0;
  double m = 0.0;  // 2^(bits−1) / amax; 0 for an all-zero group
  double s = 0.0;  // amax / 2^(bits−1)
};

inline ReferenceGroup reference_group(const std::vector<double>& x, int64_t begin, int64_t end,
                                      int bits) {
  ReferenceGroup r;
  for (int64_t i = begin; i < end; ++i) r.amax = std::max(r.amax, std::fabs(x[i]));
  if (r.amax > 0) {
    r.m = std::ldexp(1.0, bits - 1) / r.amax;
    r.s = r.amax / std::ldexp(1.0, bits - 1);
  }
  return r;
}

// round_half_even(v) clamped to the code range, in float64.
inline int reference_code(double v, int bits) {
  const double lo = -std::ldexp(1.0, bits - 1);
  const double hi = std::ldexp(1.0, bits - 1) - 1;
  double r = std::nearbyint(v);
  r = r < lo ? lo : (r > hi ? hi : r);
  return static_cast<int>(r);
}

// Code of element i in a packed buffer (Note [Quantized layout]), written independently of the
// kernels' get_code.
inline int read_code(const std::vector<uint8_t>& q, int bits, int64_t i) {
  if (bits == 8) return static_cast<int>(static_cast<int8_t>(q[static_cast<size_t>(i)]));
  const uint8_t byte = q[static_cast<size_t>(i / 2)];
  const int nibble = i % 2 == 0 ? byte >> 4 : byte & 0x0F;
  return nibble < 8 ? nibble : nibble - 16;
}

// DeepSpeed's CUDAQuantizer group-count loops, transcribed as they read (including the doubling
// loop that never runs); returns -1 where DeepSpeed's asserts would fail.
inline int64_t deepspeed_group_count(int64_t numel) {
  int64_t groups = (numel + 7999) / 8000;
  while (groups < numel) {
    if (numel % (8 * groups) == 0) break;
    ++groups;
  }
  while (numel % (8 * groups * 2) == 0 && static_cast<double>(numel) / groups > 8000) groups *= 2;
  if (numel % (8 * groups) != 0) return -1;
  if (!(static_cast<double>(numel) / groups < 16000)) return -1;
  if (!(numel > groups)) return -1;
  return groups;
}

}  // namespace zrt::kernels::test
