// zrt::checkpoint on its own (no engine): gradients of inputs and parameters bitwise equal to the
// plain run, dropout included (the RNG state is restored for the recompute and put back after);
// inputs that do not require grad, several outputs, an output used twice, a ShardUnit made a
// checkpointed region with one call, no graph kept inside a region, and a unit's several outputs
// calling its pre_backward once (checkpointed or not).
#include "zero/activation_checkpoint.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tests/support/tensor_compare.h"
#include "tests/support/tiny_model.h"
#include "zero/shard_unit.h"
#include "zrt/build_config.h"

#if ZRT_TORCH_HAS_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace zrt {
namespace {

using test::bit_equal;

struct DropBlockImpl : test::DropBlockImpl {
  DropBlockImpl() : test::DropBlockImpl(6, 0.3) {}
};

struct Grads {
  std::vector<at::Tensor> params;
  at::Tensor input;
  double after = 0;  // a draw from the generator after the backward
};

// One forward and backward of two blocks (checkpointed or not) from the same seed.
template <typename Forward>
Grads run(DropBlockImpl& a, DropBlockImpl& b, Forward forward, bool input_grad = true) {
  for (auto& p : a.parameters()) p.mutable_grad() = at::Tensor();
  for (auto& p : b.parameters()) p.mutable_grad() = at::Tensor();
  torch::manual_seed(7);
  at::Tensor x = torch::linspace(-1, 1, 4 * 6).view({4, 6});
  if (input_grad) x.requires_grad_(true);
  at::Tensor y = forward(x);
  (y * y).sum().backward();
  Grads g;
  for (auto* m : {&a, &b}) {
    for (auto& p : m->parameters()) g.params.push_back(p.grad().clone());
  }
  if (input_grad) g.input = x.grad().clone();
  g.after = torch::rand({1}).item<double>();
  return g;
}

void expect_same(const Grads& plain, const Grads& ckpt) {
  ASSERT_EQ(plain.params.size(), ckpt.params.size());
  for (size_t i = 0; i < plain.params.size(); ++i) {
    EXPECT_TRUE(bit_equal(plain.params[i], ckpt.params[i])) << "parameter " << i;
  }
  if (plain.input.defined()) EXPECT_TRUE(bit_equal(plain.input, ckpt.input));
  EXPECT_EQ(plain.after, ckpt.after) << "the RNG sequence after the step is the plain run's";
}

TEST(Checkpoint, GradientsAreBitwiseEqualWithDropout) {
  DropBlockImpl a, b;
  const Grads plain = run(a, b, [&](const at::Tensor& x) { return b.forward(a.forward(x)); });
  const Grads ckpt = run(a, b, [&](const at::Tensor& x) {
    at::Tensor h = checkpoint([&](const at::Tensor& v) { return a.forward(v); }, x);
    return checkpoint([&](const at::Tensor& v) { return b.forward(v); }, h);
  });
  expect_same(plain, ckpt);
  EXPECT_FALSE(a.parameters()[0].grad().abs().sum().item<double>() == 0);
}

TEST(Checkpoint, InputsWithoutGradStillGiveParameterGradients) {
  DropBlockImpl a, b;
  auto plain_fwd = [&](const at::Tensor& x) { return b.forward(a.forward(x)); };
  const Grads plain = run(a, b, plain_fwd, /*input_grad=*/false);
  const Grads ckpt = run(
      a, b,
      [&](const at::Tensor& x) {
        return checkpoint([&](const at::Tensor& v) { return b.forward(a.forward(v)); }, x);
      },
      /*input_grad=*/false);
  expect_same(plain, ckpt);
}

// Arguments that carry no gradient pass into the region as they were: an integer tensor (a
// packed batch's document ids) and an undefined one (none given).
TEST(Checkpoint, UndefinedAndIntegerArgumentsPassThrough) {
  DropBlockImpl a, b;
  const at::Tensor order = torch::tensor({2, 0, 1}, torch::kLong);
  auto region = [&](const at::Tensor& x, const at::Tensor& rows, const at::Tensor& none) {
    EXPECT_FALSE(none.defined());
    return b.forward(a.forward(x)).index_select(0, rows);
  };
  const Grads plain = run(a, b, [&](const at::Tensor& x) { return region(x, order, {}); });
  const Grads ckpt = run(a, b, [&](const at::Tensor& x) {
    return checkpoint(region, x, order, at::Tensor());
  });
  expect_same(plain, ckpt);
}

TEST(Checkpoint, SeveralOutputsAndAnOutputUsedTwice) {
  DropBlockImpl a, b;
  auto two = [&](const at::Tensor& x) { return std::make_tuple(a.forward(x), b.forward(x)); };
  const Grads plain = run(a, b, [&](const at::Tensor& x) {
    auto [p, q] = two(x);
    return p * q + p;  // p used twice
  });
  const Grads ckpt = run(a, b, [&](const at::Tensor& x) {
    auto [p, q] = checkpoint(two, x);
    return p * q + p;
  });
  expect_same(plain, ckpt);
}

TEST(Checkpoint, AShardUnitIsARegionWithOneCall) {
  struct Stack : torch::nn::Module {
    Stack() {
      for (int i = 0; i < 3; ++i) {
        blocks.push_back(
            register_module("b" + std::to_string(i), std::make_shared<ShardUnit<DropBlockImpl>>()));
      }
    }
    std::vector<std::shared_ptr<ShardUnit<DropBlockImpl>>> blocks;
  };
  Stack s;
  auto forward = [&](const at::Tensor& x) {
    at::Tensor h = x;
    for (auto& blk : s.blocks) h = blk->forward(h);
    return h;
  };
  DropBlockImpl& a = *s.blocks[0];
  DropBlockImpl& b = *s.blocks[1];
  const Grads plain = run(a, b, forward);
  const at::Tensor plain_last = s.blocks[2]->fc1->weight.grad().clone();
  for (auto& p : s.parameters()) p.mutable_grad() = at::Tensor();
  EXPECT_EQ(enable_activation_checkpointing(s), 3);
  reset_recompute_stats();
  const Grads ckpt = run(a, b, forward);
  EXPECT_TRUE(bit_equal(plain_last, s.blocks[2]->fc1->weight.grad()));
  expect_same(plain, ckpt);
  EXPECT_EQ(recompute_stats().recomputes, 3) << "each unit recomputed once";
}

// A unit returning (hidden, router logits), as a sparse MoE layer does, whose second output feeds
// a loss term that is differentiated long before the first output's gradient arrives: the unit's
// pre_backward (the gather of its parameters) runs once, after both gradients are in — not once
// per output, and not early, when the other units' backward is still to come.
TEST(Checkpoint, AUnitsSeveralOutputsCallPreBackwardOnce) {
  struct TwoOut : torch::nn::Module {
    explicit TwoOut(bool second = true) : second(second) {
      fc = register_module("fc", torch::nn::Linear(6, 6));
    }
    // The second output undefined when there is none (a dense layer's router logits).
    std::tuple<at::Tensor, at::Tensor> forward(const at::Tensor& x) {
      const at::Tensor h = fc->forward(x);
      return {torch::tanh(h), second ? h.sum(-1) : at::Tensor()};
    }
    bool second;
    torch::nn::Linear fc{nullptr};
  };
  struct Hooks : zero::UnitHooks {
    void pre_forward(int) override {}
    void post_forward(int) override {}
    void pre_backward(int unit) override { calls.push_back(unit); }
    std::vector<int> calls;
  };
  for (const bool checkpointed : {false, true}) {
    SCOPED_TRACE(checkpointed ? "checkpointed" : "plain");
    Hooks hooks;
    ShardUnit<TwoOut> first, second, dense(false);
    first.attach(&hooks, 0);
    second.attach(&hooks, 1);
    dense.attach(&hooks, 2);
    for (auto* u : {&first, &second, &dense}) u->set_checkpointing(checkpointed);
    const at::Tensor x = torch::randn({3, 6}, torch::requires_grad());
    auto [h1, aux1] = first.forward(x);
    auto [h2, aux2] = second.forward(h1);
    auto [h3, none] = dense.forward(h2);
    EXPECT_FALSE(none.defined());
    const at::Tensor aux = aux1.sum() + aux2.sum();  // reaches both units at once
    (h3.pow(2).sum() + aux).backward();
    EXPECT_EQ(hooks.calls, (std::vector<int>{2, 1, 0})) << "once per unit, in backward order";
    EXPECT_TRUE(first.fc->weight.grad().defined());
  }
}

TEST(Checkpoint, KeepsNoGraphInsideARegionAndNoneOutsideGradMode) {
  DropBlockImpl a, b;
  at::Tensor x = torch::ones({2, 6}, torch::requires_grad());
  at::Tensor y = checkpoint([&](const at::Tensor& v) { return a.forward(v); }, x);
  ASSERT_TRUE(y.requires_grad());
  // The only node between y and x is the checkpoint's: no Linear/GELU nodes were recorded.
  const auto next = y.grad_fn()->next_edges();
  for (const auto& e : next) {
    if (e.function) EXPECT_EQ(e.function->name().find("Addmm"), std::string::npos);
  }
  EXPECT_NE(y.grad_fn()->name().find("CheckpointFunction"), std::string::npos)
      << y.grad_fn()->name();
  at::NoGradGuard no_grad;
  EXPECT_FALSE(checkpoint([&](const at::Tensor& v) { return a.forward(v); }, x).requires_grad());
}

#if ZRT_TORCH_HAS_CUDA
int64_t cuda_allocated_bytes() {
  // Index 0 is the aggregate over the pools in every LibTorch 2.x (the enum's namespace moved).
  return c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].current;
}
#endif

