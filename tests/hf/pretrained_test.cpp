// hf/pretrained.h over the in-process backend (ranks as threads): bf16 safetensors shards
// with an index load into every stage at world sizes 1-3, fp32 and bf16 models; every rank reads
// exactly the bytes of the elements it holds; the fp32 masters hold the file's values; a model
// that trains on afterwards; missing, unexpected and mis-shaped names reported together; PEFT
// adapter folders (hf/adapter.h) saved and loaded under ZeRO-3.
#include "hf/pretrained.h"

#include <cmath>
#include <fstream>
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "checkpoint/reshard.h"
#include "checkpoint/safetensors.h"
#include "comm/local_comm.h"
#include "hf/adapter.h"
#include "peft/lora.h"
#include "runtime/gathered_parameters.h"
#include "runtime/model_states.h"
#include "tests/runtime/parity.h"
#include "tests/support/error_of.h"
#include "tests/support/temp_dir.h"
#include "zero/shard_unit.h"
#include "zero/stage3_layout.h"

namespace zrt {
namespace {

// The message `text` contains `part`.
void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "expected \"" << part << "\" in: " << text;
}

using test::Case;
using test::Precision;

// Values unlike TinyStack's own, rounded to bf16 (the file's dtype), by name.
std::map<std::string, at::Tensor> pretrained_values() {
  test::TinyStack model{false};
  std::map<std::string, at::Tensor> out;
  float salt = 1;
  for (const auto& p : model->named_parameters()) {
    const int64_t n = p.value().numel();
    out[p.key()] = torch::arange(n, torch::kFloat)
                       .mul(0.13f * salt++)
                       .cos()
                       .mul(0.3f)
                       .to(at::kBFloat16)
                       .view(p.value().sizes());
  }
  return out;
}

// Two safetensors shards and model.safetensors.index.json, as save_pretrained writes them.
void write_sharded(const std::string& dir, const std::map<std::string, at::Tensor>& values) {
  ckpt::NamedTensors shard[2];
  Json map = Json::object();
  int i = 0;
  for (const auto& [name, t] : values) {
    const int s = i++ % 2;
    shard[s].emplace_back(name, t);
    map[name] = str("model-0000", s + 1, "-of-00002.safetensors");
  }
  for (int s = 0; s < 2; ++s) {
    ckpt::save_safetensors(shard[s], str(dir, "/model-0000", s + 1, "-of-00002.safetensors"));
  }
  std::ofstream(dir + "/model.safetensors.index.json") << Json{{"weight_map", map}}.dump();
}

void check_loaded(Engine& engine, const std::map<std::string, at::Tensor>& values,
                  const PretrainedLoadReport& report, const std::string& what) {
  // Bytes: exactly this rank's elements, 2 bytes each.
  uint64_t mine = 0;
  const auto groups = engine.model_states().group_partitions();
  auto& targets = engine.model_states().targets();
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& gp = groups[g];
    mine += 2 * static_cast<uint64_t>(
                    ckpt::rank_partition(gp.layout, gp.params, gp.rank, gp.world_size).valid_numel);
    const at::Tensor expected = ckpt::partition_from_whole(
        gp.layout, gp.params, gp.rank, gp.world_size,
        [&](const std::string& n) { return values.at(n).to(at::kFloat); }, at::kFloat, "test");
    EXPECT_TRUE(torch::equal(targets[g].master.narrow(0, 0, expected.numel()).cpu(), expected))
        << what << " master of group " << g;
  }
  EXPECT_EQ(report.bytes_read, mine) << what;
  EXPECT_TRUE(report.missing.empty() && report.unexpected.empty()) << what;
  GatheredParameters access(engine);
  for (const auto& p : engine.module().named_parameters()) {
    EXPECT_TRUE(torch::equal(p.value().to(at::kFloat), values.at(p.key()).to(at::kFloat)))
        << what << " " << p.key();
  }
}

