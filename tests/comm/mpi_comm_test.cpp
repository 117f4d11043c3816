// The MPI backend under mpirun (registered at world sizes 1–4): closed-form results for every
// op × dtype × awkward size with both algorithms (native MPI collectives and the point-to-point
// ring), chunking of counts above the MPI int limit, large tensors, async overlap, agreement with
// the in-process backend, and the counting decorator.
#include "comm/mpi_comm.h"

#include <cstdlib>

#include <gtest/gtest.h>

#include "comm/counting_comm.h"
#include "comm/desync_check.h"
#include "comm/local_comm.h"
#include "core/error.h"
#include "tests/comm/collective_checks.h"
#include "tests/comm/sub_comm_checks.h"
#include "tests/support/mpi_world.h"

namespace zrt::comm {
namespace {

// A fresh MPI communicator built under the given environment overrides.
std::shared_ptr<Comm> mpi_comm_with(const char* algo, const char* max_count) {
  ::setenv("ZRT_MPI_ALGO", algo, 1);
  if (max_count != nullptr) {
    ::setenv("ZRT_MPI_MAX_COUNT", max_count, 1);
  } else {
    ::unsetenv("ZRT_MPI_MAX_COUNT");
  }
  auto comm = make_mpi_comm(CommOptions{60.0, false});
  ::unsetenv("ZRT_MPI_ALGO");
  ::unsetenv("ZRT_MPI_MAX_COUNT");
  return comm;
}

TEST(MpiComm, WorldMatchesLauncher) {
  Comm& w = test::world();
  EXPECT_EQ(w.backend_name(), "mpi");
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  ASSERT_NE(size, nullptr);
  EXPECT_EQ(w.size(), std::atoi(size));
  EXPECT_EQ(w.rank(), std::atoi(std::getenv("OMPI_COMM_WORLD_RANK")));
  EXPECT_GE(w.local_rank(), 0);
  EXPECT_LT(w.local_rank(), w.local_size());
  EXPECT_NE(mpi_library_version().find("MPI"), std::string::npos) << mpi_library_version();
}

TEST(MpiComm, EveryCollectiveNativeAlgorithm) {
  auto comm = mpi_comm_with("native", nullptr);
  test::check_everything(*comm);
}

TEST(MpiComm, AllToAllAndSubCommunicators) {
  test::check_all_to_all_everywhere(test::world());
  test::check_split(test::world());
  // A sub-communicator's collectives queue behind its parent's (one queue): asynchronous
  // collectives on both, in the same order everywhere, complete.
  std::shared_ptr<Comm> part = test::world().split(0, test::world().rank());
  at::Tensor a = at::ones({1000}, at::kFloat);
  at::Tensor b = at::ones({1000}, at::kFloat);
  auto wa = test::world().all_reduce_async(a);
  auto wb = part->all_reduce_async(b);
  wb->wait();
  wa->wait();
  EXPECT_EQ(a[0].item<float>(), test::world().size());
  EXPECT_EQ(b[0].item<float>(), test::world().size());
}

TEST(MpiComm, EveryCollectiveRingAlgorithm) {
  auto comm = mpi_comm_with("ring", nullptr);
  test::check_everything(*comm);
}

// Counts above the per-call limit are split into several MPI calls (the limit is INT_MAX in
// production; lowered here so the split paths run on small tensors).
TEST(MpiComm, CountsAboveTheLimitAreChunked) {
  for (const char* algo : {"native", "ring", "auto"}) {
    auto comm = mpi_comm_with(algo, "997");
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kLong}) {
      test::check_all_reduce(*comm, dtype, 5000, ReduceOp::kSum);
      test::check_reduce_scatter(*comm, dtype, 2500, ReduceOp::kSum);
      test::check_all_gather(*comm, dtype, 3001);
      test::check_all_gather(*comm, dtype, 3001, /*in_place=*/true);
      test::check_broadcast(*comm, dtype, 4000, comm->size() - 1);
    }
  }
}

TEST(MpiComm, LargeTensors) {
  Comm& comm = test::world();
  const int64_t big = (64 << 20) / 4 + 5;  // > 64 MiB of float32
  test::check_all_reduce(comm, at::kFloat, big, ReduceOp::kSum);
  test::check_reduce_scatter(comm, at::kFloat, big / comm.size() + 1, ReduceOp::kSum);
  test::check_all_gather(comm, at::kFloat, big / comm.size() + 1);
  test::check_all_gather(comm, at::kFloat, big / comm.size() + 1, /*in_place=*/true);
}

