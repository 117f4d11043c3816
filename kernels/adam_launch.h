// The at::Tensor front end of the Adam kernels: validates tensors (device, dtype, size,
// contiguity) with messages naming the offending tensor, then calls the CPU kernel
// (kernels/cpu_adam.h) or the CUDA multi-tensor kernel (kernels/adam_cuda.h).
#pragma once

#include <vector>

#include <ATen/core/Tensor.h>

#include "kernels/adam_math.h"
#include "kernels/cpu_adam.h"

namespace zrt::kernels {

// One parameter's tensors. param, exp_avg, exp_avg_sq: fp32, contiguous, same numel, updated in
// place. grad: fp32, bf16 or fp16, contiguous, same numel. param_copy: undefined, or bf16/fp16,
// contiguous, same numel, overwritten with the updated param rounded to nearest even (what
// param.to(copy dtype) gives). All on one device; shapes may differ as long as numels agree.
struct AdamTensors {
  at::Tensor param;
  at::Tensor grad;
  at::Tensor exp_avg;
  at::Tensor exp_avg_sq;
  at::Tensor param_copy;
};

// One Adam step (args.step is t after incrementing) over CPU tensors, in one multi-threaded pass.
// Throws zrt::Error naming the tensor (by index in `tensors`) for invalid input.
void adam_step_cpu(const std::vector<AdamTensors>& tensors, const AdamStepArgs& args,
                   const CpuAdamConfig& config = {});

// The same over CUDA tensors with the multi-tensor CUDA kernel, on the current CUDA stream.
// Throws zrt::Error("... built without CUDA LibTorch" / "... built without the CUDA kernels")
// when this build cannot run it.
void adam_step_cuda(const std::vector<AdamTensors>& tensors, const AdamStepArgs& args);

// Whether adam_step_cuda is compiled in (CUDA kernels and a CUDA LibTorch); says nothing about
// whether a device is present.
bool adam_cuda_launcher_built();

// Shared by both launchers: throw unless the tensors are valid for a kernel on `device_type`,
// and unless args.step >= 1 and grad_scale is finite.
void check_adam_tensors(const std::vector<AdamTensors>& tensors, c10::DeviceType device_type);
void check_adam_step_args(const AdamStepArgs& args);

}  // namespace zrt::kernels
