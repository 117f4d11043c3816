// SGD against torch::optim::SGD over 50 steps for momentum, dampening, nesterov and weight decay
// combinations (the same ATen operations in the same order, so bit-identical), plus grad_scale,
// a bf16 copy, and option validation; parameters above a chunk are updated a chunk at a time
// with the same bits.
#include "optim/sgd.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/error.h"
#include "optim_test_util.h"

namespace zrt::optim {
namespace {

using test::grad_at;
using test::make_params;
using zrt::test::bit_equal;

TEST(Sgd, MatchesTorchSgdBitwise) {
  struct Case {
    double momentum, dampening, weight_decay;
    bool nesterov;
  };
  const std::vector<Case> cases = {{0.0, 0.0, 0.0, false},
                                   {0.9, 0.0, 0.0, false},
                                   {0.9, 0.1, 1e-2, false},
                                   {0.8, 0.0, 5e-3, true},
                                   {0.0, 0.0, 0.1, false}};
  // The last size runs in three chunks (Note [SGD in chunks]): still torch's bits.
  const std::vector<int64_t> sizes = {0, 1, 17, 1023, 100003, (int64_t{1} << 21) + 5};
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "momentum " << c.momentum << " dampening " << c.dampening
                                      << " wd " << c.weight_decay << " nesterov " << c.nesterov);
    const auto params = make_params(sizes, 21);
    std::vector<at::Tensor> ours = test::clone_all(params), theirs = test::clone_all(params);
    SgdParamGroup group;
    group.options.lr = 0.05;
    group.options.momentum = c.momentum;
    group.options.dampening = c.dampening;
    group.options.weight_decay = c.weight_decay;
    group.options.nesterov = c.nesterov;
    for (const auto& p : ours) group.params.push_back({p});
    Sgd sgd({group});
    torch::optim::SGD torch_sgd(theirs, torch::optim::SGDOptions(0.05)
                                            .momentum(c.momentum)
                                            .dampening(c.dampening)
                                            .weight_decay(c.weight_decay)
                                            .nesterov(c.nesterov));
    for (int64_t s = 1; s <= 50; ++s) {
      for (size_t k = 0; k < sizes.size(); ++k) {
        const at::Tensor g = grad_at(sizes[k], s, k);
        sgd.set_grad(0, k, g);
        theirs[k].mutable_grad() = g.clone();
      }
      sgd.step();
      torch_sgd.step();
    }
    for (size_t k = 0; k < sizes.size(); ++k) {
      EXPECT_TRUE(bit_equal(ours[k], theirs[k])) << "size " << sizes[k];
      if (sizes[k] > 0) EXPECT_FALSE(ours[k].equal(params[k]));
    }
    EXPECT_EQ(sgd.step_count(0), 50);
    EXPECT_EQ(sgd.momentum_buffer(0, 2).defined(), c.momentum != 0.0);
  }
}

TEST(Sgd, GradScaleAndCopy) {
  const int64_t n = 999;
  at::Tensor a = make_params({n}, 2)[0], b = a.clone();
  at::Tensor copy = at::empty({n}, at::kHalf);
  SgdOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  Sgd sa({{{{a, {}, copy}}, o}}), sb({{{{b}}, o}});
  for (int64_t s = 1; s <= 5; ++s) {
    const at::Tensor g = grad_at(n, s, 0);
    sa.set_grad(0, 0, (g * 4.0).to(at::kBFloat16));
    sa.step(0.25);
    sb.set_grad(0, 0, g.to(at::kBFloat16).to(at::kFloat));
    sb.step();
  }
  EXPECT_TRUE(bit_equal(a, b));
  EXPECT_TRUE(bit_equal(copy, a.to(at::kHalf)));
}

TEST(Sgd, ValidatesOptionsLikeTorch) {
  const at::Tensor p = at::zeros({3});
  SgdOptions o;
  o.nesterov = true;
  EXPECT_THROW(Sgd({{{{p}}, o}}), Error);  // nesterov needs momentum
  o.momentum = 0.9;
  o.dampening = 0.1;
  EXPECT_THROW(Sgd({{{{p}}, o}}), Error);  // and no dampening
  o.dampening = 0.0;
  Sgd ok({{{{p}}, o}});
  EXPECT_THROW(ok.set_lr(0, -0.1), Error);
  ok.set_lr(0, 0.3);
  EXPECT_EQ(ok.lr(0), 0.3);
}

}  // namespace
}  // namespace zrt::optim
