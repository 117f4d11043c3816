// Frozen parameters under ZeRO-3 (Note [Frozen parameters under ZeRO-3], world sizes 1-4): a
// stack whose input unit is frozen whole and whose blocks mix a frozen weight with trainable
// biases and scales, as a LoRA fine-tune mixes a frozen base with adapters. The frozen parameters
// are partitioned (no storage between uses, 1/N of their bytes at rest), training equals stage 0
// on the same batches and never moves them, and checkpoints write DeepSpeed's
// frozen_param_fragments and load them back — at the same layout bit for bit, into stage 2, and
// through DeepSpeed's own zero_to_fp32. With zero_quantized_nontrainable_weights the frozen
// partitions are int8 (Note [Quantized frozen partitions]): the model computes with their
// dequantized values and a resume into the same base is bit for bit.
#include <filesystem>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "checkpoint/consolidate.h"
#include "checkpoint/layout.h"
#include "checkpoint/manifest.h"
#include "checkpoint/pt/pt_file.h"
#include "checkpoint/value_view.h"
#include "core/shard.h"
#include "runtime/gathered_parameters.h"
#include "runtime/initialize.h"
#include "runtime/model_states.h"
#include "tests/support/mpi_world.h"
#include "tests/support/python.h"
#include "tests/support/run_command.h"
#include "tests/support/tiny_model.h"
#include "zero/stage3_layout.h"
#include "zero/zeropp.h"

namespace zrt {
namespace {

using ckpt::Value;

std::shared_ptr<comm::Comm> world_ptr() {
  return std::shared_ptr<comm::Comm>(&test::world(), [](comm::Comm*) {});
}

Json config(int stage) {
  return {{"train_micro_batch_size_per_gpu", 4},
          {"gradient_accumulation_steps", 1},
          {"gradient_clipping", 1.0},
          {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 0.01}, {"weight_decay", 0.01}}}}},
          {"zero_optimization",
           {{"stage", stage},
            {"stage3_param_persistence_threshold", 0},
            {"stage3_max_reuse_distance", 0}}}};
}

// TinyStack with the input unit frozen whole and each block's weight frozen; `scale` multiplies
// the frozen values (a model whose frozen weights differ from the checkpoint's).
std::shared_ptr<test::TinyStackImpl> frozen_stack(float scale = 1.0f) {
  auto model = std::make_shared<test::TinyStackImpl>(true);
  torch::NoGradGuard no_grad;
  for (auto& p : model->named_parameters()) {
    const std::string& n = p.key();
    if (n.rfind("input.", 0) == 0 || n.find(".fc.weight") != std::string::npos) {
      p.value().requires_grad_(false);
      p.value().mul_(scale);
    }
  }
  return model;
}

std::unique_ptr<Engine> make(std::shared_ptr<test::TinyStackImpl> model, const Json& cfg) {
  InitializeOptions io;
  io.comm = world_ptr();
  return initialize(std::move(model), cfg, io);
}

void train_step(Engine& engine, test::TinyStackImpl& model, int step) {
  auto [x, y] = test::tiny_batch(test::world().rank(), step);
  engine.backward(torch::mse_loss(model.forward(x), y));
  engine.step();
}

std::map<std::string, at::Tensor> weights(Engine& engine, torch::nn::Module& model) {
  GatheredParameters access(engine);
  std::map<std::string, at::Tensor> out;
  for (const auto& p : model.named_parameters()) out[p.key()] = p.value().detach().clone();
  return out;
}

bool is_frozen(const std::string& name) {
  return name.rfind("input.", 0) == 0 || name.find(".fc.weight") != std::string::npos;
}

TEST(FrozenStage3, PartitionedAndTrainsLikeStageZero) {
  comm::Comm& w = test::world();
  const int n = w.size();
  auto model0 = frozen_stack();
  auto e0 = make(model0, config(0));
  const auto initial = weights(*e0, *model0);
  auto model3 = frozen_stack();
  auto e3 = make(model3, config(3));
  // At rest every parameter in a unit has no storage, and the states hold 1/N of every one.
  int64_t partition_bytes = 0;
  int frozen = 0;
  for (const auto& p : model3->named_parameters()) {
    partition_bytes += param_partition_size(p.value().numel(), n) * 4;
    if (!is_frozen(p.key())) continue;
    ++frozen;
    EXPECT_FALSE(p.value().requires_grad()) << p.key();
    if (n > 1) EXPECT_FALSE(zero::storage_allocated(p.value())) << p.key() << " released at rest";
  }
  EXPECT_EQ(frozen, 5);  // input.weight, input.bias, h{0,1,2}.fc.weight
  EXPECT_EQ(e3->model_states().memory().params, partition_bytes);
  ASSERT_EQ(e3->model_states().frozen_partitions().size(), 1u);
  EXPECT_EQ(e3->model_states().frozen_partitions()[0].params.size(), 5u);
  EXPECT_TRUE(e0->model_states().frozen_partitions().empty());
  for (int s = 0; s < 3; ++s) {
    train_step(*e0, *model0, s);
    train_step(*e3, *model3, s);
    for (const auto& p : model3->named_parameters()) {
      if (is_frozen(p.key()) && n > 1) {
        EXPECT_FALSE(zero::storage_allocated(p.value())) << p.key() << " released after step " << s;
      }
    }
  }
  const auto w0 = weights(*e0, *model0);
  const auto w3 = weights(*e3, *model3);
  for (const auto& [name, t] : w0) {
    EXPECT_TRUE(at::allclose(w3.at(name), t, 1e-5, 1e-6)) << name;
    if (is_frozen(name)) {
      EXPECT_TRUE(at::equal(w3.at(name), initial.at(name))) << name << " never moves";
    } else {
      EXPECT_FALSE(at::equal(w3.at(name), initial.at(name))) << name << " trains";
    }
  }
}

