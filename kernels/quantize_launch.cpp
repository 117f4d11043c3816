#include "kernels/quantize_launch.h"

#include "core/error.h"
#include "kernels/quantize.h"
#include "kernels/quantize_cuda.h"
#include "zrt/build_config.h"

#if ZRT_WITH_CUDA && ZRT_TORCH_HAS_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace zrt::kernels {
namespace {

// Runs fn(stream) on `t`'s device and current stream; CUDA tensors need the CUDA kernels and a
// CUDA LibTorch in this build.
template <typename F>
void on_cuda(const at::Tensor& t, F fn) {
#if ZRT_WITH_CUDA && ZRT_TORCH_HAS_CUDA
  const c10::cuda::CUDAGuard guard(t.device());
  fn(static_cast<void*>(c10::cuda::getCurrentCUDAStream(t.device().index()).stream()));
#else
  (void)t;
  (void)fn;
  throw Error(
      "quantize: CUDA tensors need a ZeroRT built with the CUDA kernels (nvcc, ZRT_WITH_CUDA=ON) "
      "and a CUDA LibTorch");
#endif
}

DType value_dtype(const at::Tensor& t, const char* what) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return DType::kFloat32;
    case at::kBFloat16:
      return DType::kBFloat16;
    case at::kHalf:
      return DType::kFloat16;
    default:
      ZRT_CHECK(false, "quantize: ", what, " must be fp32, bf16 or fp16, got ", t.scalar_type());
  }
  return DType::kFloat32;
}

// Checks the codes and scales of `numel` values and that everything shares `values`' device.
void check(const at::Tensor& values, const at::Tensor& q, const at::Tensor& scales,
           int64_t group_size, int bits) {
  ZRT_CHECK(bits == 8 || bits == 4, "quantize: bits must be 8 or 4, got ", bits);
  ZRT_CHECK(group_size > 0, "quantize: group_size must be positive, got ", group_size);
  const int64_t n = values.numel();
  ZRT_CHECK(values.is_contiguous() && q.is_contiguous() && scales.is_contiguous(),
            "quantize: tensors must be contiguous");
  ZRT_CHECK(q.scalar_type() == at::kByte && q.numel() == quantized_bytes(n, bits),
            "quantize: codes must be ", quantized_bytes(n, bits), " uint8, got ", q.numel(), " ",
            q.scalar_type());
  ZRT_CHECK(scales.scalar_type() == at::kFloat &&
                scales.numel() == quantized_groups(n, group_size),
            "quantize: scales must be ", quantized_groups(n, group_size), " fp32, got ",
            scales.numel(), " ", scales.scalar_type());
  ZRT_CHECK(q.device() == values.device() && scales.device() == values.device(),
            "quantize: values on ", values.device(), ", codes on ", q.device(), ", scales on ",
            scales.device());
}

}  // namespace

void quantize(const at::Tensor& x, int64_t group_size, int bits, const at::Tensor& q,
              const at::Tensor& scales) {
  check(x, q, scales, group_size, bits);
  const DType dtype = value_dtype(x, "x");
  if (x.is_cuda()) {
    on_cuda(x, [&](void* stream) {
      cuda_quantize_symmetric(x.data_ptr(), dtype, x.numel(), group_size, bits, q.data_ptr<uint8_t>(),
                    scales.data_ptr<float>(), stream);
    });
    return;
  }
  quantize_symmetric(x.data_ptr(), dtype, x.numel(), group_size, bits, q.data_ptr<uint8_t>(),
                     scales.data_ptr<float>());
}

void dequantize(const at::Tensor& q, const at::Tensor& scales, int64_t group_size, int bits,
                const at::Tensor& out) {
  check(out, q, scales, group_size, bits);
  const DType dtype = value_dtype(out, "out");
  if (out.is_cuda()) {
    on_cuda(out, [&](void* stream) {
      cuda_dequantize_symmetric(q.data_ptr<uint8_t>(), scales.data_ptr<float>(), out.numel(), group_size,
                      bits, out.data_ptr(), dtype, stream);
    });
    return;
  }
  dequantize_symmetric(q.data_ptr<uint8_t>(), scales.data_ptr<float>(), out.numel(), group_size,
                       bits, out.data_ptr(), dtype);
}

void dequantize_add(const at::Tensor& q, const at::Tensor& scales, int64_t group_size, int bits,
                    const at::Tensor& acc) {
  check(acc, q, scales, group_size, bits);
  ZRT_CHECK(acc.scalar_type() == at::kFloat, "quantize: the accumulator must be fp32, got ",
            acc.scalar_type());
  if (acc.is_cuda()) {
    on_cuda(acc, [&](void* stream) {
      cuda_dequantize_accumulate(q.data_ptr<uint8_t>(), scales.data_ptr<float>(), acc.numel(),
                                 group_size, bits, acc.data_ptr<float>(), stream);
    });
    return;
  }
  dequantize_accumulate(q.data_ptr<uint8_t>(), scales.data_ptr<float>(), acc.numel(), group_size,
                        bits, acc.data_ptr<float>());
}

}  // namespace zrt::kernels
