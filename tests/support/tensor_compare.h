// Tensor comparisons shared by the kernels and optim tests: a norm-wise relative difference and a
// bitwise equality, with gtest-friendly results.
#pragma once

#include <algorithm>
#include <cstring>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

namespace zrt::testing {

// max |a − b| / max(max |b|, 1e-30), computed in double.
//
// Note [Relative difference measure]:
// The measure is relative to the tensor's largest magnitude (an ∞-norm relative error), not
// element by element: an element that passes through zero has an unbounded elementwise relative
// error even when it is off by one ulp of the tensor's scale, which is the error that matters for
// training. At the 1e-6 bound this allows about 8 ulp (fp32 ε = 1.19e-7) at the largest element.
inline double max_rel_diff(const at::Tensor& a, const at::Tensor& b) {
  if (b.numel() == 0) return a.numel() == 0 ? 0.0 : 1.0;
  const at::Tensor a64 = a.to(at::kDouble).reshape({-1});
  const at::Tensor b64 = b.to(at::kDouble).reshape({-1});
  const double num = (a64 - b64).abs().max().item<double>();
  const double den = std::max(b64.abs().max().item<double>(), 1e-30);
  return num / den;
}

// Same dtype, same numel, same bytes.
inline ::testing::AssertionResult bit_equal(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.numel() != b.numel()) {
    return ::testing::AssertionFailure()
           << "dtype/numel differ: " << a.scalar_type() << "[" << a.numel() << "] vs "
           << b.scalar_type() << "[" << b.numel() << "]";
  }
  const at::Tensor ac = a.contiguous();
  const at::Tensor bc = b.contiguous();
  const size_t bytes = static_cast<size_t>(ac.numel()) * ac.element_size();
  if (bytes == 0 || std::memcmp(ac.data_ptr(), bc.data_ptr(), bytes) == 0) {
    return ::testing::AssertionSuccess();
  }
  const at::Tensor diff = (ac.to(at::kDouble) != bc.to(at::kDouble)).reshape({-1});
  const int64_t first = diff.nonzero().numel() > 0 ? diff.nonzero()[0][0].item<int64_t>() : -1;
  return ::testing::AssertionFailure()
         << "bytes differ; " << diff.sum().item<int64_t>() << " of " << a.numel()
         << " elements differ in value, first at " << first;
}

}  // namespace zrt::testing
