// engine_ckpt_bench: one Engine::save_checkpoint and load_checkpoint of a whole training state
// (model, fp32 masters, Adam moments, counters) after one training step, timed; run under mpirun
// by bench/peers/ckpt.py, which compares it with DeepSpeed and a plain writer:
//
//   mpirun -np N build/bench/engine_ckpt_bench --dir DIR [--stage 1] [--width 2048]
//          [--layers 16] [--no-load]
//
// The model is zrt-train's MLP (models/mlp.h; the Python twin is tests/peers/twins.py
// Mlp): input Linear(16, W), blocks h{i} = x + tanh(Linear(W, W)(x)), output Linear(W, 2), fp32,
// AdamW. After one step: a warm-up save to DIR/warmup (not timed, deleted), the timed save of tag
// global_step1 into DIR/ckpt (the whole commit: temp files, fsync, rename, directory fsync,
// manifest, `latest`), then loads of that tag: one untimed, one timed with the files in the page
// cache (warm), one timed after rank 0 dropped the files' pages with posix_fadvise(DONTNEED)
// (cold). Each time is from a barrier to the slowest rank's return. Rank 0 prints one JSON line
// {"save_s", "load_warm_s", "load_cold_s", ...}; DIR/ckpt is left for the caller to measure.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <torch/torch.h>

#include "bench/harness.h"
#include "comm/init.h"
#include "core/error.h"
#include "core/tool_main.h"
#include "models/mlp.h"
#include "runtime/initialize.h"
#include "zero/shard_unit.h"
#include <fcntl.h>
#include <unistd.h>

namespace zrt::bench {
namespace {

namespace fs = std::filesystem;

using models::MlpImpl;  // zrt-train's MLP (models/mlp.h)

int64_t int_flag(int argc, char** argv, const char* name, int64_t fallback) {
  return std::stoll(flag_value(argc, argv, name, std::to_string(fallback)));
}

// Drops the page-cache pages of every file under `dir` (the files are durable, so their pages
// are clean and DONTNEED evicts them).
void drop_pages(const std::string& dir) {
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY);
    ZRT_CHECK(fd >= 0, "open ", e.path().string(), ": ", std::strerror(errno));
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// Seconds of `fn` from a barrier to the slowest rank's return.
double timed(comm::Comm& comm, const std::function<void()>& fn) {
  comm.barrier();
  const double t0 = now_seconds();
  fn();
  at::Tensor dt = at::full({1}, now_seconds() - t0, at::kDouble);
  comm.all_reduce(dt, comm::ReduceOp::kMax);
  return dt.item<double>();
}

int run(int argc, char** argv) {
  const std::string dir = flag_value(argc, argv, "--dir", "");
  ZRT_CHECK(!dir.empty(), "engine_ckpt_bench: --dir is required");
  const int stage = static_cast<int>(int_flag(argc, argv, "--stage", 1));
  const int64_t width = int_flag(argc, argv, "--width", 2048);
  const int64_t layers = int_flag(argc, argv, "--layers", 16);
  const bool load = !has_flag(argc, argv, "--no-load");

  auto comm = comm::init_from_env();
  torch::manual_seed(42);
  auto model = std::make_shared<MlpImpl>(width, layers);
  Json cfg = {{"train_micro_batch_size_per_gpu", 4},
              {"gradient_accumulation_steps", 1},
              {"optimizer",
               {{"type", "AdamW"},
                {"params",
                 {{"lr", 1e-3}, {"betas", {0.9, 0.999}}, {"eps", 1e-8}, {"weight_decay", 0.01}}}}},
              {"zero_optimization", {{"stage", stage}}},
              {"steps_per_print", 1000}};
  InitializeOptions io;
  io.comm = comm;
  auto engine = initialize(model, cfg, io);
  const double t_step = timed(*comm, [&] {
    const at::Tensor x = torch::rand({4, 16}).mul(2).sub(1);
    engine->backward(torch::mse_loss(model->forward(x), torch::zeros({4, 2})));
    engine->step();
  });
  const std::string warm_dir = dir + "/warmup";
  const std::string save_dir = dir + "/ckpt";
  engine->save_checkpoint(warm_dir, std::string("global_step1"));
  comm->barrier();
  if (comm->rank() == 0) fs::remove_all(warm_dir);
  const double t_save = timed(*comm, [&] { engine->save_checkpoint(save_dir); });
  double t_warm = -1, t_cold = -1;
  if (load) {
    engine->load_checkpoint(save_dir);  // untimed: first-call costs
    t_warm = timed(*comm, [&] { engine->load_checkpoint(save_dir); });
    if (comm->rank() == 0) drop_pages(save_dir);
    t_cold = timed(*comm, [&] { engine->load_checkpoint(save_dir); });
  }
  if (comm->rank() == 0) {
    const int64_t params = 17 * width + layers * (width * width + width) + 2 * width + 2;
    std::printf(
        "{\"framework\": \"zerort\", \"stage\": %d, \"world\": %d, \"params\": %lld, "
        "\"step_s\": %.4f, \"save_s\": %.4f, \"load_warm_s\": %.4f, \"load_cold_s\": %.4f}\n",
        stage, comm->size(), static_cast<long long>(params), t_step, t_save, t_warm, t_cold);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace zrt::bench

int main(int argc, char** argv) {
  return zrt::run_tool("engine_ckpt_bench", [&] { return zrt::bench::run(argc, argv); });
}
