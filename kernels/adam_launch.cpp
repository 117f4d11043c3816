// The at::Tensor front end of the Adam kernels: validation shared by both devices, and the CPU
// launcher (the CUDA one is adam_cuda_launch.cpp).
#include "kernels/adam_launch.h"

#include <cmath>

#include <ATen/ATen.h>

#include "core/error.h"

namespace zrt::kernels {
namespace {

std::optional<DType> kernel_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return DType::kFloat32;
    case at::kBFloat16:
      return DType::kBFloat16;
    case at::kHalf:
      return DType::kFloat16;
    default:
      return std::nullopt;
  }
}

void check_one(const at::Tensor& t, const char* what, size_t index, int64_t numel,
               c10::Device device, bool fp32_only) {
  ZRT_CHECK(t.defined(), "Adam tensor ", index, ": ", what, " is undefined");
  ZRT_CHECK(t.device() == device, "Adam tensor ", index, ": ", what, " is on ", t.device(),
            " but the param is on ", device);
  ZRT_CHECK(t.numel() == numel, "Adam tensor ", index, ": ", what, " has ", t.numel(),
            " elements, the param has ", numel);
  ZRT_CHECK(t.is_contiguous(), "Adam tensor ", index, ": ", what, " must be contiguous");
  if (fp32_only) {
    ZRT_CHECK(t.scalar_type() == at::kFloat, "Adam tensor ", index, ": ", what,
              " must be fp32, got ", t.scalar_type());
  } else {
    ZRT_CHECK(kernel_dtype(t.scalar_type()).has_value(), "Adam tensor ", index, ": ", what,
              " must be fp32, bf16 or fp16, got ", t.scalar_type());
  }
}

}  // namespace

void check_adam_tensors(const std::vector<AdamTensors>& tensors, c10::DeviceType device_type) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    const AdamTensors& t = tensors[i];
    ZRT_CHECK(t.param.defined(), "Adam tensor ", i, ": param is undefined");
    ZRT_CHECK(t.param.device().type() == device_type, "Adam tensor ", i, ": param is on ",
              t.param.device(), ", expected a ", c10::DeviceTypeName(device_type), " tensor");
    const int64_t n = t.param.numel();
    check_one(t.param, "param", i, n, t.param.device(), true);
    check_one(t.grad, "grad", i, n, t.param.device(), false);
    check_one(t.exp_avg, "exp_avg", i, n, t.param.device(), true);
    check_one(t.exp_avg_sq, "exp_avg_sq", i, n, t.param.device(), true);
    if (t.param_copy.defined()) {
      check_one(t.param_copy, "param_copy", i, n, t.param.device(), false);
      ZRT_CHECK(t.param_copy.scalar_type() != at::kFloat, "Adam tensor ", i,
                ": param_copy must be bf16 or fp16, got fp32");
    }
  }
}

void check_adam_step_args(const AdamStepArgs& args) {
  ZRT_CHECK(args.step >= 1,
            "Adam step: the step count must be >= 1 (it is t after incrementing), got ", args.step);
  ZRT_CHECK(std::isfinite(args.grad_scale), "Adam step: grad_scale ", args.grad_scale,
            " is not finite");
}

void adam_step_cpu(const std::vector<AdamTensors>& tensors, const AdamStepArgs& args,
                   const CpuAdamConfig& config) {
  check_adam_step_args(args);
  check_adam_tensors(tensors, c10::DeviceType::CPU);
  std::vector<CpuAdamTensor> raw(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const AdamTensors& t = tensors[i];
    CpuAdamTensor& r = raw[i];
    r.numel = t.param.numel();
    if (r.numel == 0) continue;
    r.param = t.param.data_ptr<float>();
    r.grad = t.grad.data_ptr();
    r.grad_dtype = *kernel_dtype(t.grad.scalar_type());
    r.exp_avg = t.exp_avg.data_ptr<float>();
    r.exp_avg_sq = t.exp_avg_sq.data_ptr<float>();
    if (t.param_copy.defined()) {
      r.param_copy = t.param_copy.data_ptr();
      r.copy_dtype = *kernel_dtype(t.param_copy.scalar_type());
    }
  }
  cpu_adam_step(raw.data(), raw.size(), make_adam_scalars(args), config);
}

}  // namespace zrt::kernels
