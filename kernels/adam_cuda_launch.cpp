// The at::Tensor launcher of the CUDA multi-tensor Adam kernel. Compiled in only when this build
// has both the CUDA kernels (nvcc) and a CUDA LibTorch; otherwise adam_step_cuda throws.
#include <map>
#include <utility>

#include "core/error.h"
#include "kernels/adam_cuda.h"
#include "kernels/adam_launch.h"
#include "zrt/build_config.h"

#if ZRT_WITH_CUDA && ZRT_TORCH_HAS_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace zrt::kernels {

bool adam_cuda_launcher_built() { return ZRT_WITH_CUDA && ZRT_TORCH_HAS_CUDA; }

#if ZRT_WITH_CUDA && ZRT_TORCH_HAS_CUDA

namespace {

DType to_dtype(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16:
      return DType::kBFloat16;
    case at::kHalf:
      return DType::kFloat16;
    default:
      return DType::kFloat32;
  }
}

}  // namespace

void adam_step_cuda(const std::vector<AdamTensors>& tensors, const AdamStepArgs& args) {
  check_adam_step_args(args);
  check_adam_tensors(tensors, c10::DeviceType::CUDA);
  if (tensors.empty()) return;
  const c10::Device device = tensors.front().param.device();
  for (size_t i = 0; i < tensors.size(); ++i) {
    ZRT_CHECK(tensors[i].param.device() == device, "Adam tensor ", i, " is on ",
              tensors[i].param.device(), " but tensor 0 is on ", device,
              "; one launch covers one device");
  }
  // One launch sequence per (grad dtype, copy dtype); tensors without a copy join any of them.
  std::map<std::pair<DType, DType>, std::vector<CudaAdamTensor>> buckets;
  for (const AdamTensors& t : tensors) {
    if (t.param.numel() == 0) continue;
    const DType copy =
        t.param_copy.defined() ? to_dtype(t.param_copy.scalar_type()) : DType::kBFloat16;
    CudaAdamTensor r;
    r.param = t.param.data_ptr<float>();
    r.grad = t.grad.data_ptr();
    r.exp_avg = t.exp_avg.data_ptr<float>();
    r.exp_avg_sq = t.exp_avg_sq.data_ptr<float>();
    r.param_copy = t.param_copy.defined() ? t.param_copy.data_ptr() : nullptr;
    r.numel = t.param.numel();
    buckets[{to_dtype(t.grad.scalar_type()), copy}].push_back(r);
  }
  const c10::cuda::CUDAGuard guard(device);
  void* stream = c10::cuda::getCurrentCUDAStream(device.index()).stream();
  const AdamScalars scalars = make_adam_scalars(args);
  for (const auto& [key, list] : buckets) {
    cuda_adam_step(list.data(), list.size(), key.first, key.second, scalars, stream);
  }
}

#else

void adam_step_cuda(const std::vector<AdamTensors>& tensors, const AdamStepArgs& args) {
  (void)tensors;
  (void)args;
  if (!ZRT_TORCH_HAS_CUDA) {
    throw Error(
        "FusedAdam on CUDA tensors: ZeroRT was built without CUDA LibTorch (this LibTorch has no "
        "CUDA support); rebuild against a CUDA-enabled LibTorch");
  }
  throw Error(
      "FusedAdam on CUDA tensors: ZeroRT was built without the CUDA kernels (nvcc was not found "
      "or ZRT_WITH_CUDA=OFF); rebuild with -DZRT_WITH_CUDA=ON");
}

#endif

}  // namespace zrt::kernels
