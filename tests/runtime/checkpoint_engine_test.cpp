// Engine checkpoints under mpirun (world sizes 1–4): exact resume (bit-identical weights, moments,
// loss scaler, LR schedule, counters and RNG), loading at another world size and ZeRO stage
// (continues like the uninterrupted run up to summation order), refusal of incomplete tags,
// module-only loads, save_16bit_model, and Python reading every file (torch.load weights_only,
// DeepSpeed's zero_to_fp32 algorithm giving the trained weights).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "checkpoint/consolidate.h"
#include "checkpoint/layout.h"
#include "checkpoint/manifest.h"
#include "checkpoint/pt/pt_file.h"
#include "checkpoint/universal.h"
#include "comm/local_comm.h"
#include "core/error.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"
#include "runtime/gathered_parameters.h"
#include "runtime/initialize.h"
#include "runtime/model_states.h"
#include "sched/lr_scheduler.h"
#include "tests/support/mpi_world.h"
#include "tests/support/python.h"
#include "tests/support/run_command.h"
#include "tests/support/tiny_model.h"

namespace zrt {
namespace {

using ckpt::Value;

constexpr int kSlots = 12;  // micro-batches per optimizer step, for every world size

std::shared_ptr<comm::Comm> world_ptr() {
  return std::shared_ptr<comm::Comm>(&test::world(), [](comm::Comm*) {});
}

Json config(int stage, bool bf16, int world) {
  Json cfg = {
      {"train_micro_batch_size_per_gpu", 4},
      {"gradient_accumulation_steps", kSlots / world},
      {"gradient_clipping", 1.0},
      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 0.01}, {"weight_decay", 0.01}}}}},
      {"scheduler",
       {{"type", "WarmupDecayLR"},
        {"params",
         {{"warmup_min_lr", 0.001},
          {"warmup_max_lr", 0.01},
          {"warmup_num_steps", 3},
          {"total_num_steps", 20}}}}},
      {"zero_optimization",
       {{"stage", stage},
        {"reduce_bucket_size", 40},
        {"stage3_param_persistence_threshold", 10},
        {"stage3_max_reuse_distance", 0},
        {"stage3_gather_16bit_weights_on_model_save", true}}},
  };
  if (bf16) cfg["bf16"] = {{"enabled", true}};
  return cfg;
}

// The model dtypes of the exact-resume test: stage 0's checkpoint layout depends on it.
enum class Precision { kFp32, kBf16, kFp16 };

Json config(int stage, Precision precision, int world) {
  Json cfg = config(stage, precision == Precision::kBf16, world);
  if (precision == Precision::kFp16) {
    cfg["fp16"] = {{"enabled", true}, {"initial_scale_power", 10}, {"loss_scale_window", 2}};
  }
  return cfg;
}

// One optimizer step over the kSlots micro-batches of `step`; this rank's share of them.
void train_step(Engine& engine, test::TinyStackImpl& model, int step, int rank, int world) {
  const int gas = kSlots / world;
  for (int s = 0; s < gas; ++s) {
    auto [x, y] = test::tiny_batch(rank * gas + s, step);
    auto out = model.forward(engine.to_model_dtype(x)).to(at::kFloat);
    engine.backward(torch::mse_loss(out, y));
    engine.step();
  }
}

std::unique_ptr<Engine> make(std::shared_ptr<test::TinyStackImpl> model, const Json& cfg,
                             std::shared_ptr<comm::Comm> comm) {
  InitializeOptions io;
  io.comm = std::move(comm);
  return initialize(std::move(model), cfg, io);
}

// Whole fp32 master weights by parameter name (consolidated from the live engine).
std::map<std::string, at::Tensor> weights(Engine& engine, torch::nn::Module& model) {
  GatheredParameters access(engine);
  std::map<std::string, at::Tensor> out;
  for (const auto& p : model.named_parameters())
    out[p.key()] = p.value().detach().to(at::kFloat).clone();
  return out;
}

