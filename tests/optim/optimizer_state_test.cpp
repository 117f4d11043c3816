// Optimizer state export/import: torch's layout (indices across groups, state only for stepped
// params, hyper-parameters per group), a mid-training round trip that continues bit-identically
// (FusedAdam with a bf16 copy, SGD with momentum), validation with the group and param named and
// no change on failure, dtype conversion, and DeepSpeed's "last param's step" rule.
#include <gtest/gtest.h>

#include "core/error.h"
#include "optim/fused_adam.h"
#include "optim/sgd.h"
#include "optim_test_util.h"

namespace zrt::optim {
namespace {

using test::deep_copy;
using test::grad_at;
using test::make_params;
using zrt::test::bit_equal;

const std::vector<std::vector<int64_t>> kSizes = {{1000, 7}, {3}, {70000}};

std::vector<AdamParamGroup> adam_groups(const std::vector<std::vector<at::Tensor>>& params,
                                        double lr_scale = 1.0) {
  std::vector<AdamParamGroup> groups;
  for (size_t g = 0; g < params.size(); ++g) {
    AdamParamGroup group;
    group.options.lr = 1e-2 * static_cast<double>(g + 1) * lr_scale;
    group.options.weight_decay = 0.05 * static_cast<double>(g);
    group.options.adam_w_mode = g != 1;
    group.options.bias_correction = g != 2;
    for (const auto& p : params[g]) {
      group.params.push_back({p, {}, at::empty(p.sizes(), at::kBFloat16)});
    }
    groups.push_back(std::move(group));
  }
  return groups;
}

std::vector<std::vector<at::Tensor>> fresh_params(uint64_t seed) {
  std::vector<std::vector<at::Tensor>> out;
  for (size_t g = 0; g < kSizes.size(); ++g) out.push_back(make_params(kSizes[g], seed + g));
  return out;
}

void feed(Optimizer& opt, int64_t step) {
  size_t k = 0;
  for (size_t g = 0; g < opt.num_groups(); ++g) {
    for (size_t i = 0; i < opt.num_params(g); ++i, ++k) {
      opt.set_grad(g, i, grad_at(opt.param(g, i).param.numel(), step, k));
    }
  }
}

TEST(OptimizerState, LayoutMirrorsTorch) {
  auto params = fresh_params(1);
  auto groups = adam_groups(params);
  groups[2].params[0].grad = at::Tensor();  // never stepped: no state
  FusedAdam adam(std::move(groups));
  for (size_t g = 0; g < 2; ++g) {
    for (size_t i = 0; i < adam.num_params(g); ++i)
      adam.set_grad(g, i, at::ones_like(params[g][i]));
  }
  adam.step();
  adam.step();
  const OptimizerState s = adam.state_dict();
  EXPECT_EQ(s.optimizer, "FusedAdam");
  ASSERT_EQ(s.param_groups.size(), 3u);
  EXPECT_EQ(s.param_groups[0].params, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(s.param_groups[1].params, (std::vector<int64_t>{2}));
  EXPECT_EQ(s.param_groups[2].params, (std::vector<int64_t>{3}));
  EXPECT_EQ(s.param_groups[1].adam.lr, 2e-2);
  EXPECT_FALSE(s.param_groups[1].adam.adam_w_mode);
  EXPECT_FALSE(s.param_groups[2].adam.bias_correction);
  ASSERT_EQ(s.state.size(), 3u);  // param 3 has no state yet
  EXPECT_EQ(s.state.count(3), 0u);
  EXPECT_EQ(s.state.at(0).step, 2);
  EXPECT_EQ(s.state.at(2).exp_avg.sizes(), params[1][0].sizes());
  EXPECT_TRUE(s.state.at(1).exp_avg_sq.is_same(adam.exp_avg_sq(0, 1)));  // aliases, like torch
}

TEST(OptimizerState, AdamRoundTripMidTrainingContinuesBitIdentically) {
  auto a_params = fresh_params(2);
  FusedAdam a(adam_groups(a_params));
  for (int64_t s = 1; s <= 30; ++s) {
    feed(a, s);
    a.step();
  }
  const OptimizerState saved = deep_copy(a.state_dict());
  std::vector<std::vector<at::Tensor>> b_params;
  for (const auto& g : a_params) b_params.push_back(test::clone_all(g));
  FusedAdam b(adam_groups(b_params, /*lr_scale=*/7.0));  // other lrs: restored by the load
  b.load_state_dict(saved);
  for (size_t g = 0; g < 3; ++g) {
    EXPECT_EQ(b.step_count(g), 30);
    EXPECT_EQ(b.lr(g), a.lr(g));
  }
  for (int64_t s = 31; s <= 60; ++s) {
    feed(a, s);
    feed(b, s);
    a.step();
    b.step();
  }
  for (size_t g = 0; g < 3; ++g) {
    for (size_t i = 0; i < a.num_params(g); ++i) {
      EXPECT_TRUE(bit_equal(a.param(g, i).param, b.param(g, i).param)) << g << "/" << i;
      EXPECT_TRUE(bit_equal(a.param(g, i).param_copy, b.param(g, i).param_copy));
      EXPECT_TRUE(bit_equal(a.exp_avg(g, i), b.exp_avg(g, i)));
      EXPECT_TRUE(bit_equal(a.exp_avg_sq(g, i), b.exp_avg_sq(g, i)));
    }
  }
}

TEST(OptimizerState, SgdRoundTripMidTrainingContinuesBitIdentically) {
  auto make = [](const std::vector<std::vector<at::Tensor>>& params) {
    std::vector<SgdParamGroup> groups;
    for (size_t g = 0; g < params.size(); ++g) {
      SgdParamGroup group;
      group.options.lr = 0.1;
      group.options.momentum = g == 1 ? 0.0 : 0.9;
      group.options.nesterov = g == 2;
      group.options.weight_decay = 0.01;
      for (const auto& p : params[g]) group.params.push_back({p});
      groups.push_back(std::move(group));
    }
    return std::make_unique<Sgd>(std::move(groups));
  };
  auto a_params = fresh_params(3);
  auto a = make(a_params);
  for (int64_t s = 1; s <= 10; ++s) {
    feed(*a, s);
    a->step();
  }
  const OptimizerState saved = deep_copy(a->state_dict());
  EXPECT_EQ(saved.state.count(2), 0u);  // no momentum: no buffer, no state (torch)
  std::vector<std::vector<at::Tensor>> b_params;
  for (const auto& g : a_params) b_params.push_back(test::clone_all(g));
  auto b = make(b_params);
  b->load_state_dict(saved);
  for (int64_t s = 11; s <= 20; ++s) {
    feed(*a, s);
    feed(*b, s);
    a->step();
    b->step();
  }
  for (size_t g = 0; g < 3; ++g) {
    for (size_t i = 0; i < a->num_params(g); ++i) {
      EXPECT_TRUE(bit_equal(a->param(g, i).param, b->param(g, i).param)) << g << "/" << i;
    }
  }
}

class StateValidation : public ::testing::Test {
 protected:
  void SetUp() override {
    params_ = fresh_params(4);
    adam_ = std::make_unique<FusedAdam>(adam_groups(params_));
    for (int64_t s = 1; s <= 3; ++s) {
      feed(*adam_, s);
      adam_->step();
    }
    good_ = deep_copy(adam_->state_dict());
  }

  // Loading `bad` must throw a CheckpointError containing `needle` and change nothing.
  void expect_rejected(const OptimizerState& bad, const std::string& needle) {
    const OptimizerState before = deep_copy(adam_->state_dict());
    try {
      adam_->load_state_dict(bad);
      ADD_FAILURE() << "no error; expected one containing '" << needle << "'";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    const OptimizerState after = adam_->state_dict();
    for (size_t g = 0; g < 3; ++g) {
      EXPECT_EQ(adam_->step_count(g), 3);
      EXPECT_EQ(after.param_groups[g].adam.lr, before.param_groups[g].adam.lr);
    }
    for (const auto& [k, ps] : before.state) {
      EXPECT_TRUE(bit_equal(after.state.at(k).exp_avg, ps.exp_avg)) << "param " << k;
    }
  }

  std::vector<std::vector<at::Tensor>> params_;
  std::unique_ptr<FusedAdam> adam_;
  OptimizerState good_;
};

TEST_F(StateValidation, RejectsMismatchesNamingGroupAndParam) {
  OptimizerState s = good_;
  s.optimizer = "SGD";
  expect_rejected(s, "optimizer state is for 'SGD', this optimizer is FusedAdam");
  s = good_;
  s.param_groups.pop_back();
  expect_rejected(s, "optimizer state has 2 param groups, this optimizer has 3");
  s = good_;
  s.param_groups[0].params.push_back(9);
  expect_rejected(s, "param group 0 has 3 params in the optimizer state, 2 here");
  s = good_;
  s.state.at(1).exp_avg = at::zeros({8});
  expect_rejected(s,
                  "param group 0 param 1: exp_avg has shape [8] (8 elements), the param has "
                  "shape [7] (7)");
  s = good_;
  s.state.at(3).exp_avg_sq = at::Tensor();
  expect_rejected(s, "param group 2 param 0: exp_avg_sq is missing");
  s = good_;
  s.state.at(2).exp_avg = at::zeros({3}, at::kLong);
  expect_rejected(s, "param group 1 param 0: exp_avg must be a floating-point tensor");
  s = good_;
  s.state[17] = s.state.at(0);
  expect_rejected(s, "state for param index 17, which is in no param group");
  s = good_;
  s.param_groups[2].adam.beta2 = 1.5;
  expect_rejected(s, "param group 2 of the optimizer state: invalid beta2 1.5");
  s = good_;
  s.state.at(0).step = -1;
  expect_rejected(s, "step -1 is negative");
  s = good_;
  s.param_groups[1].params = {0};
  expect_rejected(s, "lists param index 0 twice");
}

TEST_F(StateValidation, ConvertsDtypesAndTakesTheLastParamsStep) {
  OptimizerState s = good_;
  s.state.at(0).exp_avg = s.state.at(0).exp_avg.to(at::kDouble);
  s.state.at(0).step = 0;  // DeepSpeed increments only the last param's step (spec §6.1)
  s.state.at(1).step = 5;
  s.state.erase(3);  // group 2 restarts
  adam_->load_state_dict(s);
  EXPECT_EQ(adam_->step_count(0), 5);
  EXPECT_EQ(adam_->step_count(2), 0);
  EXPECT_FALSE(adam_->exp_avg(2, 0).defined());
  EXPECT_EQ(adam_->exp_avg(0, 0).scalar_type(), at::kFloat);
  EXPECT_TRUE(adam_->exp_avg(0, 0).equal(good_.state.at(0).exp_avg));
}

}  // namespace
}  // namespace zrt::optim
