// runtime/engine_checkpointer.h over the in-process backend (ranks as threads), at every ZeRO
// stage, so that the LibTorch 1.13 build (unit tests only) runs it too: the write-back of a
// modifier rank's values (GatheredParameters) into partitions and masters; module files loaded
// strictly and leniently; the flat optimizer files' slice mappings and paddings against the
// parameters' values; frozen parameters, buffers and a tied alias through save and load at the
// same layout, resharded and module-only.
#include <map>

#include <gtest/gtest.h>

#include "checkpoint/ds_objects.h"
#include "checkpoint/reshard.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/value_view.h"
#include "comm/local_comm.h"
#include "runtime/engine_checkpointer.h"
#include "runtime/gathered_parameters.h"
#include "runtime/model_states.h"
#include "tests/runtime/parity.h"
#include "tests/support/error_of.h"
#include "tests/support/temp_dir.h"
#include "zrt/zrt.h"

namespace zrt {
namespace {

using test::Case;
using test::Precision;

// The message `text` contains `part`.
void expect_contains(const std::string& text, const std::string& part, const std::string& what) {
  EXPECT_NE(text.find(part), std::string::npos)
      << what << ": expected \"" << part << "\" in: " << text;
}

std::shared_ptr<comm::Comm> borrowed(comm::Comm& comm) {
  return std::shared_ptr<comm::Comm>(&comm, [](comm::Comm*) {});
}

std::unique_ptr<Engine> make_engine(std::shared_ptr<torch::nn::Module> model, const Json& cfg,
                                    comm::Comm& comm) {
  InitializeOptions io;
  io.comm = borrowed(comm);
  return initialize(std::move(model), cfg, io);
}

// Values exact in bf16 and unlike the models' own: (i mod 16) / 8 - 1 + salt / 32.
at::Tensor written_value(int64_t numel, int salt) {
  return torch::arange(numel, torch::kFloat).remainder(16).div(8).sub(1).add(salt / 32.0f);
}

// Every trainable parameter's fp32 master equals this rank's partition of `values`.
void expect_masters(Engine& engine, const std::map<std::string, at::Tensor>& values,
                    const std::string& what) {
  const auto groups = engine.model_states().group_partitions();
  auto& targets = engine.model_states().targets();
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& gp = groups[g];
    const at::Tensor expected = ckpt::partition_from_whole(
        gp.layout, gp.params, gp.rank, gp.world_size,
        [&](const std::string& n) { return values.at(n); }, at::kFloat, "test");
    EXPECT_TRUE(torch::equal(targets[g].master.narrow(0, 0, expected.numel()).cpu(), expected))
        << what << ": master of group " << g;
  }
}

TEST(Checkpointer, ModifierWriteBackAtEveryStage) {
  const int world = 2, last = world - 1;
  for (int stage : {0, 1, 2, 3}) {
    for (Precision precision : {Precision::kFp32, Precision::kBf16Adam}) {
      for (bool offload : {false, true}) {
        if (offload && stage != 2) continue;
        const Case c{stage, precision, 1, false, offload};
        const std::string what = test::describe(c);
        comm::run_local_world(world, [&](comm::Comm& comm) {
          auto model = std::make_shared<test::TinyStackImpl>(true);
          auto engine = make_engine(model, test::config_for(c), comm);
          std::map<std::string, at::Tensor> values;
          int salt = 0;
          for (const auto& p : model->named_parameters()) {
            values[p.key()] = written_value(p.value().numel(), ++salt).view(p.value().sizes());
          }
          {
            GatheredParameters access(*engine, last);
            if (comm.rank() == last) {
              torch::NoGradGuard no_grad;
              for (const auto& p : model->named_parameters()) p.value().copy_(values[p.key()]);
            }
          }
          expect_masters(*engine, values, what);
          {
            GatheredParameters access(*engine);
            for (const auto& p : model->named_parameters()) {
              EXPECT_TRUE(torch::equal(p.value().to(at::kFloat), values[p.key()]))
                  << what << " rank " << comm.rank() << ": " << p.key();
            }
          }
          // One step moves every weight by about lr from the written values, not from the old.
          auto [x, y] = test::tiny_batch(comm.rank(), 0);
          engine->backward(
              torch::mse_loss(model->forward(engine->to_model_dtype(x)).to(at::kFloat), y));
          engine->step();
          GatheredParameters access(*engine);
          for (const auto& p : model->named_parameters()) {
            EXPECT_LT((p.value().to(at::kFloat) - values[p.key()]).abs().max().item<float>(), 0.03f)
                << what << ": " << p.key();
          }
        });
      }
    }
  }
}

// The model's parameters with written_value()s (and `extra` tensors) as a safetensors file,
// `drop` left out and `grow` given one element more.
void write_module_file(const std::string& path, torch::nn::Module& model, const std::string& drop,
                       const std::string& grow, const ckpt::NamedTensors& extra = {}) {
  ckpt::NamedTensors tensors = extra;
  int salt = 0;
  for (const auto& p : model.named_parameters()) {
    ++salt;
    if (p.key() == drop) continue;
    const int64_t n = p.value().numel() + (p.key() == grow ? 1 : 0);
    at::Tensor v = written_value(n, salt);
    tensors.emplace_back(p.key(), p.key() == grow ? v : v.view(p.value().sizes()));
  }
  ckpt::save_safetensors(tensors, path);
}

TEST(Checkpointer, ModuleFileStrictAndLenient) {
  test::TempDir dir("zrt_ckptr_module");
  const std::string good = dir.path() + "/good.safetensors";
  const std::string missing = dir.path() + "/missing.safetensors";
  const std::string unexpected = dir.path() + "/unexpected.safetensors";
  const std::string misshaped = dir.path() + "/misshaped.safetensors";
  {
    test::TinyStack shape_model{true};
    write_module_file(good, *shape_model, "", "");
    write_module_file(missing, *shape_model, "h1.fc.bias", "");
    write_module_file(unexpected, *shape_model, "", "", {{"h9.fc.weight", torch::ones({2})}});
    write_module_file(misshaped, *shape_model, "", "h2.norm_scale");
  }
  for (int stage : {0, 2, 3}) {
    const Case c{stage, Precision::kBf16Adam, 1, false, false};
    const std::string what = test::describe(c);
    comm::run_local_world(2, [&](comm::Comm& comm) {
      auto model = std::make_shared<test::TinyStackImpl>(true);
      auto engine = make_engine(model, test::config_for(c), comm);
      std::map<std::string, at::Tensor> before;
      {
        GatheredParameters access(*engine);
        for (const auto& p : model->named_parameters())
          before[p.key()] = p.value().to(at::kFloat).clone();
      }
      auto error_of = [&](const std::string& path) {
        return test::error_of<CheckpointError>([&] { engine->load_module_file(path); });
      };
      expect_contains(error_of(missing), "the checkpoint has no weights for 'h1.fc.bias'", what);
      expect_contains(error_of(unexpected),
                      "has weights for 'h9.fc.weight', which the model does not have", what);
      expect_contains(error_of(misshaped),
                      "'h2.norm_scale' has shape [8] in the checkpoint but [7]", what);
      // A refused file changes nothing (every name is checked before the first write).
      expect_masters(*engine, before, what + " after the refused files");
      // Lenient: the missing parameter keeps its value, the others are the file's.
      engine->load_module_file(missing, /*strict=*/false);
      std::map<std::string, at::Tensor> expected;
      int salt = 0;
      for (const auto& p : model->named_parameters()) {
        ++salt;
        expected[p.key()] = p.key() == "h1.fc.bias"
                                ? before[p.key()]
                                : written_value(p.value().numel(), salt).view(p.value().sizes());
      }
      expect_masters(*engine, expected, what);
      GatheredParameters access(*engine);
      for (const auto& p : model->named_parameters()) {
        EXPECT_TRUE(torch::equal(p.value().to(at::kFloat), expected[p.key()]))
            << what << ": " << p.key();
      }
    });
  }
}

// Stages 1-2 at 3 ranks: each rank's lean fp32 partition, cut by its param_slice_mappings, gives
// back every parameter's values, and the paddings and partition sizes add up to the group.
TEST(Checkpointer, FlatOptimFileMatchesTheParameters) {
  for (int stage : {1, 2}) {
    const Case c{stage, Precision::kFp32, 1, false, false};
    std::vector<ckpt::Value> files(3);
    std::map<std::string, at::Tensor> whole;
    comm::run_local_world(3, [&](comm::Comm& comm) {
      auto model = std::make_shared<test::TinyStackImpl>(false);
      auto engine = make_engine(model, test::config_for(c), comm);
      files[comm.rank()] = runtime::EngineCheckpointer(*engine).optim_states_value();
      if (comm.rank() == 0) {
        for (const auto& p : model->named_parameters())
          whole[p.key()] = p.value().detach().reshape({-1}).clone();
      }
    });
    const std::string what = str("stage ", stage);
    int64_t partition = -1;
    std::map<std::string, std::vector<at::Tensor>> pieces;  // name → fragments in rank order
    int64_t lean_total = 0, padding_total = 0;
    for (int r = 0; r < 3; ++r) {
      const ckpt::ValueView osd = ckpt::ValueView(files[r], "file")["optimizer_state_dict"];
      ASSERT_EQ(osd["single_partition_of_fp32_groups"].items().size(), 1u) << what;
      const at::Tensor lean = osd["single_partition_of_fp32_groups"].items()[0].as_tensor();
      const int64_t padding = osd["group_paddings"].items()[0].as_int();
      EXPECT_EQ(osd["partition_count"].items()[0].as_int(), 3) << what;
      if (partition < 0) partition = lean.numel() + padding;
      EXPECT_EQ(lean.numel() + padding, partition) << what << " rank " << r;
      lean_total += lean.numel();
      padding_total += padding;
      for (const auto& [name, address] : osd["param_slice_mappings"].items()[0].as_dict()) {
        const auto [numel, start] = ckpt::ds_fragment_address(address, what);
        pieces[name.as_str()].push_back(lean.narrow(0, start, numel));
      }
    }
    int64_t total = 0;
    for (const auto& [name, t] : whole) total += t.numel();
    EXPECT_EQ(lean_total, total) << what;
    EXPECT_EQ((total + padding_total) % 6, 0) << what << ": padded to a multiple of 2·W";
    ASSERT_EQ(pieces.size(), whole.size()) << what;
    for (const auto& [name, t] : whole) {
      EXPECT_TRUE(torch::equal(at::cat(pieces[name]), t)) << what << ": " << name;
    }
  }
}

// A model with what TinyStack lacks: a frozen parameter, a buffer and a parameter registered under
// a second name (a tied alias; LibTorch lists the module's own parameters first, so the engine
// keeps "output_alias" as the owner and "stack.output.weight" as the alias).
struct ExtrasImpl : torch::nn::Module {
  ExtrasImpl() {
    stack = register_module("stack", test::TinyStack(false));
    frozen = register_parameter("frozen_scale", torch::full({3}, 1.5f), /*requires_grad=*/false);
    shift = register_buffer("shift", torch::zeros({3}));
    register_parameter("output_alias", stack->out->weight);
  }
  torch::Tensor forward(const torch::Tensor& x) { return stack->forward(x) * frozen + shift; }
  test::TinyStack stack{nullptr};
  torch::Tensor frozen, shift;
};

double step_loss(Engine& engine, ExtrasImpl& model, int rank, int step) {
  auto [x, y] = test::tiny_batch(rank, step);
  auto loss = torch::mse_loss(model.forward(engine.to_model_dtype(x)).to(at::kFloat), y);
  engine.backward(loss);
  engine.step();
  return loss.item<double>();
}

// Every parameter of `model`, whole, in fp32.
std::map<std::string, at::Tensor> whole_weights(Engine& engine, torch::nn::Module& model) {
  std::map<std::string, at::Tensor> out;
  GatheredParameters access(engine);
  for (const auto& p : model.named_parameters()) out[p.key()] = p.value().to(at::kFloat).clone();
  return out;
}

// Stages 2 and 3, fp32 and bf16 with offloaded fp32 masters.
TEST(Checkpointer, FrozenBuffersAndTiedAliasRoundTrip) {
  for (int stage : {2, 3}) {
    for (bool bf16_offload : {false, true}) {
      const Case c = bf16_offload ? Case{stage, Precision::kBf16Adam, 1, false, true}
                                  : Case{stage, Precision::kFp32, 1, false, false};
      const std::string what = test::describe(c);
      test::TempDir dir("zrt_ckptr_extras");
      std::vector<double> next_loss(2);
      std::map<std::string, at::Tensor> saved;
      comm::run_local_world(2, [&](comm::Comm& comm) {
        auto model = std::make_shared<ExtrasImpl>();
        auto engine = make_engine(model, test::config_for(c), comm);
        for (int step = 0; step < 2; ++step) step_loss(*engine, *model, comm.rank(), step);
        {
          // A parameter, frozen or not, is written through GatheredParameters with a modifier
          // rank (under ZeRO-3 it lives in its partition: Note [Frozen parameters under ZeRO-3]).
          GatheredParameters access(*engine, /*modifier_rank=*/0);
          torch::NoGradGuard no_grad;
          model->frozen.fill_(2.5f);
          model->shift.fill_(0.75f);
        }
        const ckpt::Value ms = runtime::EngineCheckpointer(*engine).model_states_value(false);
        const ckpt::ValueView v(ms, "model states");
        EXPECT_EQ(v["frozen_param_shapes"].as_dict().size(), 1u) << what;
        EXPECT_TRUE(v["frozen_param_fragments"].contains("frozen_scale")) << what;
        if (comm.rank() == 0) {
          EXPECT_EQ(v["shared_params"]["stack.output.weight"].as_string(), "output_alias") << what;
        }
        engine->save_checkpoint(dir.path());
        const auto weights = whole_weights(*engine, *model);
        if (comm.rank() == 0) saved = weights;
        next_loss[comm.rank()] = step_loss(*engine, *model, comm.rank(), 2);
      });
      // Same layout (2 ranks), resharded (3 ranks) and module-only: the frozen values, the buffer
      // and the weights come back; the same layout also resumes with the same next loss.
      for (int world : {2, 3}) {
        for (bool module_only : {false, true}) {
          const std::string how =
              str(what, " into ", world, " ranks", module_only ? " (module)" : "");
          comm::run_local_world(world, [&](comm::Comm& comm) {
            auto model = std::make_shared<ExtrasImpl>();
            auto engine = make_engine(model, test::config_for(c), comm);
            LoadCheckpointOptions options;
            options.load_module_only = module_only;
            ASSERT_TRUE(engine->load_checkpoint(dir.path(), std::nullopt, options).has_value());
            EXPECT_TRUE(torch::equal(model->frozen.to(at::kFloat), torch::full({3}, 2.5f))) << how;
            EXPECT_TRUE(torch::equal(model->shift.to(at::kFloat), torch::full({3}, 0.75f))) << how;
            EXPECT_EQ(engine->global_steps(), module_only ? 0 : 2) << how;
            for (const auto& [name, t] : whole_weights(*engine, *model)) {
              EXPECT_TRUE(torch::equal(t, saved.at(name))) << how << ": " << name;
            }
            if (world == 2 && !module_only) {
              EXPECT_EQ(step_loss(*engine, *model, comm.rank(), 2), next_loss[comm.rank()]) << how;
            }
          });
        }
      }
    }
  }
}

}  // namespace
}  // namespace zrt
