// Tensor comparisons shared by the tests: per-element closeness (all_close), a norm-wise relative
// difference (max_rel_diff) and a bitwise equality, with gtest-friendly results.
#pragma once

#include <algorithm>
#include <cstring>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

namespace zrt::test {

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

// Note [Per-element closeness]
// |a_i − b_i| ≤ atol + rtol·|b_i| for every element, computed in double (numpy's isclose rule).
// Unlike max_rel_diff it sees an error in a small element next to large ones; atol is the
// floor for elements at or near zero and should be stated with its reason at each use. The
// failure message names how many elements violate, the worst one (index, both values, and its
// error over its bound) and the bound. The engine's parity tests use it. The Adam kernel tests
// keep max_rel_diff on purpose: an Adam moment is a sum of cancelling gradients, so its rounding
// error is at the scale of the gradients, not of the moment (measured: m = 1.2045e-6 vs
// 1.2278e-6 in a 2^20-element run whose gradients are O(1), 2e-8 apart = 0.3 ulp of the
// gradients); a per-element atol justified by that scale is the ∞-norm measure again.
inline ::testing::AssertionResult all_close(const at::Tensor& a, const at::Tensor& b,
                                            double rtol, double atol) {
  if (a.numel() != b.numel()) {
    return ::testing::AssertionFailure() << "numel differs: " << a.numel() << " vs " << b.numel();
  }
  if (a.numel() == 0) return ::testing::AssertionSuccess();
  const at::Tensor a64 = a.to(at::kDouble).reshape({-1});
  const at::Tensor b64 = b.to(at::kDouble).reshape({-1});
  const at::Tensor err = (a64 - b64).abs();
  const at::Tensor bound = b64.abs().mul(rtol).add(atol);
  const at::Tensor ratio = err.div(bound);
  const bool nan = a64.isnan().any().item<bool>() || b64.isnan().any().item<bool>();
  const int64_t bad = (err > bound).sum().item<int64_t>();
  if (bad == 0 && !nan) return ::testing::AssertionSuccess();
  const int64_t worst = ratio.nan_to_num(1e300).argmax().item<int64_t>();
  return ::testing::AssertionFailure()
         << bad << " of " << a.numel() << " elements exceed atol " << atol << " + rtol " << rtol
         << " * |b|" << (nan ? " (NaN present)" : "") << "; worst at " << worst << ": "
         << a64[worst].item<double>() << " vs " << b64[worst].item<double>() << " (error "
         << err[worst].item<double>() << " = " << ratio[worst].item<double>() << " x its bound)";
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

}  // namespace zrt::test
