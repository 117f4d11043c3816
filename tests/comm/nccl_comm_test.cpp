// The NCCL backend on CUDA tensors (registered under mpirun at world sizes 1 and 2). Skips with a
// reason where NCCL is not compiled in, LibTorch has no CUDA, or no GPU is visible — the usual
// case on the CPU development machines; the GPU validation run executes it.
#include "comm/nccl_comm.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tests/comm/collective_checks.h"
#include "tests/support/mpi_world.h"
#include "zrt/build_config.h"

namespace zrt::comm {
namespace {

std::string skip_reason() {
  if (!nccl_available()) return "this build has no NCCL backend (ZRT_WITH_NCCL=OFF)";
  if (!ZRT_TORCH_HAS_CUDA) return "LibTorch was built without CUDA, so no CUDA tensors exist";
  if (!torch::cuda::is_available()) return "no CUDA device is visible";
  if (torch::cuda::device_count() < test::world().local_size()) {
    return "fewer GPUs than ranks on this node";
  }
  return "";
}

// all_to_all (grouped sends and receives) and a sub-communicator of each parity (ZeRO++).
TEST(NcclComm, AllToAllAndSubCommunicators) {
  const std::string reason = skip_reason();
  if (!reason.empty()) GTEST_SKIP() << reason;
  auto comm = make_nccl_comm(CommOptions{60.0, false});
  const int r = comm->rank();
  const int w = comm->size();
  at::Tensor in = at::arange(3 * w, at::kFloat).add(100 * r).cuda();
  at::Tensor out = at::empty_like(in);
  comm->all_to_all(out, in);
  for (int q = 0; q < w; ++q) {
    test::expect_equal(out.cpu().narrow(0, 3 * q, 3),
                       at::arange(3 * r, 3 * r + 3, at::kFloat).add(100 * q), "nccl all_to_all");
  }
  std::shared_ptr<Comm> part = comm->split(r % 2, r);
  at::Tensor x = at::full({5}, r, at::kFloat).cuda();
  part->all_reduce(x);
  double sum = 0;
  for (int k = r % 2; k < w; k += 2) sum += k;
  test::expect_equal(x.cpu(), at::full({5}, sum, at::kFloat), "nccl split all_reduce");
  std::shared_ptr<Comm> host = comm->split_by_host();
  EXPECT_EQ(host->size(), comm->local_size());
}

TEST(NcclComm, CollectivesOnCudaTensors) {
  const std::string reason = skip_reason();
  if (!reason.empty()) GTEST_SKIP() << reason;
  auto comm = make_nccl_comm(CommOptions{60.0, false});
  EXPECT_EQ(comm->backend_name(), "nccl");
  EXPECT_EQ(comm->size(), test::world().size());
  const int r = comm->rank();
  const int w = comm->size();
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf, at::kLong}) {
    at::Tensor t = test::pattern(4099, 7, r + 1, dtype).cuda();
    comm->all_reduce(t);
    test::expect_equal(t.cpu(), test::pattern(4099, 7, w * (w + 1) / 2.0, dtype),
                       "nccl all_reduce");
    at::Tensor in = at::full({3 * w}, r + 1.0, dtype).cuda();
    at::Tensor out = at::empty({3}, in.options());
    comm->reduce_scatter(out, in);
    test::expect_equal(out.cpu(), at::full({3}, w * (w + 1) / 2.0, dtype), "nccl reduce_scatter");
    at::Tensor gathered = at::empty({2 * w}, in.options());
    comm->all_gather(gathered, at::full({2}, r, dtype).cuda());
    for (int k = 0; k < w; ++k) {
      test::expect_equal(gathered.cpu().narrow(0, 2 * k, 2), at::full({2}, k, dtype),
                         "nccl all_gather");
    }
    std::vector<int64_t> counts(w);
    int64_t total = 0;
    for (int k = 0; k < w; ++k) total += (counts[k] = k + 1);
    at::Tensor v_in = at::ones({total}, dtype).cuda();
    at::Tensor v_out = at::empty({counts[r]}, v_in.options());
    comm->reduce_scatter_v(v_out, v_in, counts);
    test::expect_equal(v_out.cpu(), at::full({counts[r]}, w, dtype), "nccl reduce_scatter_v");
  }
  // Async: the caller's stream waits; no host synchronisation is needed before using results.
  at::Tensor a = at::ones({1 << 20}, at::kFloat).cuda();
  auto work = comm->all_reduce_async(a);
  work->wait();
  EXPECT_EQ(a.sum().item<float>(), static_cast<float>(w) * (1 << 20));
  comm->barrier();
}

}  // namespace
}  // namespace zrt::comm