TEST(FrozenStage3, CheckpointsHoldFragmentsAndLoadBack) {
  comm::Comm& w = test::world();
  const int n = w.size();
  const std::string dir = test::shared_temp_dir(w, "ckpt_frozen");
  auto model = frozen_stack();
  auto engine = make(model, config(3));
  train_step(*engine, *model, 0);
  engine->save_checkpoint(dir);
  const auto saved = weights(*engine, *model);
  // This rank's file: empty module tensors, the frozen shapes, and its partition of each frozen
  // parameter as the fragment.
  const std::string tag_dir = ckpt::tag_path(dir, *ckpt::read_latest(dir));
  const Value ms = ckpt::load_pt(tag_dir + "/" + ckpt::model_states_name_of(3, w.rank()));
  const ckpt::ValueView v(ms, "model states");
  for (const auto& [key, t] : v["module"].as_dict()) {
    EXPECT_EQ(t.as_tensor().numel(), 0) << key.as_str();
  }
  EXPECT_EQ(v["frozen_param_shapes"].as_dict().size(), 5u);
  for (const auto& [name, value] : saved) {
    if (!is_frozen(name)) continue;
    const at::Tensor frag = v["frozen_param_fragments"][name].as_tensor();
    const ShardInfo mine = param_shard(value.numel(), w.rank(), n);
    ASSERT_EQ(frag.numel(), param_partition_size(value.numel(), n)) << name;
    EXPECT_TRUE(at::equal(frag.narrow(0, 0, mine.size),
                          value.reshape({-1}).narrow(0, mine.offset, mine.size)))
        << name;
  }
  for (int s = 1; s < 3; ++s) train_step(*engine, *model, s);
  const auto straight = weights(*engine, *model);
  // Stage 3 at the same world size, from a model whose frozen weights differ: bit for bit.
  // Stage 2 (frozen whole, the fragments of every rank's file): to summation order.
  for (int stage : {3, 2}) {
    auto other = frozen_stack(2.0f);
    auto resumed = make(other, config(stage));
    ASSERT_TRUE(resumed->load_checkpoint(dir).has_value());
    for (const auto& [name, t] : weights(*resumed, *other)) {
      if (is_frozen(name)) EXPECT_TRUE(at::equal(t, saved.at(name))) << "stage " << stage << name;
    }
    for (int s = 1; s < 3; ++s) train_step(*resumed, *other, s);
    for (const auto& [name, t] : weights(*resumed, *other)) {
      if (stage == 3) {
        EXPECT_TRUE(at::equal(t, straight.at(name))) << "stage 3 resume " << name;
      } else {
        EXPECT_TRUE(at::allclose(t, straight.at(name), 1e-5, 1e-6)) << "stage 2 resume " << name;
      }
    }
  }
  // Consolidated, by ZeroRT and by DeepSpeed's zero_to_fp32: the frozen weights come back.
  std::map<std::string, at::Tensor> full;
  for (auto& [name, t] : ckpt::load_fp32_state_dict(dir)) full[name] = t;
  for (const auto& [name, value] : saved) {
    EXPECT_TRUE(at::equal(full.at(name).to(at::kFloat), is_frozen(name) ? value : full.at(name)))
        << name;
  }
  const bool deepspeed = test::python_can_import("deepspeed");
  EXPECT_TRUE(deepspeed || !test::running_in_ci()) << "the venv lacks deepspeed";
  if (w.rank() == 0 && deepspeed) {
    const std::string out = dir + "/ds_fp32.pt";
    const auto r = test::run_python(
        "import sys, torch\n"
        "from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint\n"
        "sd = get_fp32_state_dict_from_zero_checkpoint(sys.argv[1])\n"
        "torch.save({k: v.contiguous() for k, v in sd.items()}, sys.argv[2])\n",
        dir + " " + out);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const Value ds = r.exit_code == 0 ? ckpt::load_pt(out) : Value::dict();
    for (const auto& [name, value] : r.exit_code == 0 ? saved : decltype(saved){}) {
      EXPECT_TRUE(at::equal(ds.at(name).as_tensor(), full.at(name))) << "DeepSpeed's " << name;
    }
  }
  w.barrier();
  if (w.rank() == 0) std::filesystem::remove_all(dir);
}