TEST(EngineCheckpoint, ExactResumeIsBitIdentical) {
  comm::Comm& w = test::world();
  const int n = w.size();
  const int k = 3;
  for (int stage : {0, 1, 2, 3}) {
    for (Precision precision : {Precision::kFp32, Precision::kBf16, Precision::kFp16}) {
      if (precision == Precision::kFp16 && (stage % 2 == 1 || !cpu_half_matmul_supported())) {
        continue;  // fp16 at stages 0 and 2 (its scaler state crosses the resume; stage 0's layout)
      }
      const bool bf16 = precision == Precision::kBf16;
      const std::string dir = test::shared_temp_dir(w, "ckpt_resume");
      // Uninterrupted: 2k steps.
      auto model_a = std::make_shared<test::TinyStackImpl>(true);
      auto a = make(model_a, config(stage, precision, n), world_ptr());
      for (int s = 0; s < 2 * k; ++s) train_step(*a, *model_a, s, w.rank(), n);
      // Interrupted: k steps, save, a fresh engine loads and trains k more.
      auto model_b = std::make_shared<test::TinyStackImpl>(true);
      auto b = make(model_b, config(stage, precision, n), world_ptr());
      for (int s = 0; s < k; ++s) train_step(*b, *model_b, s, w.rank(), n);
      Value client = Value::dict();
      client.set("data_position", int64_t{k});
      b->save_checkpoint(dir, std::nullopt, client);
      if (stage == 1 || stage == 2) {
        // Each rank's file holds its own partition, not the storage it is a view of.
        const Value optim = ckpt::load_pt(
            ckpt::tag_path(dir, *ckpt::read_latest(dir)) + "/" + ckpt::optim_states_name(w.rank(), bf16));
        for (const Value& single :
             optim.at("optimizer_state_dict").at("single_partition_of_fp32_groups").items()) {
          const at::Tensor& t = single.as_tensor();
          EXPECT_EQ(t.storage().nbytes(), t.nbytes()) << "stage " << stage << " bf16 " << bf16;
        }
      }
      const at::Tensor rng_at_save = at::rand({4});
      b.reset();
      auto model_c = std::make_shared<test::TinyStackImpl>(true);
      auto c = make(model_c, config(stage, precision, n), world_ptr());
      auto loaded = c->load_checkpoint(dir);
      ASSERT_TRUE(loaded.has_value());
      EXPECT_EQ(loaded->client_state.at("data_position").as_int(), k);
      EXPECT_TRUE(at::equal(at::rand({4}), rng_at_save)) << "RNG state restored";
      EXPECT_EQ(c->global_steps(), k);
      for (int s = k; s < 2 * k; ++s) train_step(*c, *model_c, s, w.rank(), n);
      const std::string what = str("stage ", stage,
                                   bf16                               ? " bf16"
                                   : precision == Precision::kFp16 ? " fp16"
                                                                   : " fp32",
                                   " at ", n, " ranks");
      EXPECT_EQ(c->global_steps(), a->global_steps()) << what;
      EXPECT_EQ(c->global_samples(), a->global_samples()) << what;
      EXPECT_EQ(c->get_lr(), a->get_lr()) << what;
      EXPECT_EQ(c->loss_scaler().state_dict(), a->loss_scaler().state_dict()) << what;
      EXPECT_EQ(c->lr_scheduler()->state_dict(), a->lr_scheduler()->state_dict()) << what;
      const auto sa = a->optimizer()->state_dict();
      const auto sc = c->optimizer()->state_dict();
      ASSERT_EQ(sa.state.size(), sc.state.size()) << what;
      for (const auto& [i, ps] : sa.state) {
        EXPECT_EQ(ps.step, sc.state.at(i).step) << what;
        EXPECT_TRUE(at::equal(ps.exp_avg, sc.state.at(i).exp_avg)) << what << " exp_avg " << i;
        EXPECT_TRUE(at::equal(ps.exp_avg_sq, sc.state.at(i).exp_avg_sq)) << what;
      }
      for (size_t g = 0; g < a->model_states().targets().size(); ++g) {
        EXPECT_TRUE(
            at::equal(a->model_states().targets()[g].master, c->model_states().targets()[g].master))
            << what << " fp32 master " << g;
      }
      auto wa = weights(*a, *model_a);
      auto wc = weights(*c, *model_c);
      for (const auto& [name, t] : wa) EXPECT_TRUE(at::equal(t, wc[name])) << what << " " << name;
      w.barrier();
      if (w.rank() == 0) std::filesystem::remove_all(dir);
    }
  }
}