TEST(Pretrained, ShardedBf16IntoEveryStageAndWorld) {
  test::TempDir dir("zrt_pretrained");
  const auto values = pretrained_values();
  write_sharded(dir.path(), values);
  for (int world : {1, 2, 3}) {
    for (int stage : {0, 1, 2, 3}) {
      for (Precision precision : {Precision::kFp32, Precision::kBf16Adam}) {
        for (bool persistent : {false, true}) {
          if (persistent && stage != 3) continue;
          const Case c{stage, precision, 1, false, stage == 2 && world == 2};
          const std::string what = str(test::describe(c), " world ", world,
                                       persistent ? " (small parameters persistent)" : "");
          Json cfg = test::config_for(c);
          if (persistent) cfg["zero_optimization"].erase("stage3_param_persistence_threshold");
          comm::run_local_world(world, [&](comm::Comm& comm) {
            auto model = std::make_shared<test::TinyStackImpl>(false);
            InitializeOptions io;
            io.comm = std::shared_ptr<comm::Comm>(&comm, [](comm::Comm*) {});
            auto engine = initialize(model, cfg, io);
            const PretrainedLoadReport report = load_pretrained(*engine, dir.path());
            check_loaded(*engine, values, report, what);
            // Training goes on from the loaded weights: the loss of the first step is the loaded
            // model's, and it falls.
            auto [x, y] = test::tiny_batch(comm.rank(), 0);
            double first = 0, last = 0;
            for (int step = 0; step < 3; ++step) {
              auto loss =
                  torch::mse_loss(model->forward(engine->to_model_dtype(x)).to(at::kFloat), y);
              (step == 0 ? first : last) = loss.item<double>();
              engine->backward(loss);
              engine->step();
            }
            EXPECT_LT(last, first) << what;
          });
        }
      }
    }
  }
}

TEST(Pretrained, DeferredConstructionUnderZero3) {
  // A model whose parameters never had storage (zrt::defer_parameters) partitions under ZeRO-3,
  // takes its values from the files, and trains; stages 0-2 refuse it by name.
  test::TempDir dir("zrt_pretrained_deferred");
  const auto values = pretrained_values();
  write_sharded(dir.path(), values);
  for (int world : {1, 2, 3}) {
    for (Precision precision : {Precision::kFp32, Precision::kBf16Adam}) {
      const Case c{3, precision};
      comm::run_local_world(world, [&](comm::Comm& comm) {
        auto model = std::make_shared<test::TinyStackImpl>(false);
        zrt::defer_parameters(*model);
        for (const auto& p : model->named_parameters()) {
          EXPECT_FALSE(zero::storage_allocated(p.value())) << p.key();
        }
        InitializeOptions io;
        io.comm = std::shared_ptr<comm::Comm>(&comm, [](comm::Comm*) {});
        auto engine = initialize(model, test::config_for(c), io);
        check_loaded(*engine, values, load_pretrained(*engine, dir.path()),
                     str(test::describe(c), " deferred, world ", world));
        auto [x, y] = test::tiny_batch(comm.rank(), 0);
        auto loss = torch::mse_loss(model->forward(engine->to_model_dtype(x)).to(at::kFloat), y);
        EXPECT_TRUE(std::isfinite(loss.item<double>()));
        engine->backward(loss);
        engine->step();
      });
    }
  }
  comm::run_local_world(2, [&](comm::Comm& comm) {
    auto model = std::make_shared<test::TinyStackImpl>(false);
    zrt::defer_parameters(*model->blocks[0]);
    InitializeOptions io;
    io.comm = std::shared_ptr<comm::Comm>(&comm, [](comm::Comm*) {});
    expect_contains(
        test::error_of<ConfigError>([&] { initialize(model, test::config_for(Case{1}), io); }),
        "the model's parameters were built without storage (3 of them, e.g. "
        "'h0.norm_scale': zrt::defer_parameters); only ZeRO stage 3 partitions "
        "such a model, the config asks for stage 1");
  });
}

