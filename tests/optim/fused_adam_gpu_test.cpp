// FusedAdam on CUDA tensors where a GPU and a CUDA LibTorch exist: the same bits as on the CPU
// (both kernels follow Note [Adam element math]). Skips with the reason elsewhere.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "kernels/adam_cuda.h"
#include "optim/fused_adam.h"
#include "optim_test_util.h"
#include "zrt/build_config.h"

namespace zrt::optim {
namespace {

using zrt::test::bit_equal;

TEST(FusedAdamGpu, MatchesCpuBitwise) {
  if (!ZRT_TORCH_HAS_CUDA) GTEST_SKIP() << "built without CUDA LibTorch (LibTorch is CPU-only)";
  if (!kernels::cuda_kernels_built()) GTEST_SKIP() << "built without the CUDA kernels (no nvcc)";
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  const std::vector<int64_t> sizes = {1, 17, 1023, (1 << 20) + 3};
  const auto params = test::make_params(sizes, 8);
  AdamParamGroup cpu_group, gpu_group;
  cpu_group.options.weight_decay = gpu_group.options.weight_decay = 0.01;
  std::vector<at::Tensor> cpu_p, gpu_p, cpu_copy, gpu_copy;
  for (const auto& p : params) {
    cpu_p.push_back(p.clone());
    gpu_p.push_back(p.to(at::kCUDA));
    cpu_copy.push_back(at::empty(p.sizes(), at::kBFloat16));
    gpu_copy.push_back(
        at::empty(p.sizes(), at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA)));
    cpu_group.params.push_back({cpu_p.back(), {}, cpu_copy.back()});
    gpu_group.params.push_back({gpu_p.back(), {}, gpu_copy.back()});
  }
  FusedAdam cpu({cpu_group}), gpu({gpu_group});
  for (int64_t s = 1; s <= 20; ++s) {
    for (size_t k = 0; k < sizes.size(); ++k) {
      const at::Tensor g = test::grad_at(sizes[k], s, k).to(at::kBFloat16);
      cpu.set_grad(0, k, g);
      gpu.set_grad(0, k, g.to(at::kCUDA));
    }
    cpu.step();
    gpu.step();
  }
  for (size_t k = 0; k < sizes.size(); ++k) {
    EXPECT_TRUE(bit_equal(gpu_p[k].cpu(), cpu_p[k])) << "size " << sizes[k];
    EXPECT_TRUE(bit_equal(gpu_copy[k].cpu(), cpu_copy[k])) << "size " << sizes[k];
    EXPECT_TRUE(bit_equal(gpu.exp_avg_sq(0, k).cpu(), cpu.exp_avg_sq(0, k)));
  }
}

}  // namespace
}  // namespace zrt::optim
