// checkpoint/hf_weights.h: the layouts transformers' save_pretrained writes (one safetensors
// file, safetensors shards with model.safetensors.index.json, pytorch_model.bin and its shards),
// ranged reads that read exactly the bytes asked for, and every error naming what is wrong.
// Files written by transformers itself are read in tests/peers (peer_hf_llama).
#include "checkpoint/hf_weights.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "checkpoint/pt/pt_file.h"
#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "tests/checkpoint/test_util.h"
#include "tests/support/error_of.h"

namespace zrt::ckpt {
namespace {

// The message `text` contains `part`.
void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "expected \"" << part << "\" in: " << text;
}

using test::TempDir;

const auto error_of = &zrt::test::error_of<CheckpointError>;

NamedTensors sample() {
  return {
      {"embed.weight", torch::arange(35, torch::kFloat).reshape({7, 5})},
      {"layers.0.w", torch::linspace(-1, 1, 33).to(torch::kBFloat16).reshape({3, 11})},
      {"layers.0.count", torch::arange(4, torch::kLong)},
      {"norm", torch::ones({5}, torch::kFloat16)},
  };
}

void expect_reads(const HfWeights& w, const NamedTensors& expected) {
  ASSERT_EQ(w.tensors().size(), expected.size());
  for (const auto& [name, t] : expected) {
    const WeightInfo* info = w.find(name);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_EQ(info->dtype, t.scalar_type()) << name;
    EXPECT_EQ(info->shape, t.sizes().vec()) << name;
    EXPECT_TRUE(torch::equal(w.read(name), t)) << name;
    const int64_t n = t.numel();
    for (int64_t begin : {int64_t{0}, int64_t{1}, n / 2, n}) {
      for (int64_t count : {int64_t{0}, int64_t{1}, n - begin}) {
        if (count > n - begin) continue;
        const uint64_t before = w.bytes_read();
        const at::Tensor part = w.read_range(name, begin, count);
        EXPECT_EQ(part.dim(), 1);
        EXPECT_TRUE(torch::equal(part, t.reshape({-1}).narrow(0, begin, count))) << name;
        if (w.files()[static_cast<size_t>(info->file)].find(".safetensors") != std::string::npos) {
          // A ranged read of safetensors reads exactly the elements asked for.
          EXPECT_EQ(w.bytes_read() - before, static_cast<uint64_t>(count) * t.element_size());
        }
      }
    }
  }
  EXPECT_EQ(w.find("missing"), nullptr);
}

Value state_dict_of(const NamedTensors& tensors) {
  Value sd = Value::ordered_dict();
  for (const auto& [name, t] : tensors) sd.as_dict().set(name, t);
  return sd;
}

TEST(HfWeights, OneSafetensorsFileFolderAndPath) {
  TempDir dir;
  save_safetensors(sample(), dir.path() + "/model.safetensors");
  expect_reads(HfWeights(dir.path()), sample());
  expect_reads(HfWeights(dir.path() + "/model.safetensors"), sample());
}

TEST(HfWeights, ShardedSafetensorsWithIndex) {
  TempDir dir;
  const NamedTensors all = sample();
  save_safetensors({all[0], all[2]}, dir.path() + "/model-00001-of-00002.safetensors");
  save_safetensors({all[1], all[3]}, dir.path() + "/model-00002-of-00002.safetensors");
  dir.write("model.safetensors.index.json",
            R"({"metadata": {"total_size": 234}, "weight_map": {
                "embed.weight": "model-00001-of-00002.safetensors",
                "layers.0.count": "model-00001-of-00002.safetensors",
                "layers.0.w": "model-00002-of-00002.safetensors",
                "norm": "model-00002-of-00002.safetensors"}})");
  const HfWeights w(dir.path());
  EXPECT_EQ(w.files().size(), 2u);
  expect_reads(w, all);
  EXPECT_EQ(w.find("norm")->file, 1);
}

TEST(HfWeights, PytorchModelBinAndSafetensorsPreferred) {
  TempDir dir;
  NamedTensors tensors = sample();
  // A tied pair: two names, one storage (what torch.save writes for tied weights).
  const at::Tensor shared = torch::arange(12, torch::kFloat);
  tensors.emplace_back("lm_head.weight", shared.view({3, 4}));
  tensors.emplace_back("tail", shared.narrow(0, 4, 8));
  save_pt(state_dict_of(tensors), dir.path() + "/pytorch_model.bin");
  expect_reads(HfWeights(dir.path()), tensors);
  // With both, the safetensors file is the one read (transformers' order).
  save_safetensors(sample(), dir.path() + "/model.safetensors");
  const HfWeights w(dir.path());
  expect_contains(w.files().at(0), "model.safetensors");
  EXPECT_EQ(w.find("tail"), nullptr);
}