// Saved at this world size (and stage), loaded by an in-process world of another size (and
// stage) inside rank 0: both continue for k steps on the same global batches.
TEST(EngineCheckpoint, LoadsAtAnotherWorldSizeAndStage) {
  comm::Comm& w = test::world();
  const int n = w.size();
  const int m = n % 4 + 1;  // 1→2, 2→3, 3→4, 4→1
  const int k = 2;
  for (int stage : {1, 2, 3}) {
    const int new_stage = stage == 3 ? 1 : stage + 1;
    std::vector<int> targets = {stage, new_stage};
    if (stage == 3) targets.push_back(0);  // per-parameter partitions into one whole flat group
    for (int target_stage : targets) {
      const std::string dir = test::shared_temp_dir(w, "ckpt_reshard");
      auto model = std::make_shared<test::TinyStackImpl>(true);
      auto engine = make(model, config(stage, false, n), world_ptr());
      for (int s = 0; s < k; ++s) train_step(*engine, *model, s, w.rank(), n);
      engine->save_checkpoint(dir);
      for (int s = k; s < 2 * k; ++s) train_step(*engine, *model, s, w.rank(), n);
      auto reference = weights(*engine, *model);
      if (w.rank() == 0) {
        std::vector<std::map<std::string, at::Tensor>> resumed(m);
        comm::run_local_world(m, [&](comm::Comm& local) {
          auto model2 = std::make_shared<test::TinyStackImpl>(true);
          auto e2 = make(model2, config(target_stage, false, m),
                         std::shared_ptr<comm::Comm>(&local, [](comm::Comm*) {}));
          ASSERT_TRUE(e2->load_checkpoint(dir).has_value());
          EXPECT_EQ(e2->global_steps(), k);
          for (int s = k; s < 2 * k; ++s) train_step(*e2, *model2, s, local.rank(), m);
          resumed[local.rank()] = weights(*e2, *model2);
        });
        for (const auto& [name, t] : reference) {
          const double diff = (t - resumed[0][name]).abs().max().item<double>();
          EXPECT_LE(diff, 1e-5) << "stage " << stage << " x " << n << " -> stage " << target_stage
                                << " x " << m << ": " << name;
        }
      }
      w.barrier();
      if (w.rank() == 0) std::filesystem::remove_all(dir);
    }
  }
}

// The whole optimizer state of a live engine rank: masters (through the parameters), moments and
// steps by group (the optimizer's own state dict, cloned).
std::map<std::string, at::Tensor> moments(Engine& engine) {
  std::map<std::string, at::Tensor> out;
  for (const auto& [g, ps] : engine.optimizer()->state_dict().state) {
    out["exp_avg." + std::to_string(g)] = ps.exp_avg.clone();
    out["exp_avg_sq." + std::to_string(g)] = ps.exp_avg_sq.clone();
    out["step." + std::to_string(g)] = torch::tensor(ps.step);
  }
  return out;
}

// A universal folder without one state file: every rank of the loading world fails naming it;
// without latest_universal there is no checkpoint (DeepSpeed's warning and nullopt).
void expect_missing_universal_file_named(const std::string& dir, int stage, int m) {
  const std::string tag = ckpt::join_path(dir, "global_step2");
  const std::string victim = ckpt::universal_state_path(tag + "_universal", "h0.fc.bias", "exp_avg");
  ASSERT_TRUE(std::filesystem::remove(victim));
  comm::run_local_world(m, [&](comm::Comm& local) {
    Json cfg = config(stage, false, m);
    cfg["checkpoint"] = {{"load_universal", true}};
    auto model2 = std::make_shared<test::TinyStackImpl>(true);
    auto e2 = make(model2, cfg, std::shared_ptr<comm::Comm>(&local, [](comm::Comm*) {}));
    try {
      e2->load_checkpoint(dir);
      ADD_FAILURE() << "loaded without " << victim;
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(victim + ": missing"), std::string::npos)
          << e.what();
    }
    local.barrier();  // every rank has failed before latest_universal goes
    if (local.rank() == 0) std::filesystem::remove(ckpt::join_path(dir, ckpt::kLatestUniversalFile));
    local.barrier();
    EXPECT_FALSE(e2->load_checkpoint(dir).has_value());
  });
}

