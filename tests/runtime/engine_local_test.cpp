// The engine over the in-process backend (ranks as threads, no mpirun): the parity matrix of
// tests/runtime/parity.h at world sizes 2 and 3 — every stage, fp32 and both bf16 variants,
// gradient accumulation, clipping and offload — fast enough to run on every build, and
// independent of MPI.
#include <gtest/gtest.h>

#include "comm/local_comm.h"
#include "tests/runtime/parity.h"

namespace zrt {
namespace {

using test::Case;
using test::Precision;

class EngineLocal : public ::testing::TestWithParam<int> {};

TEST_P(EngineLocal, StagesMatchSingleProcessTraining) {
  const int world = GetParam();
  for (int stage : {0, 1, 2, 3}) {
    for (Precision precision : {Precision::kFp32, Precision::kBf16Adam, Precision::kBf16}) {
      for (int gas : {1, 3}) {
        for (bool clip : {false, true}) {
          // Offload is the same math on other buffers: once per stage and precision.
          const bool offload = stage > 0 && gas == 3 && clip;
          const Case c{stage, precision, gas, clip, offload};
          comm::run_local_world(world, [&](comm::Comm& comm) {
            test::check_engine_parity(std::shared_ptr<comm::Comm>(&comm, [](comm::Comm*) {}), c);
          });
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, EngineLocal, ::testing::Values(2, 3),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

}  // namespace
}  // namespace zrt
