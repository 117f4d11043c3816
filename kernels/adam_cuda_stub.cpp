// Stand-ins for the raw CUDA Adam API (kernels/adam_cuda.h) in builds without nvcc: no devices,
// and every operation throws a zrt::Error saying why.
#include "core/error.h"
#include "kernels/adam_cuda.h"

namespace zrt::kernels {
namespace {

[[noreturn]] void no_cuda(const char* what) {
  throw Error(str(what, ": ZeroRT was built without the CUDA kernels (nvcc was not found or ",
                  "ZRT_WITH_CUDA=OFF)"));
}

}  // namespace

bool cuda_kernels_built() { return false; }
int cuda_device_count() { return 0; }

int cuda_adam_step(const CudaAdamTensor*, size_t, DType, DType, const AdamScalars&, void*) {
  no_cuda("cuda_adam_step");
}

void* cuda_malloc(size_t) { no_cuda("cuda_malloc"); }
void cuda_free(void*) { no_cuda("cuda_free"); }
void cuda_copy_to_device(void*, const void*, size_t) { no_cuda("cuda_copy_to_device"); }
void cuda_copy_to_host(void*, const void*, size_t) { no_cuda("cuda_copy_to_host"); }
void cuda_copy_on_device(void*, const void*, size_t) { no_cuda("cuda_copy_on_device"); }
void cuda_memset(void*, int, size_t) { no_cuda("cuda_memset"); }
void cuda_synchronize() { no_cuda("cuda_synchronize"); }

}  // namespace zrt::kernels
