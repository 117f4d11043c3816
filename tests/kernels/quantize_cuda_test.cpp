// The CUDA quantization kernels, where a GPU exists: codes, scales, dequantized values and
// accumulated sums bit-identical to the CPU kernels (both follow Note [Symmetric group
// quantization]) across bits, dtypes, sizes and group sizes, special groups included. Elsewhere
// the tests skip with the reason.
#include "kernels/quantize_cuda.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "kernels/adam_cuda.h"
#include "kernels/quantize.h"
#include "tests/support/tensor_compare.h"

namespace zrt::kernels {
namespace {

using zrt::test::bit_equal;

#define ZRT_SKIP_WITHOUT_GPU()                                                             \
  do {                                                                                     \
    if (!cuda_kernels_built()) GTEST_SKIP() << "built without the CUDA kernels (no nvcc)"; \
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";        \
  } while (false)

DType dtype_of(at::ScalarType t) {
  return t == at::kBFloat16 ? DType::kBFloat16 : t == at::kHalf ? DType::kFloat16 : DType::kFloat32;
}

// A device buffer holding a copy of `host` (or `bytes` zeros), freed on destruction.
class Device {
 public:
  explicit Device(const at::Tensor& host)
      : bytes_(static_cast<size_t>(host.numel()) * host.element_size()),
        ptr_(cuda_malloc(bytes_ + 16)) {
    if (bytes_ > 0) cuda_copy_to_device(ptr_, host.data_ptr(), bytes_);
  }
  ~Device() { cuda_free(ptr_); }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  void* get() const { return ptr_; }
  at::Tensor read(const at::Tensor& like) const {
    at::Tensor out = at::empty_like(like);
    if (bytes_ > 0) cuda_copy_to_host(out.data_ptr(), ptr_, bytes_);
    return out;
  }

 private:
  size_t bytes_;
  void* ptr_;
};

// Values with every kind of group: ordinary, all zero, tiny, and (when `special`) one holding
// NaN and one holding inf.
at::Tensor values(int64_t n, int64_t group, at::ScalarType dtype, bool special) {
  at::Tensor x = at::sin(at::arange(n, at::kFloat).mul(0.37f)).mul(3.0f);
  if (n > 2 * group) x.narrow(0, group, group).zero_();
  if (n > 3 * group) x.narrow(0, 2 * group, group).mul_(1e-30f);
  if (special && n > 5 * group) {
    x[3 * group + 1] = std::numeric_limits<float>::quiet_NaN();
    x[4 * group] = std::numeric_limits<float>::infinity();
  }
  return x.to(dtype);
}

void compare(int64_t n, int64_t group, int bits, at::ScalarType dtype) {
  const std::string what = "n=" + std::to_string(n) + " group=" + std::to_string(group) +
                           " bits=" + std::to_string(bits) + " " + c10::toString(dtype);
  const at::Tensor x = values(n, group, dtype, /*special=*/true);
  const int64_t nq = quantized_bytes(n, bits);
  const int64_t ng = quantized_groups(n, group);
  at::Tensor q = at::empty({nq}, at::kByte);
  at::Tensor s = at::empty({ng}, at::kFloat);
  quantize_symmetric(x.data_ptr(), dtype_of(dtype), n, group, bits, q.data_ptr<uint8_t>(),
                     s.data_ptr<float>());
  const Device dx(x), dq(q), ds(s);
  cuda_quantize_symmetric(dx.get(), dtype_of(dtype), n, group, bits,
                          static_cast<uint8_t*>(dq.get()), static_cast<float*>(ds.get()), nullptr);
  EXPECT_TRUE(bit_equal(dq.read(q), q)) << "codes " << what;
  EXPECT_TRUE(bit_equal(ds.read(s), s)) << "scales " << what;
  at::Tensor out = at::empty({n}, dtype);
  dequantize_symmetric(q.data_ptr<uint8_t>(), s.data_ptr<float>(), n, group, bits, out.data_ptr(),
                       dtype_of(dtype));
  const Device dout(out);
  cuda_dequantize_symmetric(static_cast<const uint8_t*>(dq.get()),
                            static_cast<const float*>(ds.get()), n, group, bits, dout.get(),
                            dtype_of(dtype), nullptr);
  EXPECT_TRUE(bit_equal(dout.read(out), out)) << "dequantized " << what;
  at::Tensor acc = at::cos(at::arange(n, at::kFloat));
  const Device dacc(acc);
  dequantize_accumulate(q.data_ptr<uint8_t>(), s.data_ptr<float>(), n, group, bits,
                        acc.data_ptr<float>());
  cuda_dequantize_accumulate(static_cast<const uint8_t*>(dq.get()),
                             static_cast<const float*>(ds.get()), n, group, bits,
                             static_cast<float*>(dacc.get()), nullptr);
  EXPECT_TRUE(bit_equal(dacc.read(acc), acc)) << "accumulated " << what;
}

TEST(QuantizeCuda, BitIdenticalToTheCpuKernels) {
  ZRT_SKIP_WITHOUT_GPU();
  for (int bits : {8, 4}) {
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
      for (int64_t group : {8, 512, 8000}) {
        for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{4099}, int64_t{(1 << 20) + 3}}) {
          compare(n, group, bits, dtype);
        }
      }
    }
  }
}

TEST(QuantizeCuda, EmptyInputIsANoOp) {
  ZRT_SKIP_WITHOUT_GPU();
  cuda_quantize_symmetric(nullptr, DType::kFloat32, 0, 8, 8, nullptr, nullptr, nullptr);
  cuda_synchronize();
}

}  // namespace
}  // namespace zrt::kernels