// What rank r's quantized partition of `value` dequantizes to, for every rank, put together.
at::Tensor quantized_round_trip(const at::Tensor& value, int n) {
  const at::Tensor flat = value.reshape({-1});
  at::Tensor out = at::empty_like(flat);
  for (int r = 0; r < n; ++r) {
    const ShardInfo s = param_shard(value.numel(), r, n);
    const zero::QuantizedChunk chunk =
        zero::QuantizedChunk::for_numel(param_partition_size(value.numel(), n));
    at::Tensor part = at::zeros({chunk.padded});
    part.narrow(0, 0, s.size).copy_(flat.narrow(0, s.offset, s.size));
    at::Tensor packed = at::empty({chunk.bytes}, at::kByte);
    chunk.pack(part, packed);
    chunk.unpack(packed, part);
    out.narrow(0, s.offset, s.size).copy_(part.narrow(0, 0, s.size));
  }
  return out.view(value.sizes());
}

TEST(FrozenStage3, QuantizedPartitionsTrainWithTheirDequantizedValues) {
  comm::Comm& w = test::world();
  const int n = w.size();
  Json cfg = config(3);
  cfg["zero_optimization"]["zero_quantized_nontrainable_weights"] = true;
  // The vectors of 7 (input.bias, frozen, among them) stay gathered and unquantized.
  cfg["zero_optimization"]["stage3_param_persistence_threshold"] = 7;
  auto model = frozen_stack();
  auto engine = make(model, cfg);
  // At rest: trainable partitions in fp32, frozen ones as codes + scales (one rank: every
  // parameter stays whole, nothing is quantized).
  int64_t expected_bytes = 0;
  for (const auto& p : model->named_parameters()) {
    const int64_t pn = param_partition_size(p.value().numel(), n);
    const bool quantized = is_frozen(p.key()) && n > 1 && p.value().numel() > 7;
    expected_bytes += quantized ? zero::QuantizedChunk::for_numel(pn).bytes : pn * 4;
  }
  EXPECT_EQ(engine->model_states().memory().params, expected_bytes);
  // The model computes with the dequantized partitions: a stage-0 engine given those values
  // trains alike.
  auto reference = frozen_stack();
  {
    torch::NoGradGuard no_grad;
    for (auto& p : reference->named_parameters()) {
      if (is_frozen(p.key()) && n > 1 && p.value().numel() > 7)
        p.value().copy_(quantized_round_trip(p.value(), n));
    }
  }
  auto e0 = make(reference, config(0));
  const auto dequantized = weights(*e0, *reference);
  const auto initial = weights(*engine, *model);
  bool moved = false;
  for (const auto& [name, t] : initial) {
    EXPECT_TRUE(at::equal(t, dequantized.at(name))) << name;
    if (is_frozen(name)) moved = moved || !at::equal(t, frozen_stack()->named_parameters()[name]);
  }
  EXPECT_EQ(moved, n > 1) << "quantization changes the frozen values on more than one rank";
  const std::string dir = test::shared_temp_dir(w, "ckpt_frozen_q");
  train_step(*engine, *model, 0);
  train_step(*e0, *reference, 0);
  engine->save_checkpoint(dir);
  const auto saved = weights(*engine, *model);
  for (int s = 1; s < 3; ++s) {
    train_step(*engine, *model, s);
    train_step(*e0, *reference, s);
  }
  const auto straight = weights(*engine, *model);
  for (const auto& [name, t] : weights(*e0, *reference)) {
    EXPECT_TRUE(at::allclose(straight.at(name), t, 1e-5, 1e-6)) << name;
  }
  // Resumed into the same base: bit for bit. Into another base: the checkpoint's values,
  // quantized afresh (within one quantization step).
  for (float scale : {1.0f, 2.0f}) {
    auto other = frozen_stack(scale);
    auto resumed = make(other, cfg);
    ASSERT_TRUE(resumed->load_checkpoint(dir).has_value());
    for (const auto& [name, t] : weights(*resumed, *other)) {
      const at::Tensor& want = saved.at(name);
      if (scale == 1.0f || !is_frozen(name)) {
        EXPECT_TRUE(at::equal(t, want)) << scale << " " << name;
      } else {
        const double step = want.abs().max().item<double>() / 128 * (1 + 1e-5);  // + roundings
        EXPECT_TRUE(at::allclose(t, want, 0, step))
            << name << " off by " << (t - want).abs().max().item<double>() << ", step " << step;
      }
    }
    if (scale != 1.0f) continue;
    for (int s = 1; s < 3; ++s) train_step(*resumed, *other, s);
    for (const auto& [name, t] : weights(*resumed, *other)) {
      EXPECT_TRUE(at::equal(t, straight.at(name))) << "resume " << name;
    }
  }
  w.barrier();
  if (w.rank() == 0) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace zrt
