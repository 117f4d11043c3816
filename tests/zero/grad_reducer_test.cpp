// GradReducer against a single-process reference: for every stage's policy, world size, bucket
// size, overlap setting and accumulation dtype, each rank's reduced gradient partition equals the
// matching slice of the gradient averaged over all ranks' micro-batches.
#include "zero/grad_reducer.h"

#include <functional>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "comm/counting_comm.h"
#include "comm/local_comm.h"
#include "tests/support/tiny_model.h"

namespace zrt::zero {
namespace {

struct Case {
  int stage;
  int world;
  int64_t bucket;
  bool overlap;
  int gas;
};

std::string name_of(const Case& c) {
  return "stage" + std::to_string(c.stage) + "_w" + std::to_string(c.world) + "_b" +
         std::to_string(c.bucket) + (c.overlap ? "_overlap" : "") + "_gas" + std::to_string(c.gas);
}

// Reference: the flat (unpadded) gradient averaged over ranks, summed over micro-steps with the
// loss divided by gas, computed without any communication.
at::Tensor reference_flat_grad(int world, int gas) {
  test::TinyMlp model(true);
  at::Tensor total;
  for (int r = 0; r < world; ++r) {
    for (int s = 0; s < gas; ++s) {
      model->zero_grad();
      auto [x, y] = test::tiny_batch(r, s);
      auto loss = torch::mse_loss(model->forward(x), y) / gas;
      loss.backward();
      std::vector<at::Tensor> grads;
      for (auto& p : model->named_parameters()) {
        if (!p.value().requires_grad()) continue;
        grads.push_back(p.value().grad().defined() ? p.value().grad().reshape(-1)
                                                   : torch::zeros({p.value().numel()}));
      }
      at::Tensor flat = torch::cat(grads);
      total = total.defined() ? total + flat : flat;
    }
  }
  return total / world;
}

class GradReducerTest : public ::testing::TestWithParam<Case> {};

TEST_P(GradReducerTest, PartitionsMatchAveragedReference) {
  const Case c = GetParam();
  const at::Tensor ref = reference_flat_grad(c.world, c.gas);
  comm::run_local_world(c.world, [&](comm::Comm& comm) {
    test::TinyMlp model(true);
    auto collected = collect_params(test::named_params(*model));
    std::vector<FlatGroup> groups;
    groups.emplace_back(collected.trainable, comm.size());
    groups[0].bind();
    ReducerOptions opts;
    opts.policy = StagePolicy::from_stage(c.stage);
    opts.bucket_elements = c.bucket;
    opts.overlap = c.overlap;
    GradReducer reducer(groups, std::shared_ptr<comm::Comm>(&comm, [](comm::Comm*) {}), opts);
    for (int step = 0; step < 2; ++step) {
      for (int s = 0; s < c.gas; ++s) {
        reducer.begin_backward(/*boundary=*/s == c.gas - 1);
        auto [x, y] = test::tiny_batch(comm.rank(), s);
        auto loss = torch::mse_loss(model->forward(x), y) / c.gas;
        loss.backward();
        reducer.end_backward();
      }
      const FlatPartition& part = groups[0].partition();
      at::Tensor padded = torch::zeros({part.padded_numel});
      padded.narrow(0, 0, ref.numel()).copy_(ref);
      at::Tensor want =
          c.stage == 0 ? padded
                       : padded.narrow(0, part.partition(comm.rank()).offset, part.partition_size);
      at::Tensor got = reducer.grad_partition(0);
      ASSERT_EQ(got.numel(), want.numel());
      EXPECT_TRUE(torch::allclose(got, want, 1e-6, 1e-7))
          << name_of(c) << " step " << step << " rank " << comm.rank() << "\n"
          << (got - want).abs().max().item<float>();
      reducer.zero_grad();
    }
    if (c.stage == 2) {
      for (const auto& fp : groups[0].params()) {
        EXPECT_FALSE(fp.param.grad().defined()) << "stage 2 kept the full gradient of " << fp.name;
      }
    }
  });
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (int stage : {0, 1, 2}) {
    for (int world : {1, 2, 3, 4}) {
      for (int64_t bucket : {int64_t{7}, int64_t{40}, int64_t{500000000}}) {
        for (bool overlap : {false, true}) {
          for (int gas : {1, 3}) out.push_back({stage, world, bucket, overlap, gas});
        }
      }
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(All, GradReducerTest, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return name_of(info.param); });

// One backward of the tiny MLP on this rank, its gradients reduced through a counting decorator
// (buckets of 10 elements); `check` gets the counters and the flat group.
void reduce_once_counted(
    comm::Comm& comm, int stage, bool overlap,
    const std::function<void(const comm::CountingComm&, const FlatGroup&)>& check) {
  auto counting =
      std::make_shared<comm::CountingComm>(std::shared_ptr<comm::Comm>(&comm, [](auto*) {}));
  test::TinyMlp model;
  auto collected = collect_params(test::named_params(*model));
  std::vector<FlatGroup> groups;
  groups.emplace_back(collected.trainable, comm.size());
  groups[0].bind();
  ReducerOptions opts;
  opts.policy = StagePolicy::from_stage(stage);
  opts.bucket_elements = 10;
  opts.overlap = overlap;
  GradReducer reducer(groups, counting, opts);
  reducer.begin_backward(true);
  auto [x, y] = test::tiny_batch(comm.rank(), 0);
  torch::mse_loss(model->forward(x), y).backward();
  reducer.end_backward();
  check(*counting, groups[0]);
}

// Stage 1 and 2 move (n−1)/n of the gradient per reduction (reduce-scatter), stage 0 twice that.
TEST(GradReducerVolume, WireBytesFollowTheRingFormulas) {
  for (int stage : {0, 1, 2}) {
    for (int world : {2, 3}) {
      comm::run_local_world(world, [&](comm::Comm& comm) {
        reduce_once_counted(comm, stage, false, [&](const comm::CountingComm& counting,
                                                    const FlatGroup& group) {
          const double psi = 4.0 * group.padded_numel();
          const double factor = stage == 0 ? 2.0 * (world - 1) / world : (world - 1.0) / world;
          const double wire = counting.stats().total_wire_bytes();
          if (stage == 0) {
            EXPECT_DOUBLE_EQ(wire, factor * psi);
          } else {
            // Each rank sends every piece but its own: (padded − own partition) elements.
            EXPECT_DOUBLE_EQ(wire, psi - 4.0 * group.partition().partition_size);
            EXPECT_DOUBLE_EQ(wire, factor * psi);
          }
        });
      });
    }
  }
}

// Without overlap every bucket is waited for as soon as it is launched, so it is submitted as a
// blocking call (the MPI backend then runs it on the calling thread); with overlap none is.
TEST(GradReducerBlocking, BucketsWaitedForAtOnceAreBlockingCalls) {
  for (int stage : {0, 1, 2}) {
    for (bool overlap : {false, true}) {
      comm::run_local_world(2, [&](comm::Comm& comm) {
        reduce_once_counted(comm, stage, overlap, [&](const comm::CountingComm& counting,
                                                      const FlatGroup&) {
          int64_t calls = 0;
          int64_t blocking = 0;
          for (const comm::OpCounter& c : counting.stats().by_op) {
            calls += c.calls;
            blocking += c.blocking_calls;
          }
          EXPECT_GT(calls, 1) << "stage " << stage;
          EXPECT_EQ(blocking, overlap ? 0 : calls) << "stage " << stage << " overlap " << overlap;
        });
      });
    }
  }
}

TEST(GradReducerMisuse, GradientOutsideEngineBackwardIsAnError) {
  comm::run_local_world(1, [](comm::Comm& comm) {
    test::TinyMlp model;
    auto collected = collect_params(test::named_params(*model));
    std::vector<FlatGroup> groups;
    groups.emplace_back(collected.trainable, 1);
    groups[0].bind();
    GradReducer reducer(groups, std::shared_ptr<comm::Comm>(&comm, [](comm::Comm*) {}), {});
    auto [x, y] = test::tiny_batch(0, 0);
    try {
      torch::mse_loss(model->forward(x), y).backward();
      FAIL() << "no error";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("outside engine.backward()"), std::string::npos)
          << e.what();
    }
  });
}

TEST(FlatLayout, ParamsBecomeViewsAndTiesAreDeduplicated) {
  test::TinyMlp model(true);
  auto named = test::named_params(*model);
  named.push_back({"alias_of_fc1_weight", model->fc1->weight});
  auto collected = collect_params(named);
  ASSERT_EQ(collected.aliases.size(), 1u);
  EXPECT_EQ(collected.aliases[0].second, "fc1.weight");
  ASSERT_EQ(collected.frozen.size(), 1u);
  EXPECT_EQ(collected.frozen[0].name, "frozen_scale");
  const at::Tensor before = model->fc2->weight.detach().clone();
  FlatGroup group(collected.trainable, 3);
  group.bind();
  EXPECT_EQ(group.numel(), 35 + 7 + 21 + 3 + 4);
  EXPECT_EQ(group.padded_numel() % 6, 0);
  EXPECT_TRUE(torch::equal(model->fc2->weight, before));
  EXPECT_EQ(model->fc2->weight.data_ptr(),
            static_cast<char*>(group.flat().data_ptr()) + 4 * (4 + 35 + 7));  // unused, fc1
  const auto counts = group.counts_by_rank(0, group.padded_numel());
  EXPECT_EQ(counts[0] + counts[1] + counts[2], group.padded_numel());
}

TEST(FlatLayout, GroupRulesSplitParameters) {
  test::TinyMlp model;
  auto collected = collect_params(test::named_params(*model));
  std::vector<int> rule_of_group;
  auto groups = assign_groups(
      collected.trainable,
      {GroupRule{[](const std::string& n) { return n.find("bias") != std::string::npos; }}},
      &rule_of_group);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(rule_of_group, (std::vector<int>{-1, 0}));
  EXPECT_EQ(groups[1].size(), 2u);
  EXPECT_EQ(groups[1][0].name, "fc1.bias");
}

}  // namespace
}  // namespace zrt::zero