TEST(MpiComm, AsyncCollectivesOverlapAndComplete) { test::check_async_overlap(test::world()); }

// The in-process backend is the reference the ZeRO unit tests rely on: both must give identical
// results for the same per-rank inputs.
TEST(MpiComm, AgreesWithInProcessBackend) {
  Comm& comm = test::world();
  const int w = comm.size();
  // Non-integer values, so that summation order would show.
  auto input_of = [](int rank) {
    return at::arange(4099, at::kFloat).remainder(13).mul(0.1f * (rank + 1)).add(1.0f / 3);
  };
  at::Tensor mpi_ar = input_of(comm.rank());
  comm.all_reduce(mpi_ar);
  at::Tensor mpi_rs = at::empty({4099}, at::kFloat);
  at::Tensor rs_in = at::cat(std::vector<at::Tensor>(w, input_of(comm.rank())));
  comm.reduce_scatter(mpi_rs, rs_in);
  std::vector<at::Tensor> local_ar(w);
  std::vector<at::Tensor> local_rs(w);
  run_local_world(w, [&](Comm& local) {
    at::Tensor t = input_of(local.rank());
    local.all_reduce(t);
    local_ar[local.rank()] = t;
    at::Tensor out = at::empty({4099}, at::kFloat);
    local.reduce_scatter(out, at::cat(std::vector<at::Tensor>(w, input_of(local.rank()))));
    local_rs[local.rank()] = out;
  });
  // Floating-point sums agree up to summation order (bit-identical for two ranks, where a + b is
  // the only order); integer-valued inputs are compared bit-exactly by the closed-form tests.
  if (w <= 2) {
    EXPECT_TRUE(at::equal(mpi_ar, local_ar[comm.rank()]));
    EXPECT_TRUE(at::equal(mpi_rs, local_rs[comm.rank()]));
  }
  EXPECT_TRUE(at::allclose(mpi_ar, local_ar[comm.rank()], 1e-6, 0));
  EXPECT_TRUE(at::allclose(mpi_rs, local_rs[comm.rank()], 1e-6, 0));
}

TEST(MpiComm, CountingDecoratorMatchesFormula) {
  const int n = test::world().size();
  auto counting = std::make_shared<CountingComm>(mpi_comm_with("auto", nullptr));
  at::Tensor g = at::ones({1 << 16}, at::kBFloat16);
  at::Tensor shard = at::empty({(1 << 16) / n}, at::kBFloat16);
  at::Tensor full = at::empty({(1 << 16) / n * n}, at::kBFloat16);
  // One ZeRO-style step: reduce-scatter the gradients, all-gather the parameters.
  counting->reduce_scatter(shard, g.narrow(0, 0, full.numel()));
  counting->all_gather(full, shard);
  const CommStats s = counting->stats();
  const double psi_bytes = 2.0 * full.numel();
  EXPECT_DOUBLE_EQ(s.total_wire_bytes(), 2.0 * (n - 1) / n * psi_bytes);
  EXPECT_TRUE(at::equal(full, at::full_like(full, n)));
}

// ZRT_DEBUG_COLLECTIVES over real MPI ranks: a shape or dtype that differs on one rank is an
// error on every rank naming both calls (instead of mixed data or a hang), and the communicator
// stays usable afterwards.
TEST(MpiComm, DesyncCheckNamesTheDifferingCalls) {
  const int n = test::world().size();
  if (n < 2) GTEST_SKIP() << "needs 2 ranks";
  DesyncCheckComm comm(mpi_comm_with("auto", nullptr));
  const bool odd = comm.rank() == n - 1;
  at::Tensor t = at::ones({odd ? 5 : 4});
  try {
    comm.all_reduce(t);
    ADD_FAILURE() << "a shape mismatch was not detected";
  } catch (const CommError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("desynchronisation detected"), std::string::npos) << m;
    EXPECT_NE(m.find("rank " + std::to_string(n - 1) + " called"), std::string::npos) << m;
    EXPECT_NE(m.find("numel=5"), std::string::npos) << m;
  }
  at::Tensor d = at::ones({4}, odd ? at::kDouble : at::kFloat);
  try {
    comm.all_reduce(d);
    ADD_FAILURE() << "a dtype mismatch was not detected";
  } catch (const CommError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("Double"), std::string::npos) << m;
  }
  at::Tensor ok = at::ones({4});
  comm.all_reduce(ok);
  EXPECT_TRUE(at::equal(ok, at::full({4}, static_cast<float>(n))));
}

}  // namespace
}  // namespace zrt::comm
