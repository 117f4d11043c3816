// Stand-ins for the CUDA quantization API (kernels/quantize_cuda.h) in builds without nvcc: every
// operation throws a zrt::Error saying why.
#include "core/error.h"
#include "kernels/quantize_cuda.h"

namespace zrt::kernels {
namespace {

[[noreturn]] void no_cuda(const char* what) {
  throw Error(str(what, ": ZeroRT was built without the CUDA kernels (nvcc was not found or ",
                  "ZRT_WITH_CUDA=OFF); use quantize_symmetric & co. from kernels/quantize.h"));
}

}  // namespace

void cuda_quantize_symmetric(const void*, DType, int64_t, int64_t, int, uint8_t*, float*, void*) {
  no_cuda("cuda_quantize_symmetric");
}

void cuda_dequantize_symmetric(const uint8_t*, const float*, int64_t, int64_t, int, void*, DType,
                               void*) {
  no_cuda("cuda_dequantize_symmetric");
}

void cuda_dequantize_accumulate(const uint8_t*, const float*, int64_t, int64_t, int, float*,
                                void*) {
  no_cuda("cuda_dequantize_accumulate");
}

}  // namespace zrt::kernels
