// The CUDA multi-tensor Adam kernel, where a GPU exists: bit-identical to the CPU kernel (both
// follow Note [Adam element math]) across sizes, unaligned starts, dtypes and launch splitting;
// and the at::Tensor launcher when LibTorch has CUDA. Elsewhere the tests skip with the reason,
// and the launcher's "built without" error is checked.
#include "kernels/adam_cuda.h"

#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "core/error.h"
#include "kernels/adam_launch.h"
#include "kernels/cpu_adam.h"
#include "tests/support/tensor_compare.h"
#include "zrt/build_config.h"

namespace zrt::kernels {
namespace {

using zrt::test::bit_equal;

#define ZRT_SKIP_WITHOUT_GPU()                                                             \
  do {                                                                                     \
    if (!cuda_kernels_built()) GTEST_SKIP() << "built without the CUDA kernels (no nvcc)"; \
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";        \
  } while (false)

TEST(AdamCuda, LauncherExplainsWhatIsMissing) {
  if (adam_cuda_launcher_built()) GTEST_SKIP() << "the CUDA launcher is built here";
  try {
    adam_step_cuda({}, AdamStepArgs{});
    FAIL() << "adam_step_cuda did not throw";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("built without"), std::string::npos) << what;
  }
}

// A device copy of a CPU tensor, freed on destruction.
class DeviceCopy {
 public:
  // The data starts `offset` elements into the allocation (an unaligned start when odd).
  DeviceCopy(const at::Tensor& host, int64_t offset)
      : bytes_(static_cast<size_t>(host.numel()) * host.element_size()),
        base_(cuda_malloc(bytes_ + 64)),
        ptr_(static_cast<char*>(base_) + offset * host.element_size()) {
    if (bytes_ > 0) cuda_copy_to_device(ptr_, host.data_ptr(), bytes_);
  }
  ~DeviceCopy() { cuda_free(base_); }
  void* get() const { return ptr_; }
  void read_into(at::Tensor& host) const {
    if (bytes_ > 0) cuda_copy_to_host(host.data_ptr(), ptr_, bytes_);
  }

