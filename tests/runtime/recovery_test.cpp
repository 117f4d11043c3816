// Recovery paths driven by the deterministic fault seam (comm/fault_comm.h) over the in-process
// backend: each fault is injected on a chosen collective of a chosen rank, so each path runs on
// purpose and every test can fail for the right reason. No mpirun: ranks are threads.
#include <chrono>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "comm/fault_comm.h"
#include "comm/local_comm.h"
#include "core/error.h"
#include "runtime/gathered_parameters.h"
#include "runtime/initialize.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tiny_model.h"

namespace zrt {
namespace {

using comm::FaultComm;
using comm::FaultPlan;

// Runs body(rank, comm) on n threads over FaultComm-wrapped in-process communicators; returns
// each rank's error message ("" when it finished). A rank left waiting by a failed peer ends by
// the communicator's timeout (kept short here).
std::vector<std::string> run_ranks(
    int n, double timeout_s, const std::function<void(int, std::shared_ptr<FaultComm>)>& body) {
  comm::CommOptions options;
  options.timeout_seconds = timeout_s;
  std::vector<std::shared_ptr<comm::Comm>> world = comm::make_local_world(n, options);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    auto fault = std::make_shared<FaultComm>(world[r]);
    threads.emplace_back([&, r, fault] {
      try {
        body(r, fault);
      } catch (const std::exception& e) {
        errors[r] = e.what();
        if (errors[r].empty()) errors[r] = "(empty error)";
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

Json stage_config(int stage) {
  return {{"train_micro_batch_size_per_gpu", 4},
          {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 0.01}}}}},
          {"zero_optimization",
           {{"stage", stage}, {"reduce_bucket_size", 20}, {"allgather_bucket_size", 30}}}};
}

std::unique_ptr<Engine> make_engine(std::shared_ptr<comm::Comm> comm, int stage,
                                    std::shared_ptr<test::TinyMlpImpl>& model) {
  model = std::make_shared<test::TinyMlpImpl>(false);  // deterministic weights on every rank
  InitializeOptions io;
  io.comm = std::move(comm);
  return initialize(model, stage_config(stage), io);
}

void train_step(Engine& engine, test::TinyMlpImpl& model, int rank, int step) {
  auto [x, y] = test::tiny_batch(rank, step);
  engine.backward(torch::mse_loss(model.forward(x), y));
  engine.step();
}

TEST(FaultSeam, FailsDelaysAndCorruptsTheChosenCollective) {
  // Failure of every rank's 2nd collective: the 1st completes, the 2nd throws on both.
  auto errors = run_ranks(2, 5, [](int, std::shared_ptr<FaultComm> c) {
    c->arm({FaultPlan::Kind::kFail, 2});
    at::Tensor t = at::ones({3});
    c->all_reduce(t);
    EXPECT_EQ(t[0].item<float>(), 2.0f);
    c->all_reduce(t);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("injected failure of all_reduce(sum) #2"), std::string::npos)
        << errors[r];
  }
  // A corrupted result on rank 1 only, counting only all_gathers.
  errors = run_ranks(2, 5, [](int rank, std::shared_ptr<FaultComm> c) {
    FaultPlan plan{FaultPlan::Kind::kCorrupt, 1};
    plan.type = comm::OpType::kAllGather;
    plan.rank = 1;
    plan.value = -7;
    c->arm(plan);
    at::Tensor s = at::ones({2});
    c->all_reduce(s);  // not counted
    at::Tensor out = at::zeros({4});
    c->all_gather(out, at::full({2}, static_cast<float>(rank + 1)));
    EXPECT_EQ(out[0].item<float>(), rank == 1 ? -7.0f : 1.0f);
    EXPECT_EQ(out[3].item<float>(), 2.0f);
    EXPECT_EQ(c->fired(), rank == 1);
  });
  EXPECT_EQ(errors, std::vector<std::string>(2));
}

// A stalled rank: rank 1 enters the first collective after the deadline; rank 0 reports the
// timeout naming that collective instead of hanging.
TEST(Recovery, AStalledRankIsReportedByTheOthersNamingTheCollective) {
  const auto start = std::chrono::steady_clock::now();
  auto errors = run_ranks(2, 0.5, [](int, std::shared_ptr<FaultComm> c) {
    FaultPlan plan{FaultPlan::Kind::kDelay, 1};
    plan.rank = 1;
    plan.delay_seconds = 1.5;
    c->arm(plan);
    at::Tensor t = at::ones({5});
    c->all_reduce(t);
  });
  EXPECT_NE(errors[0].find("communication timeout: all_reduce(sum) #1"), std::string::npos)
      << errors[0];
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10);
}

// A NaN in one rank's reduced gradients: every rank refuses the step naming it, and no rank
// applies anything (the weights stay those before the step).
TEST(Recovery, ACorruptedGradientReductionStopsEveryRankWithNothingApplied) {
  for (int stage : {1, 2, 3}) {
    std::vector<std::vector<at::Tensor>> before(2), after(2);
    auto errors = run_ranks(2, 20, [&](int rank, std::shared_ptr<FaultComm> c) {
      std::shared_ptr<test::TinyMlpImpl> model;
      auto engine = make_engine(c, stage, model);
      train_step(*engine, *model, rank, 0);
      FaultPlan plan{FaultPlan::Kind::kCorrupt, 1};
      // Stages 1-2 reduce flat buckets (reduce_scatter_v), stage 3 per-unit equal partitions.
      plan.type = stage == 3 ? comm::OpType::kReduceScatter : comm::OpType::kReduceScatterV;
      plan.rank = 1;
      c->arm(plan);
      {
        GatheredParameters full(*engine);
        for (const auto& p : model->parameters()) before[rank].push_back(p.detach().clone());
      }
      try {
        train_step(*engine, *model, rank, 1);
        ADD_FAILURE() << "stage " << stage << " rank " << rank << ": the step went through"
                      << (c->fired() ? "" : " (the fault did not fire)");
      } catch (...) {
        GatheredParameters full(*engine);
        for (const auto& p : model->parameters()) after[rank].push_back(p.detach().clone());
        throw;
      }
    });
    for (int r = 0; r < 2; ++r) {
      EXPECT_NE(errors[r].find("non-finite gradients (NaN or inf) at global step 2"),
                std::string::npos)
          << "stage " << stage << " rank " << r << ": " << errors[r];
      ASSERT_EQ(before[r].size(), after[r].size()) << "stage " << stage;
      for (size_t i = 0; i < before[r].size(); ++i) {
        EXPECT_TRUE(torch::equal(before[r][i], after[r][i])) << "stage " << stage << " param " << i;
      }
    }
  }
}

// The commit vote of a checkpoint save fails: the save fails on every rank, `latest` still names
// the previous checkpoint, and that one loads.
TEST(Recovery, AFailedSaveLeavesTheLastCheckpointCurrentAndLoadable) {
  test::TempDir dir("zrt_recovery");
  auto errors = run_ranks(2, 20, [&](int rank, std::shared_ptr<FaultComm> c) {
    std::shared_ptr<test::TinyMlpImpl> model;
    auto engine = make_engine(c, 2, model);
    train_step(*engine, *model, rank, 0);
    engine->save_checkpoint(dir.path());
    train_step(*engine, *model, rank, 1);
    FaultPlan plan{FaultPlan::Kind::kFail, 1};
    plan.type = comm::OpType::kAllReduce;
    c->arm(plan);
    engine->save_checkpoint(dir.path());
  });
  for (int r = 0; r < 2; ++r) EXPECT_NE(errors[r].find("injected failure"), std::string::npos)
      << errors[r];
  std::ifstream latest(dir / "latest");
  std::string tag;
  std::getline(latest, tag);
  EXPECT_EQ(tag, "global_step1");
  errors = run_ranks(2, 20, [&](int, std::shared_ptr<FaultComm> c) {
    std::shared_ptr<test::TinyMlpImpl> model;
    auto engine = make_engine(c, 2, model);
    auto loaded = engine->load_checkpoint(dir.path());
    ASSERT_TRUE(loaded.has_value());
    EXPECT_EQ(engine->global_steps(), 1);
  });
  EXPECT_EQ(errors, std::vector<std::string>(2));
}

}  // namespace
}  // namespace zrt
