// main() for GoogleTest binaries run under mpirun. Every rank runs every test; rank 0 prints the
// usual gtest output, other ranks print only their failures (prefixed "[rank N]"). The process
// exit code is non-zero on every rank if a test failed on any rank.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "comm/init.h"
#include "core/error.h"
#include "tests/support/mpi_world.h"

namespace zrt::test {
namespace {

std::shared_ptr<comm::Comm> g_world;
// Rank 0: the folders shared_temp_dir made, removed when the tests end.
std::vector<std::string> g_temp_dirs;

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 r.file_name() ? r.file_name() : "?", r.line_number(), r.message());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed()) {
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
    }
  }

 private:
  int rank_;
};

}  // namespace

comm::Comm& world() {
  ZRT_INTERNAL_ASSERT(g_world != nullptr, "world() used outside RUN_ALL_TESTS");
  return *g_world;
}

std::string shared_temp_dir(comm::Comm& comm, const std::string& label) {
  std::string path;
  if (comm.rank() == 0) {
    std::string pattern = "/tmp/zrt_" + label + "_XXXXXX";
    ZRT_INTERNAL_ASSERT(mkdtemp(pattern.data()) != nullptr, "mkdtemp failed for ", pattern);
    path = pattern;
    g_temp_dirs.push_back(path);
  }
  at::Tensor bytes = at::zeros({256}, at::kByte);
  if (comm.rank() == 0) std::memcpy(bytes.data_ptr(), path.data(), path.size());
  comm.broadcast(bytes, 0);
  return std::string(static_cast<const char*>(bytes.data_ptr()));
}

}  // namespace zrt::test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto options = zrt::comm::comm_options_from_env();
  zrt::test::g_world = zrt::comm::init_from_env(options);
  const int rank = zrt::test::g_world->rank();
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new zrt::test::RankFailurePrinter(rank));
  }
  const int rc = RUN_ALL_TESTS();
  at::Tensor failed = at::full({1}, rc != 0 ? 1 : 0, at::kInt);
  zrt::test::g_world->all_reduce(failed, zrt::comm::ReduceOp::kMax);
  const bool any_failed = failed.item<int>() != 0;
  if (rank == 0 && any_failed && rc == 0) {
    std::fprintf(stderr, "a test failed on another rank (see the [rank N] lines)\n");
  }
  // Every shared_temp_dir goes, whether its test passed, failed or returned early.
  if (rank == 0) {
    for (const std::string& dir : zrt::test::g_temp_dirs) {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  }
  zrt::test::g_world.reset();
  return any_failed ? 1 : 0;
}
