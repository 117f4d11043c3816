// Engine checkpoints made in-process, and running tool binaries.
#include "tests/tools/checkpoint_factory.h"

#include <cstdio>
#include <filesystem>
#include <mutex>
#include <stdexcept>

#include <torch/torch.h>

#include "comm/local_comm.h"
#include "runtime/gathered_parameters.h"
#include "runtime/initialize.h"
#include "tests/support/tiny_model.h"

namespace zrt::test {
namespace {

Json engine_config(const CheckpointSpec& spec) {
  Json cfg = {
      {"train_micro_batch_size_per_gpu", 2},
      {"gradient_accumulation_steps", 2},
      {"gradient_clipping", 1.0},
      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 0.01}, {"weight_decay", 0.01}}}}},
      {"scheduler",
       {{"type", "WarmupLR"}, {"params", {{"warmup_max_lr", 0.01}, {"warmup_num_steps", 2}}}}},
      {"zero_optimization", {{"stage", spec.stage}, {"reduce_bucket_size", 40}}},
  };
  if (spec.bf16) cfg["bf16"] = {{"enabled", true}};
  return cfg;
}

}  // namespace

MadeCheckpoint make_engine_checkpoint(const std::string& save_dir, const CheckpointSpec& spec) {
  std::filesystem::create_directories(save_dir);
  MadeCheckpoint made;
  std::mutex mu;
  comm::run_local_world(spec.world, [&](comm::Comm& comm) {
    auto model = std::make_shared<TinyMlpImpl>(/*with_extras=*/true);
    InitializeOptions io;
    io.comm = std::shared_ptr<comm::Comm>(&comm, [](comm::Comm*) {});
    auto engine = initialize(model, engine_config(spec), io);
    for (int step = 0; step < spec.steps; ++step) {
      for (int micro = 0; micro < 2; ++micro) {
        auto [x, y] = tiny_batch(comm.rank() * 2 + micro, step, 2);
        auto out = model->forward(engine->to_model_dtype(x)).to(at::kFloat);
        engine->backward(torch::mse_loss(out, y));
        engine->step();
      }
    }
    const std::string dir = engine->save_checkpoint(save_dir);
    GatheredParameters all(*engine);
    if (comm.rank() == 0) {
      std::lock_guard<std::mutex> lock(mu);
      made.tag = std::filesystem::path(dir).filename().string();
      for (const auto& p : model->named_parameters()) {
        made.weights[p.key()] = p.value().detach().to(at::kFloat).clone();
      }
    }
  });
  return made;
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace zrt::test