TEST(Pretrained, InferenceEngineHoldsOnlyItsPartitions) {
  // ZeRO-3 without an optimizer (what zrt-generate builds): no gradient partitions and no fp32
  // masters, for fp32 and bf16 models; the forward equals a training engine's of the same loaded
  // weights, and backward() refuses.
  test::TempDir dir("zrt_pretrained_inference");
  const auto values = pretrained_values();
  write_sharded(dir.path(), values);
  for (int world : {1, 2, 3}) {
    for (Precision precision : {Precision::kFp32, Precision::kBf16Adam}) {
      const Case c{3, precision};
      const std::string what = str(test::describe(c), " inference, world ", world);
      comm::run_local_world(world, [&](comm::Comm& comm) {
        auto io = InitializeOptions{};
        io.comm = std::shared_ptr<comm::Comm>(&comm, [](comm::Comm*) {});
        auto trained_model = std::make_shared<test::TinyStackImpl>(false);
        auto training = initialize(trained_model, test::config_for(c), io);
        load_pretrained(*training, dir.path());
        Json cfg = test::config_for(c);
        cfg.erase("optimizer");
        auto model = std::make_shared<test::TinyStackImpl>(false);
        zrt::defer_parameters(*model);
        auto engine = initialize(model, cfg, io);
        const PretrainedLoadReport report = load_pretrained(*engine, dir.path());
        EXPECT_TRUE(report.missing.empty() && report.unexpected.empty()) << what;
        const runtime::ModelStateBytes bytes = engine->model_state_bytes();
        EXPECT_EQ(bytes.grads, 0) << what;
        EXPECT_EQ(bytes.master, 0) << what;
        EXPECT_EQ(bytes.params, training->model_state_bytes().params) << what;
        EXPECT_GT(training->model_state_bytes().grads, 0) << what;
        auto [x, y] = test::tiny_batch(comm.rank(), 0);
        at::Tensor out, expected;
        {
          at::NoGradGuard no_grad;
          out = model->forward(engine->to_model_dtype(x));
          expected = trained_model->forward(training->to_model_dtype(x));
        }
        EXPECT_TRUE(torch::equal(out, expected)) << what;
        {  // the partitions on NVMe (offload_param "nvme"): loaded into the swap files, the same
          Json nvme = cfg;
          nvme["zero_optimization"]["offload_param"] = {
              {"device", "nvme"}, {"nvme_path", dir.path()}, {"max_in_cpu", 0}};
          auto swapped_model = std::make_shared<test::TinyStackImpl>(false);
          zrt::defer_parameters(*swapped_model);
          auto swapped = initialize(swapped_model, nvme, io);
          load_pretrained(*swapped, dir.path());
          EXPECT_EQ(swapped->model_state_bytes().params, 0) << what;
          EXPECT_EQ(swapped->model_state_bytes().swapped, bytes.params) << what;
          at::NoGradGuard no_grad;
          EXPECT_TRUE(torch::equal(swapped_model->forward(swapped->to_model_dtype(x)), expected))
              << what << ", parameters on NVMe";
        }
        auto loss = torch::mse_loss(model->forward(engine->to_model_dtype(x)).to(at::kFloat), y);
        expect_contains(test::error_of<Error>([&] { engine->backward(loss); }),
                        "inference mode");
        if (world == 1) {  // a backward outside the engine is refused too (one rank: no gathers)
          expect_contains(test::error_of<std::exception>([&] { loss.backward(); }),
                          "through a ZeRO-3 inference engine");
        }
      });
    }
  }
}