// Universal checkpoints (checkpoint/universal.h): zrt-ckpt to-universal's writer on the tag this
// world saved at stage s, loaded with "checkpoint": {"load_universal": true} by a world of another
// size, at the same stage and at another one: every rank's masters, moments and steps bitwise
// those of the same world loading the original tag (resharding), and bitwise the same after two
// more steps; a weights-only load gives the trained weights; what is missing is named.
TEST(EngineCheckpoint, LoadsUniversalCheckpointsAtAnotherWorldSize) {
  comm::Comm& w = test::world();
  const int n = w.size();
  const int m = n % 3 + 2;  // 1→3, 2→4, 3→2, 4→3
  for (int stage : {1, 2, 3}) {
    const std::string dir = test::shared_temp_dir(w, "ckpt_universal");
    auto model = std::make_shared<test::TinyStackImpl>(true);
    auto engine = make(model, config(stage, false, n), world_ptr());
    for (int s = 0; s < 2; ++s) train_step(*engine, *model, s, w.rank(), n);
    engine->save_checkpoint(dir);
    const auto trained = weights(*engine, *model);
    if (w.rank() == 0) {
      const std::string tag = ckpt::join_path(dir, "global_step2");
      const ckpt::UniversalWriteStats stats = ckpt::write_universal(tag, tag + "_universal");
      EXPECT_EQ(stats.params, static_cast<int64_t>(trained.size()));
      EXPECT_EQ(*ckpt::read_latest(dir, nullptr, ckpt::kLatestUniversalFile),
                "global_step2_universal");
      // Converting again replaces the earlier conversion; anything else is never replaced.
      EXPECT_EQ(ckpt::write_universal(tag, tag + "_universal").files, stats.files);
      EXPECT_THROW(ckpt::write_universal(tag, tag), CheckpointError);
      for (int target : {stage, stage == 3 ? 1 : 3}) {
        SCOPED_TRACE(str("stage ", stage, " x ", n, " -> universal -> stage ", target, " x ", m));
        std::vector<std::map<std::string, at::Tensor>> direct(m), universal(m);
        for (bool load_universal : {false, true}) {
          auto& out = load_universal ? universal : direct;
          comm::run_local_world(m, [&](comm::Comm& local) {
            Json cfg = config(target, false, m);
            if (load_universal) cfg["checkpoint"] = {{"load_universal", true}};
            auto model2 = std::make_shared<test::TinyStackImpl>(true);
            auto e2 = make(model2, cfg, std::shared_ptr<comm::Comm>(&local, [](comm::Comm*) {}));
            ASSERT_TRUE(e2->load_checkpoint(dir).has_value());
            EXPECT_EQ(e2->global_steps(), 2);
            auto state = moments(*e2);
            for (int s = 2; s < 4; ++s) train_step(*e2, *model2, s, local.rank(), m);
            for (auto& [name, t] : weights(*e2, *model2)) state["after." + name] = t;
            out[local.rank()] = std::move(state);
          });
        }
        for (int r = 0; r < m; ++r) {
          ASSERT_EQ(universal[r].size(), direct[r].size());
          for (const auto& [name, t] : direct[r]) {
            EXPECT_TRUE(at::equal(t, universal[r].at(name))) << "rank " << r << " " << name;
          }
        }
      }
      // Weights only (load_module_only) from the universal folder: the trained weights.
      comm::run_local_world(m, [&](comm::Comm& local) {
        Json cfg = config(stage, false, m);
        cfg["checkpoint"] = {{"load_universal", true}};
        auto model2 = std::make_shared<test::TinyStackImpl>(true);
        auto e2 = make(model2, cfg, std::shared_ptr<comm::Comm>(&local, [](comm::Comm*) {}));
        LoadCheckpointOptions only;
        only.load_module_only = true;
        ASSERT_TRUE(e2->load_checkpoint(dir, std::nullopt, only).has_value());
        for (const auto& [name, t] : weights(*e2, *model2)) {
          EXPECT_TRUE(at::equal(t, trained.at(name))) << "weights only: " << name;
        }
      });
      expect_missing_universal_file_named(dir, stage, m);
    }
    w.barrier();
    if (w.rank() == 0) std::filesystem::remove_all(dir);
  }
}

TEST(EngineCheckpoint, IncompleteTagsAndMissingLatest) {
  comm::Comm& w = test::world();
  const std::string dir = test::shared_temp_dir(w, "ckpt_bad");
  auto model = std::make_shared<test::TinyStackImpl>(true);
  auto engine = make(model, config(2, false, w.size()), world_ptr());
  EXPECT_FALSE(engine->load_checkpoint(dir).has_value()) << "no latest: warning and nullopt";
  train_step(*engine, *model, 0, w.rank(), w.size());
  const std::string tag_dir = engine->save_checkpoint(dir, std::string("t1"));
  EXPECT_EQ(ckpt::read_latest(dir), "t1");
  EXPECT_THROW(engine->save_checkpoint(dir, std::string("../escape")), CheckpointError);
  w.barrier();
  if (w.rank() == 0) std::filesystem::remove(tag_dir + "/" + ckpt::kManifestFile);
  w.barrier();
  try {
    engine->load_checkpoint(dir);
    ADD_FAILURE() << "an incomplete tag was loaded";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("incomplete"), std::string::npos) << e.what();
  }
  w.barrier();
  if (w.rank() == 0) std::filesystem::remove_all(dir);
}

