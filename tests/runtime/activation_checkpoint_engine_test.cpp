// Activation checkpointing through the engine under mpirun (world sizes 1-4): with every block
// checkpointed, training with dropout gives bitwise the same losses and weights as without, for
// ZeRO stages 0-3 with gradient accumulation, bf16, fp16 and CPU offload, a tied embedding used
// twice per forward under ZeRO-3, and a checkpoint saved and resumed mid-run.
#include <filesystem>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "runtime/gathered_parameters.h"
#include "runtime/initialize.h"
#include "tests/support/mpi_world.h"
#include "tests/support/tensor_compare.h"
#include "tests/support/tiny_model.h"
#include "zero/activation_checkpoint.h"
#include "zero/shard_unit.h"

namespace zrt {
namespace {

struct DropBlockImpl : test::DropBlockImpl {
  DropBlockImpl() : test::DropBlockImpl(8, 0.25) {}
};

struct DropStackImpl : torch::nn::Module {
  explicit DropStackImpl(bool checkpointing) {
    in = register_module("input", torch::nn::Linear(5, 8));
    for (int i = 0; i < 3; ++i) {
      blocks.push_back(
          register_module("h" + std::to_string(i), std::make_shared<ShardUnit<DropBlockImpl>>()));
    }
    out = register_module("output", torch::nn::Linear(8, 3));
    test::fill_by_order(*this, 0.23f, 0.4f);
    if (checkpointing) EXPECT_EQ(enable_activation_checkpointing(*this), 3);
  }
  torch::Tensor forward(torch::Tensor x) {
    x = in->forward(x);
    for (auto& b : blocks) x = b->forward(x);
    return out->forward(x);
  }
  torch::nn::Linear in{nullptr}, out{nullptr};
  std::vector<std::shared_ptr<ShardUnit<DropBlockImpl>>> blocks;
};

struct Case {
  int stage = 0;
  int gas = 1;
  const char* dtype = "fp32";  // fp32, bf16, fp16
  bool offload = false;
};

Json config_for(const Case& c) {
  Json cfg = {
      {"train_micro_batch_size_per_gpu", 4},
      {"gradient_accumulation_steps", c.gas},
      {"gradient_clipping", 1.0},
      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 0.01}, {"weight_decay", 0.01}}}}},
      {"zero_optimization",
       {{"stage", c.stage},
        {"reduce_bucket_size", 50},
        {"allgather_bucket_size", 50},
        {"stage3_param_persistence_threshold", 0},
        {"stage3_prefetch_bucket_size", 100}}}};
  if (std::string(c.dtype) == "bf16") cfg["bf16"] = {{"enabled", true}};
  if (std::string(c.dtype) == "fp16") cfg["fp16"] = {{"enabled", true}, {"initial_scale_power", 8}};
  if (c.offload) cfg["zero_optimization"]["offload_optimizer"] = {{"device", "cpu"}};
  return cfg;
}

std::unique_ptr<Engine> make_engine(std::shared_ptr<torch::nn::Module> model, const Json& cfg) {
  InitializeOptions io;
  io.comm = std::shared_ptr<comm::Comm>(&test::world(), [](comm::Comm*) {});
  return initialize(std::move(model), cfg, io);
}

at::Tensor flat_weights(Engine& engine, torch::nn::Module& model) {
  GatheredParameters access(engine);
  std::vector<at::Tensor> values;
  for (const auto& p : model.parameters()) values.push_back(p.detach().reshape({-1}).clone());
  return at::cat(values);
}

struct Trained {
  std::vector<double> losses;
  at::Tensor weights;
};

// `steps` optimizer steps of `gas` micro-batches each, from step `first` on; every rank its own
// deterministic batch.
void train_steps(Engine& engine, DropStackImpl& model, int first, int steps, Trained* out) {
  const int rank = test::world().rank();
  const int gas = static_cast<int>(engine.gradient_accumulation_steps());
  for (int step = first; step < first + steps; ++step) {
    for (int m = 0; m < gas; ++m) {
      const double k = 0.1 * (rank + 1) + 0.01 * (step * gas + m);
      at::Tensor x = torch::sin(torch::arange(20, torch::kFloat).view({4, 5}) * k);
      at::Tensor y = torch::cos(torch::arange(12, torch::kFloat).view({4, 3}) * k);
      at::Tensor loss =
          torch::mse_loss(model.forward(engine.to_model_dtype(x)).to(torch::kFloat), y);
      engine.backward(loss);
      engine.step();
      out->losses.push_back(loss.item<double>());
    }
  }
}