TEST(Pretrained, InitDeferredIsTheSameAtEveryWorldSize) {
  // Training from scratch without ever building the whole model: every world size gives the
  // values a single process gives, and each parameter was initialised whole.
  std::map<std::string, at::Tensor> at_one;
  for (int world : {1, 2, 3}) {
    for (int64_t persistence : {0, 100000}) {
      comm::run_local_world(world, [&](comm::Comm& comm) {
        auto model = std::make_shared<test::TinyStackImpl>(false);
        zrt::defer_parameters(*model);
        Json cfg = test::config_for(Case{3});
        cfg["zero_optimization"]["stage3_param_persistence_threshold"] = persistence;
        InitializeOptions io;
        io.comm = std::shared_ptr<comm::Comm>(&comm, [](comm::Comm*) {});
        auto engine = initialize(model, cfg, io);
        std::map<std::string, std::vector<int64_t>> seen;
        init_deferred(*engine, 42, [&](const std::string& name, at::Tensor& t, at::Generator& gen) {
          seen[name] = t.sizes().vec();
          t.normal_(0.0, 0.5, gen);
        });
        GatheredParameters access(*engine);
        for (const auto& p : model->named_parameters()) {
          EXPECT_EQ(seen.at(p.key()), p.value().sizes().vec()) << p.key();
          EXPECT_GT(p.value().abs().sum().item<double>(), 0.0) << p.key();
          if (comm.rank() != 0) continue;
          if (world == 1 && persistence == 0) {
            at_one[p.key()] = p.value().clone();
          } else {
            EXPECT_TRUE(torch::equal(p.value(), at_one.at(p.key())))
                << p.key() << " at world " << world;
          }
        }
      });
    }
  }
}

TEST(Pretrained, MismatchesAreReportedTogether) {
  test::TempDir dir("zrt_pretrained_bad");
  auto values = pretrained_values();
  values.erase("h1.fc.bias");                                     // missing
  values["h2.extra"] = torch::zeros({2});                         // unexpected
  values["output.weight"] = torch::zeros({3, 8}, at::kBFloat16);  // mis-shaped (3 x 7)
  ckpt::NamedTensors all(values.begin(), values.end());
  ckpt::save_safetensors(all, dir.path() + "/model.safetensors");
  for (int world : {1, 2}) {
    comm::run_local_world(world, [&](comm::Comm& comm) {
      auto model = std::make_shared<test::TinyStackImpl>(false);
      InitializeOptions io;
      io.comm = std::shared_ptr<comm::Comm>(&comm, [](comm::Comm*) {});
      auto engine = initialize(model, test::config_for(Case{3}), io);
      const std::string error =
          test::error_of<CheckpointError>([&] { load_pretrained(*engine, dir.path()); });
      expect_contains(error, "model.safetensors");
      expect_contains(error, ": the weights do not fit the model");
      expect_contains(error, "missing from the weights (1): h1.fc.bias");
      expect_contains(error, "not in the model (1): h2.extra");
      expect_contains(error,
                      "mismatched (1): 'output.weight' is [3, 8] in the weights but "
                      "[3, 7] in the model");
      // Without strict the names are reported, not errors; the shape still is one.
      PretrainedLoadOptions lenient;
      lenient.strict = false;
      expect_contains(
          test::error_of<CheckpointError>([&] { load_pretrained(*engine, dir.path(), lenient); }),
          "mismatched (1)");
    });
  }
  values["output.weight"] = torch::zeros({3, 7}, at::kBFloat16);
  ckpt::NamedTensors fixed(values.begin(), values.end());
  ckpt::save_safetensors(fixed, dir.path() + "/model.safetensors");
  comm::run_local_world(2, [&](comm::Comm& comm) {
    auto model = std::make_shared<test::TinyStackImpl>(false);
    const at::Tensor kept = model->blocks[1]->fc->bias.clone();
    InitializeOptions io;
    io.comm = std::shared_ptr<comm::Comm>(&comm, [](comm::Comm*) {});
    auto engine = initialize(model, test::config_for(Case{2}), io);
    PretrainedLoadOptions lenient;
    lenient.strict = false;
    const PretrainedLoadReport report = load_pretrained(*engine, dir.path(), lenient);
    EXPECT_EQ(report.missing, std::vector<std::string>{"h1.fc.bias"});
    EXPECT_EQ(report.unexpected, std::vector<std::string>{"h2.extra"});
    EXPECT_TRUE(torch::equal(model->blocks[1]->fc->bias, kept));  // kept its value
    EXPECT_TRUE(torch::equal(model->out->weight, torch::zeros({3, 7})));
  });
}