// A CUDA region under cpu_checkpointing (the GPU check runs it): the inner region's output, saved
// only as the outer region's input, waits for the backward in host memory, so the device holds
// its bytes less after the forward; gradients, CUDA dropout included, stay bitwise the plain run's.
TEST(Checkpoint, CpuCheckpointingKeepsCudaInputsInHostMemory) {
#if !ZRT_TORCH_HAS_CUDA
  GTEST_SKIP() << "built without CUDA LibTorch (LibTorch is CPU-only)";
#else
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  DropBlockImpl a, b;
  a.to(torch::kCUDA);
  b.to(torch::kCUDA);
  const int64_t rows = 1 << 14;  // the inner output: rows x 6 floats, 384 KiB
  auto step = [&](bool ckpt, bool on_cpu, int64_t* held) {
    zero::ActivationCheckpointOptions options;
    options.cpu_checkpointing = on_cpu;
    set_activation_checkpointing(options);
    for (auto& p : a.parameters()) p.mutable_grad() = at::Tensor();
    for (auto& p : b.parameters()) p.mutable_grad() = at::Tensor();
    torch::manual_seed(11);
    at::Tensor x = torch::linspace(-1, 1, rows * 6, torch::kCUDA).view({rows, 6});
    x.requires_grad_(true);
    const int64_t before = cuda_allocated_bytes();
    at::Tensor y = ckpt ? checkpoint([&](const at::Tensor& v) { return b.forward(v); },
                                     checkpoint([&](const at::Tensor& v) { return a.forward(v); }, x))
                        : b.forward(a.forward(x));
    *held = cuda_allocated_bytes() - before;
    (y * y).sum().backward();
    std::vector<at::Tensor> grads{x.grad().cpu()};
    for (auto* m : {&a, &b}) {
      for (auto& p : m->parameters()) grads.push_back(p.grad().cpu());
    }
    set_activation_checkpointing({});
    return grads;
  };
  int64_t held_plain = 0, held_gpu = 0, held_cpu = 0;
  const auto plain = step(false, false, &held_plain);
  const auto on_gpu = step(true, false, &held_gpu);
  const auto on_cpu = step(true, true, &held_cpu);
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_TRUE(bit_equal(plain[i], on_gpu[i])) << "tensor " << i;
    EXPECT_TRUE(bit_equal(plain[i], on_cpu[i])) << "tensor " << i;
  }
  EXPECT_LT(held_gpu, held_plain);
  EXPECT_LE(held_cpu, held_gpu - rows * 6 * 4) << "device bytes held after the forward: "
                                               << held_cpu << " with cpu_checkpointing, "
                                               << held_gpu << " without";
#endif
}

}  // namespace
}  // namespace zrt
