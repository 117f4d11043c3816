// zero_bench: step time, model-state memory, peak RSS and bytes on the wire of one ZeRO
// configuration on an MLP of residual blocks (~50M parameters by default), run under mpirun:
//
//   mpirun -np N build/bench/zero_bench --stage S [--offload] [--dtype bf16|fp32]
//          [--layers 12] [--width 2048] [--batch 8] [--steps 10] [--no-prefetch] [--json]
//
// bench/zero_bench.sh runs the matrix (stages 0–3, offload, N = 1, 2, 4) and PyTorch's own DDP
// (gloo) on the same model and batch for comparison. Each run checks once that the loss is finite
// and falls, then times `steps` optimizer steps after 2 warm-up steps; the step time is the median
// over steps of the slowest rank.
//
// Under LD_PRELOAD=libzrt_pmpi_count.so (bench/zero_bench.sh with ZRT_PMPI=1) it also prints the
// bytes each rank handed to MPI during the timed steps, measured where they enter MPI
// (bench/README.md, "Measured bytes").
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <torch/torch.h>

#include "bench/harness.h"
#include "bench/pmpi/zrt_pmpi_count.h"
#include "comm/init.h"
#include "core/tool_main.h"
#include "runtime/initialize.h"
#include "zero/shard_unit.h"
#include <dlfcn.h>
#include <sys/resource.h>

namespace zrt::bench {
namespace {

struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(int64_t width) { fc = register_module("fc", torch::nn::Linear(width, width)); }
  torch::Tensor forward(const torch::Tensor& x) { return x + torch::tanh(fc->forward(x)); }
  torch::nn::Linear fc{nullptr};
};

struct StackImpl : torch::nn::Module {
  StackImpl(int layers, int64_t width) {
    for (int i = 0; i < layers; ++i) {
      blocks.push_back(
          register_module("h" + std::to_string(i), std::make_shared<ShardUnit<BlockImpl>>(width)));
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    for (auto& b : blocks) x = b->forward(x);
    return x;
  }
  std::vector<std::shared_ptr<ShardUnit<BlockImpl>>> blocks;
};

// The counters of libzrt_pmpi_count.so over the steps, when the process runs under it.
class PmpiWindow {
 public:
  PmpiWindow()
      : totals_(reinterpret_cast<zrt_pmpi_totals_fn>(dlsym(RTLD_DEFAULT, "zrt_pmpi_totals"))),
        write_(reinterpret_cast<zrt_pmpi_write_fn>(dlsym(RTLD_DEFAULT, "zrt_pmpi_write"))) {}

  bool active() const { return totals_ != nullptr && write_ != nullptr; }
  // Snapshots this rank's counters and appends them to ZRT_PMPI_OUT under `label`.
  void mark(const char* label, bool end) {
    if (!active()) return;
    totals_(end ? end_.data() : begin_.data());
    write_(label);
  }
  // Collective: every rank must call this. The largest over ranks of the point-to-point bytes
  // sent and the bytes handed to collectives between the two marks, per step.
  std::array<double, 2> max_per_step(comm::Comm& comm, int steps) const {
    at::Tensor t = at::zeros({2}, at::kDouble);
    double* v = t.data_ptr<double>();
    v[0] = static_cast<double>(end_[ZRT_PMPI_P2P_SEND_BYTES] - begin_[ZRT_PMPI_P2P_SEND_BYTES]);
    v[1] = static_cast<double>(end_[ZRT_PMPI_COLL_BYTES] - begin_[ZRT_PMPI_COLL_BYTES]);
    comm.all_reduce(t, comm::ReduceOp::kMax);
    return {v[0] / steps, v[1] / steps};
  }