// save_pretrained of a bf16 engine: bf16 weights, and config.json says so whatever the config
// given said (transformers' "dtype", and the older "torch_dtype" when present).
TEST(Pretrained, SavedConfigSaysTheWeightsDtype) {
  test::TempDir dir("zrt_saved_dtype");
  comm::run_local_world(1, [&](comm::Comm& comm) {
    auto model = std::make_shared<test::TinyStackImpl>(false);
    InitializeOptions io;
    io.comm = std::shared_ptr<comm::Comm>(&comm, [](comm::Comm*) {});
    auto engine = initialize(model, test::config_for(Case{2, Precision::kBf16Adam}), io);
    SavePretrainedOptions so;
    so.config = {{"model_type", "llama"}, {"dtype", "float32"}, {"torch_dtype", "float32"}};
    save_pretrained(*engine, dir.path(), so);
  });
  std::ifstream in(dir / "config.json");
  const Json config = Json::parse(in);
  EXPECT_EQ(config["dtype"], "bfloat16");
  EXPECT_EQ(config["torch_dtype"], "bfloat16");
  EXPECT_EQ(config["model_type"], "llama");
  for (const auto& [name, t] : ckpt::load_safetensors(dir / "model.safetensors").tensors) {
    EXPECT_EQ(t.scalar_type(), at::kBFloat16) << name;
  }
}

lora::LoraConfig tiny_lora() {
  lora::LoraConfig lc;
  lc.r = 4;
  lc.lora_alpha = 8;
  lc.target_modules = {"fc"};
  return lc;
}

// A TinyStack with adapters under a ZeRO-3 engine of `comm`.
std::pair<std::shared_ptr<test::TinyStackImpl>, std::shared_ptr<Engine>> adapted_stack(
    comm::Comm& comm, const lora::LoraConfig& c) {
  auto model = std::make_shared<test::TinyStackImpl>(false);
  zrt::lora::apply(*model, c);  // rank 0's draw wins: the engine broadcasts the model
  InitializeOptions io;
  io.comm = std::shared_ptr<comm::Comm>(&comm, [](comm::Comm*) {});
  return std::make_pair(model, initialize(model, test::config_for(Case{3}), io));
}

// The named parameters of `model` whose names contain `part`, gathered and copied.
std::map<std::string, at::Tensor> params_with(Engine& engine, torch::nn::Module& model,
                                              const std::string& part) {
  GatheredParameters access(engine);
  std::map<std::string, at::Tensor> out;
  for (const auto& p : model.named_parameters())
    if (p.key().find(part) != std::string::npos) out[p.key()] = p.value().detach().clone();
  return out;
}

// Sets the adapters' B non-zero (rank 0's values, written through a modifier gather).
void draw_lora_b(Engine& engine, torch::nn::Module& model) {
  GatheredParameters access(engine, /*modifier_rank=*/0);
  torch::NoGradGuard no_grad;
  for (auto& p : model.named_parameters())
    if (p.key().find(".lora_B.") != std::string::npos) p.value().normal_(0, 0.5);
}