TEST(EngineCheckpoint, ModuleOnlyLoadAndSixteenBitModel) {
  comm::Comm& w = test::world();
  const std::string dir = test::shared_temp_dir(w, "ckpt_module");
  for (int stage : {0, 2, 3}) {
    auto model = std::make_shared<test::TinyStackImpl>(true);
    auto engine = make(model, config(stage, true, w.size()), world_ptr());
    train_step(*engine, *model, 0, w.rank(), w.size());
    engine->save_checkpoint(dir, std::string("s") + std::to_string(stage));
    ASSERT_TRUE(engine->save_16bit_model(dir, "model_" + std::to_string(stage) + ".safetensors"));
    auto trained = weights(*engine, *model);
    auto model2 = std::make_shared<test::TinyStackImpl>(true);
    auto fresh = make(model2, config(stage, true, w.size()), world_ptr());
    LoadCheckpointOptions only;
    only.load_module_only = true;
    fresh->load_checkpoint(dir, std::string("s") + std::to_string(stage), only);
    EXPECT_EQ(fresh->global_steps(), 0) << "module-only loads leave the counters";
    auto loaded = weights(*fresh, *model2);
    for (const auto& [name, t] : trained) {
      EXPECT_TRUE(at::equal(t, loaded[name])) << "stage " << stage << " " << name;
    }
  }
  // ZeRO-3 without the gather flag refuses to write whole weights (DeepSpeed's behaviour).
  Json cfg = config(3, true, w.size());
  cfg["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] = false;
  auto model = std::make_shared<test::TinyStackImpl>(true);
  auto engine = make(model, cfg, world_ptr());
  EXPECT_FALSE(engine->save_16bit_model(dir, "never.bin"));
  w.barrier();
  if (w.rank() == 0) std::filesystem::remove_all(dir);
}

// Python (the venv's torch) reads every file with weights_only=True, and DeepSpeed's
// zero_to_fp32 algorithm, written independently in tests/runtime/zero_to_fp32_check.py, gives
// back the engine's fp32 weights.
TEST(EngineCheckpoint, PythonReadsEveryFileAndConsolidates) {
  comm::Comm& w = test::world();
  ZRT_REQUIRE_PYTHON("torch");
  for (int stage : {1, 2, 3}) {
    const std::string dir = test::shared_temp_dir(w, "ckpt_python");
    auto model = std::make_shared<test::TinyStackImpl>(true);
    auto engine = make(model, config(stage, true, w.size()), world_ptr());
    train_step(*engine, *model, 0, w.rank(), w.size());
    engine->save_checkpoint(dir);
    // The engine's own consolidation (C++) as the expected values.
    std::map<std::string, at::Tensor> masters;
    {
      auto full = ckpt::load_fp32_state_dict(dir);
      for (auto& [name, t] : full) masters[name] = t;
    }
    auto live = weights(*engine, *model);
    for (const auto& [name, t] : live) {
      EXPECT_TRUE(at::allclose(masters.at(name).to(at::kBFloat16).to(at::kFloat), t))
          << "consolidated fp32 rounds to the live bf16 weights: " << name;
    }
    if (w.rank() == 0) {
      ckpt::save_pt(ckpt::ordered_dict_of(ckpt::NamedTensors(masters.begin(), masters.end())),
                    dir + "/expected_fp32.pt");
      const std::string cmd = zrt::test::python_path() + " " + ZRT_SOURCE_DIR +
                              "/tests/runtime/zero_to_fp32_check.py " + dir + " " + dir +
                              "/expected_fp32.pt";
      const auto r = zrt::test::run_command(cmd);
      EXPECT_EQ(r.exit_code, 0) << "stage " << stage << ":\n" << r.output;
      EXPECT_NE(r.output.find("OK"), std::string::npos) << r.output;
    }
    w.barrier();
    if (w.rank() == 0) std::filesystem::remove_all(dir);
  }
}

}  // namespace
}  // namespace zrt