Trained train(const Case& c, bool checkpointing) {
  auto model = std::make_shared<DropStackImpl>(checkpointing);
  auto engine = make_engine(model, config_for(c));
  torch::manual_seed(1000 + test::world().rank());  // the dropout masks
  Trained t;
  train_steps(*engine, *model, 0, 4, &t);
  t.weights = flat_weights(*engine, *model);
  return t;
}

void expect_bitwise(const Trained& plain, const Trained& ckpt, const std::string& what) {
  ASSERT_EQ(plain.losses.size(), ckpt.losses.size()) << what;
  for (size_t i = 0; i < plain.losses.size(); ++i) {
    EXPECT_EQ(plain.losses[i], ckpt.losses[i]) << what << ", micro-step " << i;
  }
  EXPECT_TRUE(test::bit_equal(plain.weights, ckpt.weights)) << what;
}

TEST(ActivationCheckpointing, BitwiseEqualToThePlainRunAtEveryStage) {
  for (const Case& c : {Case{0, 2}, Case{1, 1}, Case{2, 2}, Case{3, 2}, Case{3, 1, "bf16"},
                        Case{1, 2, "fp16"}, Case{2, 1, "fp32", /*offload=*/true}}) {
    const std::string what =
        str("stage ", c.stage, " gas ", c.gas, " ", c.dtype, c.offload ? " offload" : "");
    reset_recompute_stats();
    const Trained ckpt = train(c, true);
    EXPECT_EQ(recompute_stats().recomputes, 3 * 4 * c.gas)
        << what << ": every block, every micro-step";
    const Trained plain = train(c, false);
    expect_bitwise(plain, ckpt, what);
    EXPECT_NE(plain.losses.front(), plain.losses.back()) << what << ": it trained";
  }
}

// Note [A unit used several times]: the embedding unit's second use (the tied head, through
// run()) is a checkpointed region too; under ZeRO-3 it is recomputed inside its backward use.
TEST(ActivationCheckpointing, TiedEmbeddingUnderZero3) {
  auto run = [](bool checkpointing) {
    auto model = std::make_shared<test::TiedStackImpl>();
    if (checkpointing) EXPECT_EQ(enable_activation_checkpointing(*model), 4);
    auto engine = make_engine(model, config_for(Case{3, 1}));
    Trained t;
    for (int step = 0; step < 4; ++step) {
      auto [tokens, y] = test::tied_batch(test::world().rank(), step);
      at::Tensor loss =
          torch::cross_entropy_loss(model->forward(tokens).reshape({-1, 11}), y.reshape({-1}));
      engine->backward(loss);
      engine->step();
      t.losses.push_back(loss.item<double>());
    }
    t.weights = flat_weights(*engine, *model);
    return t;
  };
  reset_recompute_stats();
  const Trained ckpt = run(true);
  EXPECT_EQ(recompute_stats().recomputes, 5 * 4) << "the embedding twice, each block once";
  expect_bitwise(run(false), ckpt, "tied stage 3");
}

TEST(ActivationCheckpointing, ResumedMidRunContinuesBitwise) {
  const std::string dir = test::shared_temp_dir(test::world(), "ac_resume");
  const Case c{2, 2};
  Trained straight;
  {
    auto model = std::make_shared<DropStackImpl>(true);
    auto engine = make_engine(model, config_for(c));
    torch::manual_seed(1000 + test::world().rank());
    train_steps(*engine, *model, 0, 2, &straight);
    engine->save_checkpoint(dir);
    train_steps(*engine, *model, 2, 2, &straight);
    straight.weights = flat_weights(*engine, *model);
  }
  auto model = std::make_shared<DropStackImpl>(true);
  auto engine = make_engine(model, config_for(c));
  ASSERT_TRUE(engine->load_checkpoint(dir).has_value());
  Trained resumed;
  train_steps(*engine, *model, 2, 2, &resumed);
  resumed.weights = flat_weights(*engine, *model);
  ASSERT_EQ(resumed.losses.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(straight.losses[4 + i], resumed.losses[i]) << i;
  EXPECT_TRUE(test::bit_equal(straight.weights, resumed.weights));
}

}  // namespace
}  // namespace zrt