// PEFT adapter folders under ZeRO-3: save_adapter at 2 ranks writes PEFT's names and
// adapter_config.json; load_adapter at 3 ranks brings the adapters back into a fresh model and
// touches nothing else; an adapter of another rank is refused naming the tensor.
TEST(Pretrained, AdapterFoldersRoundTrip) {
  test::TempDir dir("zrt_adapter");
  const lora::LoraConfig lc = tiny_lora();
  auto adapters = [](Engine& engine, torch::nn::Module& model) {
    return params_with(engine, model, ".lora_");
  };
  std::map<std::string, at::Tensor> saved;
  comm::run_local_world(2, [&](comm::Comm& comm) {
    auto made = adapted_stack(comm, lc);  // no structured binding: lambdas capture it (C++17)
    auto& model = made.first;
    auto& engine = made.second;
    draw_lora_b(*engine, *model);
    save_adapter(*engine, dir.path(), lc, "tiny");
    const auto mine = adapters(*engine, *model);
    if (comm.rank() == 0) saved = mine;
  });
  std::set<std::string> keys;
  for (const auto& [name, t] : ckpt::load_safetensors(dir / "adapter_model.safetensors").tensors)
    keys.insert(name);
  EXPECT_EQ(keys.size(), 6u);
  EXPECT_TRUE(keys.count("base_model.model.h1.fc.lora_B.weight"));
  ASSERT_EQ(saved.size(), 6u);
  const lora::LoraConfig read = read_adapter_config(dir.path());
  EXPECT_EQ(read.r, 4);
  comm::run_local_world(3, [&](comm::Comm& comm) {
    auto made = adapted_stack(comm, read);  // no structured binding: lambdas capture it (C++17)
    auto& model = made.first;
    auto& engine = made.second;
    test::TinyStackImpl fresh(false);
    load_adapter(*engine, dir.path());
    for (const auto& [name, t] : adapters(*engine, *model)) {
      EXPECT_TRUE(torch::equal(t, saved.at(name))) << name;
    }
    GatheredParameters access(*engine);
    for (const auto& p : fresh.named_parameters()) {
      EXPECT_TRUE(torch::equal(model->named_parameters()[p.key()], p.value())) << p.key();
    }
  });
  lora::LoraConfig other = lc;
  other.r = 2;
  comm::run_local_world(2, [&](comm::Comm& comm) {
    auto made = adapted_stack(comm, other);  // no structured binding: lambdas capture it (C++17)
    auto& model = made.first;
    auto& engine = made.second;
    expect_contains(test::error_of<CheckpointError>([&] { load_adapter(*engine, dir.path()); }),
                    "'base_model.model.h0.fc.lora_A.weight' is [4, 7] in the weights but [2, 7] "
                    "in the model");
  });
}

// save_merged at 2 ranks under ZeRO-3: the base with W + 2 B A in the adapted layers (alpha / r =
// 2), no adapter tensors, and the running model left as it was.
TEST(Pretrained, MergedFolderHoldsTheMergedWeights) {
  test::TempDir dir("zrt_merged");
  comm::run_local_world(2, [&](comm::Comm& comm) {
    auto made = adapted_stack(comm, tiny_lora());  // no structured binding (C++17 lambdas)
    auto& model = made.first;
    auto& engine = made.second;
    draw_lora_b(*engine, *model);
    const auto before = params_with(*engine, *model, "");  // to see save_merged leave it be
    save_merged(*engine, dir / "merged");
    for (const auto& [name, t] : params_with(*engine, *model, "")) {
      EXPECT_TRUE(torch::equal(t, before.at(name))) << name;
    }
    if (comm.rank() != 0) return;
    const auto merged = ckpt::load_safetensors(dir / "merged/model.safetensors").tensors;
    size_t base = 0;
    for (const auto& [name, value] : before) {
      if (name.find(".lora_") != std::string::npos) continue;
      ++base;
      const std::string layer = name.substr(0, name.rfind('.'));
      const bool adapted = name == layer + ".weight" && before.count(layer + ".lora_A.weight");
      const at::Tensor want =
          adapted ? value + before.at(layer + ".lora_B.weight")
                                .matmul(before.at(layer + ".lora_A.weight")) * 2.0
                  : value;
      EXPECT_EQ(adapted, !want.equal(value)) << name;  // B is not zero: merging shows
      bool found = false;
      for (const auto& saved : merged) {
        if (saved.first != name) continue;
        found = true;
        EXPECT_TRUE(torch::allclose(saved.second, want, 1e-6, 1e-6)) << name;
      }
      EXPECT_TRUE(found) << name;
    }
    EXPECT_EQ(merged.size(), base);  // the base's tensors, no adapter's
  });
}

}  // namespace
}  // namespace zrt