 private:
  size_t bytes_;
  void* base_;
  void* ptr_;
};

struct HostSet {
  at::Tensor p, g, m, v, copy;
};

// Runs 3 steps on `count` tensors of the given sizes on the GPU (raw API) and on the CPU kernel
// and compares every array bit for bit. Returns the launches of the last GPU step.
int compare_with_cpu(const std::vector<int64_t>& sizes, at::ScalarType grad_dtype,
                     at::ScalarType copy_dtype, int64_t offset = 0) {
  std::vector<HostSet> cpu, gpu_result;
  for (size_t k = 0; k < sizes.size(); ++k) {
    at::manual_seed(static_cast<uint64_t>(k) + 1);
    const int64_t n = sizes[k];
    HostSet h{at::randn({n}), at::randn({n}).to(grad_dtype), at::randn({n}).abs() * 0.1,
              at::randn({n}).abs() * 0.01, at::empty({n}, at::TensorOptions().dtype(copy_dtype))};
    cpu.push_back(h);
    gpu_result.push_back({h.p.clone(), h.g.clone(), h.m.clone(), h.v.clone(), h.copy.clone()});
  }
  std::vector<std::unique_ptr<DeviceCopy>> keep;
  std::vector<CudaAdamTensor> list;
  for (const HostSet& h : gpu_result) {
    CudaAdamTensor t;
    for (const at::Tensor* host : {&h.p, &h.g, &h.m, &h.v, &h.copy}) {
      keep.push_back(std::make_unique<DeviceCopy>(*host, host == &h.g ? offset + 1 : offset));
    }
    const size_t b = keep.size() - 5;
    t.param = static_cast<float*>(keep[b]->get());
    t.grad = keep[b + 1]->get();
    t.exp_avg = static_cast<float*>(keep[b + 2]->get());
    t.exp_avg_sq = static_cast<float*>(keep[b + 3]->get());
    t.param_copy = keep[b + 4]->get();
    t.numel = h.p.numel();
    list.push_back(t);
  }
  const DType gd = grad_dtype == at::kFloat      ? DType::kFloat32
                   : grad_dtype == at::kBFloat16 ? DType::kBFloat16
                                                 : DType::kFloat16;
  const DType cd = copy_dtype == at::kBFloat16 ? DType::kBFloat16 : DType::kFloat16;
  int launches = 0;
  for (int64_t step = 1; step <= 3; ++step) {
    AdamStepArgs a;
    a.lr = 1e-2;
    a.weight_decay = 0.1;
    a.adam_w_mode = step != 2;
    a.step = step;
    const AdamScalars s = make_adam_scalars(a);
    launches = cuda_adam_step(list.data(), list.size(), gd, cd, s, nullptr);
    std::vector<AdamTensors> host_list;
    for (HostSet& h : cpu) host_list.push_back({h.p, h.g, h.m, h.v, h.copy});
    adam_step_cpu(host_list, a);
  }
  cuda_synchronize();
  for (size_t k = 0; k < sizes.size(); ++k) {
    HostSet& h = gpu_result[k];
    keep[5 * k]->read_into(h.p);
    keep[5 * k + 2]->read_into(h.m);
    keep[5 * k + 3]->read_into(h.v);
    keep[5 * k + 4]->read_into(h.copy);
    EXPECT_TRUE(bit_equal(h.p, cpu[k].p)) << "tensor " << k << " of " << sizes[k];
    EXPECT_TRUE(bit_equal(h.m, cpu[k].m)) << "tensor " << k;
    EXPECT_TRUE(bit_equal(h.v, cpu[k].v)) << "tensor " << k;
    EXPECT_TRUE(bit_equal(h.copy, cpu[k].copy)) << "tensor " << k;
  }
  return launches;
}

TEST(AdamCuda, MatchesCpuKernelBitwise) {
  ZRT_SKIP_WITHOUT_GPU();
  for (const at::ScalarType gd : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (const at::ScalarType cd : {at::kBFloat16, at::kHalf}) {
      SCOPED_TRACE(::testing::Message() << "grad " << gd << " copy " << cd);
      compare_with_cpu({0, 1, 7, 15, 16, 17, 1023, (1 << 20) + 3}, gd, cd);
      compare_with_cpu({17, 1023, 3 * kCudaAdamChunk + 9}, gd, cd, /*offset=*/1);
      compare_with_cpu({17, 1023, 3 * kCudaAdamChunk + 9}, gd, cd, /*offset=*/3);
    }
  }
}

TEST(AdamCuda, SplitsLaunchesAtTheArgumentLimits) {
  ZRT_SKIP_WITHOUT_GPU();
  // 40 small tensors: 30 per launch → 2 launches.
  EXPECT_EQ(compare_with_cpu(std::vector<int64_t>(40, 1000), at::kFloat, at::kBFloat16), 2);
  // One tensor of 400 chunks: 320 blocks per launch → 2 launches, the tensor carried over.
  EXPECT_EQ(compare_with_cpu({400 * kCudaAdamChunk + 5}, at::kBFloat16, at::kBFloat16), 2);
}

#if ZRT_TORCH_HAS_CUDA
TEST(AdamCuda, TensorLauncherMatchesCpu) {
  ZRT_SKIP_WITHOUT_GPU();
  at::manual_seed(3);
  const int64_t n = 300001;
  const at::Tensor p = at::randn({n}), g = at::randn({n}).to(at::kBFloat16);
  AdamTensors cpu{p.clone(), g.clone(), at::zeros({n}), at::zeros({n}),
                  at::empty({n}, at::kBFloat16)};
  AdamTensors gpu{p.cuda(), g.cuda(), at::zeros({n}).cuda(), at::zeros({n}).cuda(),
                  at::empty({n}, at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA))};
  for (int64_t step = 1; step <= 5; ++step) {
    AdamStepArgs a;
    a.step = step;
    a.weight_decay = 0.01;
    adam_step_cpu({cpu}, a);
    adam_step_cuda({gpu}, a);
  }
  EXPECT_TRUE(bit_equal(gpu.param.cpu(), cpu.param));
  EXPECT_TRUE(bit_equal(gpu.param_copy.cpu(), cpu.param_copy));
}
#endif

}  // namespace
}  // namespace zrt::kernels