TEST(HfWeights, ShardedBin) {
  TempDir dir;
  const NamedTensors all = sample();
  save_pt(state_dict_of({all[0], all[1]}), dir.path() + "/pytorch_model-00001-of-00002.bin");
  save_pt(state_dict_of({all[2], all[3]}), dir.path() + "/pytorch_model-00002-of-00002.bin");
  dir.write("pytorch_model.bin.index.json",
            R"({"weight_map": {"embed.weight": "pytorch_model-00001-of-00002.bin",
                "layers.0.w": "pytorch_model-00001-of-00002.bin",
                "layers.0.count": "pytorch_model-00002-of-00002.bin",
                "norm": "pytorch_model-00002-of-00002.bin"}})");
  expect_reads(HfWeights(dir.path()), all);
}

TEST(HfWeights, Errors) {
  TempDir dir;
  expect_contains(error_of([&] { HfWeights w(dir.path()); }),
                  ": no weights found (looked for model.safetensors, "
                  "model.safetensors.index.json, pytorch_model.bin and "
                  "pytorch_model.bin.index.json)");
  expect_contains(error_of([&] { HfWeights w(dir.path() + "/nothing"); }),
                  "nothing: no such file or folder of weights");
  const NamedTensors all = sample();
  save_safetensors({all[0], all[1]}, dir.path() + "/a.safetensors");
  save_safetensors({all[1]}, dir.path() + "/b.safetensors");
  auto with_index = [&](const std::string& json) {
    dir.write("model.safetensors.index.json", json);
    return error_of([&] { HfWeights w(dir.path()); });
  };
  expect_contains(with_index("{\"weight_map\": "), "model.safetensors.index.json: not valid JSON");
  expect_contains(with_index("{\"metadata\": {}}"), "index.json: no \"weight_map\" object");
  expect_contains(with_index(R"({"weight_map": {"embed.weight": "../a.safetensors"}})"),
                  "weight_map['embed.weight'] = '../a.safetensors' is not a file name in "
                  "the index's folder");
  expect_contains(with_index(R"({"weight_map": {"embed.weight": "c.safetensors"}})"),
                  "index.json: shard 'c.safetensors' is missing");
  expect_contains(with_index(R"({"weight_map": {"embed.weight": "a.safetensors"}})"),
                  "a.safetensors: holds 'layers.0.w', which " + dir.path() +
                      "/model.safetensors.index.json does not list");
  expect_contains(with_index(R"({"weight_map": {"embed.weight": "a.safetensors",
                "layers.0.w": "b.safetensors"}})"),
                  "a.safetensors: holds 'layers.0.w', which " + dir.path() +
                      "/model.safetensors.index.json maps to 'b.safetensors'");
  expect_contains(with_index(R"({"weight_map": {"embed.weight": "a.safetensors",
                "layers.0.w": "a.safetensors", "norm": "a.safetensors"}})"),
                  "index.json: maps 'norm' to 'a.safetensors', which does not hold it");
  expect_contains(with_index(R"({"weight_map": {"embed.weight": "a.safetensors",
                "layers.0.w": "a.safetensors", "x": "b.safetensors"}})"),
                  "b.safetensors: tensor 'layers.0.w' is also in " + dir.path() + "/a.safetensors");

  TempDir bin;
  Value sd = state_dict_of({all[0]});
  sd.as_dict().set("step", 3);
  save_pt(sd, bin.path() + "/pytorch_model.bin");
  expect_contains(error_of([&] { HfWeights w(bin.path()); }),
                  "pytorch_model.bin: 'step' holds a value of type int, not a tensor");

  TempDir good;
  save_safetensors(all, good.path() + "/model.safetensors");
  const HfWeights w(good.path());
  expect_contains(error_of([&] { w.read_range("embed.weight", 30, 6); }),
                  "model.safetensors: tensor 'embed.weight': elements [30, 36) lie outside "
                  "its 35");
  expect_contains(error_of([&] { w.read("nope"); }), ": has no tensor 'nope'");
}

}  // namespace
}  // namespace zrt::ckpt