 private:
  zrt_pmpi_totals_fn totals_;
  zrt_pmpi_write_fn write_;
  std::array<long long, ZRT_PMPI_NUM_TOTALS> begin_{};
  std::array<long long, ZRT_PMPI_NUM_TOTALS> end_{};
};

// One configuration's results, as rank 0 prints them (sizes in MiB).
struct Row {
  int stage;
  const char* variant;
  int ranks;
  std::string dtype;
  int64_t params;
  double step_ms, state_mib, rss_mib, wire_mib;
  bool measured;                       // run under libzrt_pmpi_count.so
  std::array<double, 2> measured_mib;  // sent point-to-point, handed to collectives, per step
  double loss_first, loss_last;
  bool ok;
};

void print_row(const Row& r, bool json) {
  char extra[160] = "";
  if (json) {
    if (r.measured) {
      std::snprintf(extra, sizeof extra,
                    ", \"pmpi_p2p_mib_per_step\": %.3f, \"pmpi_coll_mib_per_step\": %.3f",
                    r.measured_mib[0], r.measured_mib[1]);
    }
    std::printf(
        "{\"stage\": %d, \"variant\": \"%s\", \"ranks\": %d, \"dtype\": \"%s\", \"params\": %lld, "
        "\"step_ms\": %.2f, \"model_state_mib\": %.1f, \"peak_rss_mib\": %.1f, "
        "\"wire_mib_per_step\": %.1f%s, \"loss_falls\": %s}\n",
        r.stage, r.variant, r.ranks, r.dtype.c_str(), static_cast<long long>(r.params), r.step_ms,
        r.state_mib, r.rss_mib, r.wire_mib, extra, r.ok ? "true" : "false");
    return;
  }
  if (r.measured) {
    std::snprintf(extra, sizeof extra,
                  " (measured: sent point-to-point %.1f, handed to collectives %.1f)",
                  r.measured_mib[0], r.measured_mib[1]);
  }
  std::printf(
      "stage %d%-10s N=%d %s %.1fM params: step %.1f ms, model states %.1f MiB/rank, "
      "peak RSS %.0f MiB/rank, wire %.1f MiB/step/rank%s, loss %.4f -> %.4f\n",
      r.stage, r.variant, r.ranks, r.dtype.c_str(), r.params / 1e6, r.step_ms, r.state_mib,
      r.rss_mib, r.wire_mib, extra, r.loss_first, r.loss_last);
}

int64_t int_flag(int argc, char** argv, const char* name, int64_t fallback) {
  return std::stoll(flag_value(argc, argv, name, std::to_string(fallback)));
}

int run(int argc, char** argv) {
  const int stage = static_cast<int>(int_flag(argc, argv, "--stage", 0));
  const int layers = static_cast<int>(int_flag(argc, argv, "--layers", 12));
  const int64_t width = int_flag(argc, argv, "--width", 2048);
  const int64_t batch = int_flag(argc, argv, "--batch", 8);
  const int steps = static_cast<int>(int_flag(argc, argv, "--steps", 10));
  const bool offload = has_flag(argc, argv, "--offload");
  const bool prefetch = !has_flag(argc, argv, "--no-prefetch");
  const std::string dtype = flag_value(argc, argv, "--dtype", "bf16");
  const bool json = has_flag(argc, argv, "--json");

  auto comm = comm::init_from_env();
  torch::manual_seed(0);
  auto model = std::make_shared<StackImpl>(layers, width);
  Json cfg = {{"train_micro_batch_size_per_gpu", batch},
              {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-4}}}}},
              {"zero_optimization",
               {{"stage", stage},
                {"overlap_comm", true},
                {"reduce_bucket_size", 25000000},
                {"allgather_bucket_size", 50000000},
                {"stage3_prefetch_bucket_size", prefetch ? 50000000 : 0}}}};
  if (dtype == "bf16") cfg["bf16"] = {{"enabled", true}};
  if (offload) cfg["zero_optimization"]["offload_optimizer"] = {{"device", "cpu"}};
  InitializeOptions io;
  io.comm = comm;
  auto engine = initialize(model, cfg, io);
  const int64_t params = width * width * layers + width * layers;

  torch::Tensor x = torch::randn({batch, width}).mul(0.5);
  torch::Tensor target = torch::randn({batch, width}).mul(0.5);
  std::vector<double> losses;
  std::vector<double> times;
  engine->reset_comm_stats();  // the wire bytes of the steps only, not of initialize's broadcast
  PmpiWindow pmpi;
  pmpi.mark("steps_begin", false);
  for (int s = 0; s < steps + 2; ++s) {
    comm->barrier();
    const double t0 = now_seconds();
    auto out = model->forward(engine->to_model_dtype(x));
    auto loss = torch::mse_loss(out.to(torch::kFloat), target);
    engine->backward(loss);
    engine->step();
    at::Tensor dt = at::full({1}, now_seconds() - t0, at::kDouble);
    comm->all_reduce(dt, comm::ReduceOp::kMax);
    losses.push_back(loss.item<double>());
    if (s >= 2) times.push_back(dt.item<double>());
  }
  pmpi.mark("steps_end", true);
  const bool ok = std::isfinite(losses.back()) && losses.back() < losses.front();
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  at::Tensor rss = at::full({1}, static_cast<double>(ru.ru_maxrss) / 1024.0, at::kDouble);
  comm->all_reduce(rss, comm::ReduceOp::kMax);
  const auto bytes = engine->model_state_bytes();
  at::Tensor state = at::full({1}, static_cast<double>(bytes.total()), at::kDouble);
  comm->all_reduce(state, comm::ReduceOp::kMax);
  const double wire = engine->comm_stats().total_wire_bytes() / (steps + 2);
  const std::array<double, 2> measured = pmpi.max_per_step(*comm, steps + 2);
  if (comm->rank() == 0) {
    Row row{stage,
            offload ? "+offload" : (stage == 3 && !prefetch ? "-prefetch" : ""),
            comm->size(),
            dtype,
            params,
            median(times) * 1e3,
            state.item<double>() / (1 << 20),
            rss.item<double>(),
            wire / (1 << 20),
            pmpi.active(),
            {measured[0] / (1 << 20), measured[1] / (1 << 20)},
            losses.front(),
            losses.back(),
            ok};
    print_row(row, json);
  }
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace zrt::bench

int main(int argc, char** argv) {
  return zrt::run_tool("zero_bench", [&] { return zrt::bench::run(argc, argv); });
}
