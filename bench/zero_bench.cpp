// zero_bench: step time, model-state memory, peak RSS (per rank) and bytes on the wire of one
// ZeRO configuration on one model, run under mpirun:
//
//   mpirun -np N build/bench/zero_bench --stage S [--offload] [--dtype bf16|fp32]
//          [--model blocks|mlp|gpt] [--layers L] [--width W] [--heads H] [--context T]
//          [--vocab V] [--batch 8] [--steps 10] [--warmup 2] [--lr 1e-4] [--no-prefetch] [--json]
//          [--nvme DIR [--sub-group-size 16777216] [--pipeline] [--buffer-count C]
//           [--aio-block-size 1048576] [--aio-queue-depth 8] [--aio-threads 1]]
//
// --nvme: the optimizer offloaded to NVMe (ZeRO-Infinity) with its swap folders in DIR; the row
// adds the swap traffic per step (the I/O engine's completed bytes and the kernel's
// /proc/self/io count) and the optimizer's streaming time with its I/O wait.
//
// Models: `blocks` (default), an MLP of residual blocks (~50M parameters with its defaults
// --layers 12 --width 2048); `mlp` and `gpt`, the zrt-train example's models (models/mlp.h,
// models/gpt.h) with its size flags and defaults (--layers 2 --width 64 --heads 4
// --context 32), on a fixed micro-batch per rank that tests/peers/twins.py reproduces
// (bench/peers/step.py times the same models in DeepSpeed, DDP and FSDP2).
//
// bench/zero_bench.sh runs the matrix (stages 0–3, offload, N = 1, 2, 4) and PyTorch's own DDP
// (gloo) on the same model and batch for comparison. Each run checks once that the loss is finite
// and falls, then times `steps` optimizer steps after `warmup` warm-up steps; the step time is the
// median over steps of the slowest rank.
//
// Under LD_PRELOAD=libzrt_pmpi_count.so (bench/zero_bench.sh with ZRT_PMPI=1) it also prints the
// bytes each rank handed to MPI during the timed steps, measured where they enter MPI
// (bench/README.md, "Measured bytes").
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>

#include <torch/torch.h>

#include "bench/harness.h"
#include "bench/pmpi/zrt_pmpi_count.h"
#include "comm/init.h"
#include "core/error.h"
#include "core/malloc_tuning.h"
#include "core/tool_main.h"
#include "models/gpt.h"
#include "models/mlp.h"
#include "optim/swap_space.h"
#include "runtime/initialize.h"
#include "runtime/model_states.h"
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

int64_t int_flag(int argc, char** argv, const char* name, int64_t fallback) {
  return std::stoll(flag_value(argc, argv, name, std::to_string(fallback)));
}

// The model under test, its fixed micro-batch on this rank and its loss.
struct Workload {
  std::shared_ptr<torch::nn::Module> model;
  std::function<torch::Tensor(Engine&)> loss;  // forward and loss of the micro-batch
  int64_t params = 0;
  std::string sizes;  // the size flags, as JSON object members
};

// `blocks`: the residual-block MLP, a fixed random input and target (the same on every rank).
Workload blocks_workload(int argc, char** argv, int64_t batch) {
  const int layers = static_cast<int>(int_flag(argc, argv, "--layers", 12));
  const int64_t width = int_flag(argc, argv, "--width", 2048);
  auto model = std::make_shared<StackImpl>(layers, width);
  torch::Tensor x = torch::randn({batch, width}).mul(0.5);
  torch::Tensor target = torch::randn({batch, width}).mul(0.5);
  Workload w;
  w.model = model;
  w.loss = [model, x, target](Engine& e) {
    return torch::mse_loss(model->forward(e.to_model_dtype(x)).to(torch::kFloat), target);
  };
  w.params = width * width * layers + width * layers;
  w.sizes = str("\"layers\": ", layers, ", \"width\": ", width);
  return w;
}

// `mlp`: the example's MLP; rank r's micro-batch is rows [r·batch, (r+1)·batch) of
// regression_data(world·batch, 1) (twins.py regression_data).
Workload mlp_workload(int argc, char** argv, int64_t batch, int rank, int world) {
  const int64_t layers = int_flag(argc, argv, "--layers", 2);
  const int64_t width = int_flag(argc, argv, "--width", 64);
  auto model = std::make_shared<models::MlpImpl>(width, layers);
  auto [x_all, y_all] = models::regression_data(world * batch, 1);
  torch::Tensor x = x_all.narrow(0, rank * batch, batch);
  torch::Tensor y = y_all.narrow(0, rank * batch, batch);
  Workload w;
  w.model = model;
  w.loss = [model, x, y](Engine& e) {
    return torch::mse_loss(model->forward(e.to_model_dtype(x)), y);
  };
  w.params = model->num_params();
  w.sizes = str("\"layers\": ", layers, ", \"width\": ", width);
  return w;
}

// `gpt`: the example's GPT; rank r's micro-batch is rows [r·batch, (r+1)·batch) of
// randint(vocab, (world·batch, context + 1)) from torch's CPU generator seeded 1: tokens are the
// first `context` columns, targets the last `context`.
Workload gpt_workload(int argc, char** argv, int64_t batch, int rank, int world) {
  models::GptConfig c;
  c.layers = int_flag(argc, argv, "--layers", 2);
  c.width = int_flag(argc, argv, "--width", 64);
  c.heads = int_flag(argc, argv, "--heads", 4);
  c.context = int_flag(argc, argv, "--context", 32);
  c.vocab = int_flag(argc, argv, "--vocab", 256);
  ZRT_CHECK_AS(UsageError, c.width % c.heads == 0, "--width must be a multiple of --heads");
  auto model = std::make_shared<models::GptImpl>(c);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
  at::Tensor all = at::randint(c.vocab, {world * batch, c.context + 1}, gen, at::kLong);
  at::Tensor mine = all.narrow(0, rank * batch, batch);
  torch::Tensor x = mine.narrow(1, 0, c.context).contiguous();
  torch::Tensor y = mine.narrow(1, 1, c.context).contiguous();
  Workload w;
  w.model = model;
  w.loss = [model, x, y](Engine&) {
    at::Tensor logits = model->forward(x);
    return torch::cross_entropy_loss(logits.view({-1, logits.size(-1)}), y.reshape({-1}));
  };
  w.params = model->num_params();
  w.sizes = str("\"layers\": ", c.layers, ", \"width\": ", c.width, ", \"heads\": ", c.heads,
                ", \"context\": ", c.context, ", \"vocab\": ", c.vocab);
  return w;
}

Workload make_workload(const std::string& kind, int argc, char** argv, int rank, int world) {
  const int64_t batch = int_flag(argc, argv, "--batch", 8);
  torch::manual_seed(0);  // the same initial weights on every rank and in the Python twins
  if (kind == "blocks") return blocks_workload(argc, argv, batch);
  if (kind == "mlp") return mlp_workload(argc, argv, batch, rank, world);
  if (kind == "gpt") return gpt_workload(argc, argv, batch, rank, world);
  throw UsageError(str("--model must be blocks, mlp or gpt, got '", kind, "'"));
}

// This process's peak resident set (getrusage), peak and current anonymous memory
// (/proc/self/status VmHWM, RssAnon), in MiB.
std::array<double, 3> own_memory_mib() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  std::array<double, 3> m{static_cast<double>(ru.ru_maxrss) / 1024.0, 0, 0};
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    std::istringstream in(line);
    std::string key;
    double kib = 0;
    in >> key >> kib;
    if (key == "VmHWM:") m[1] = kib / 1024.0;
    if (key == "RssAnon:") m[2] = kib / 1024.0;
  }
  return m;
}

// Collective: every rank's own_memory_mib(), as [rank][field].
std::vector<std::array<double, 3>> memory_per_rank(comm::Comm& comm) {
  at::Tensor t = at::zeros({comm.size(), 3}, at::kDouble);
  const auto mine = own_memory_mib();
  for (int i = 0; i < 3; ++i) t[comm.rank()][i] = mine[i];
  comm.all_reduce(t, comm::ReduceOp::kSum);
  std::vector<std::array<double, 3>> out(comm.size());
  for (int r = 0; r < comm.size(); ++r) {
    for (int i = 0; i < 3; ++i) out[r][i] = t[r][i].item<double>();
  }
  return out;
}

// One configuration's results, as rank 0 prints them (sizes in MiB).
struct Row {
  int stage;
  const char* variant;
  int ranks;
  std::string dtype, model, sizes;
  int64_t params;
  double step_ms, state_mib, wire_mib;
  std::vector<double> steps_ms;            // the slowest rank's time of each timed step
  std::vector<std::array<double, 3>> mem;  // per rank: ru_maxrss, VmHWM, RssAnon
  bool measured;                           // run under libzrt_pmpi_count.so
  std::array<double, 2> measured_mib;      // sent point-to-point, handed to collectives, per step
  double loss_first, loss_last;
  bool ok;
  std::string swap_text, swap_json;  // NVMe offload: the swap traffic per step (SwapMeter)
  double rss_max() const {
    double m = 0;
    for (const auto& r : mem) m = std::max(m, r[0]);
    return m;
  }
};

std::string json_list(const std::vector<double>& v, int decimals) {
  std::string s = "[";
  char buf[32];
  for (size_t i = 0; i < v.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%.*f", i ? ", " : "", decimals, v[i]);
    s += buf;
  }
  return s + "]";
}

std::string json_mem(const Row& r, int field) {
  std::vector<double> v;
  for (const auto& m : r.mem) v.push_back(m[field]);
  return json_list(v, 1);
}

void print_json(const Row& r) {
  char extra[160] = "";
  if (r.measured) {
    std::snprintf(extra, sizeof extra,
                  ", \"pmpi_p2p_mib_per_step\": %.3f, \"pmpi_coll_mib_per_step\": %.3f",
                  r.measured_mib[0], r.measured_mib[1]);
  }
  std::printf(
      "{\"stage\": %d, \"variant\": \"%s\", \"ranks\": %d, \"dtype\": \"%s\", \"model\": \"%s\", "
      "\"sizes\": {%s}, \"threads\": %d, \"params\": %lld, \"step_ms\": %.2f, \"steps_ms\": %s, "
      "\"model_state_mib\": %.1f, \"peak_rss_mib\": %.1f, \"rss_per_rank_mib\": %s, "
      "\"vmhwm_per_rank_mib\": %s, \"rss_anon_per_rank_mib\": %s, \"wire_mib_per_step\": %.1f%s, "
      "\"loss_first\": %.6f, \"loss_last\": %.6f, \"loss_falls\": %s%s}\n",
      r.stage, r.variant, r.ranks, r.dtype.c_str(), r.model.c_str(), r.sizes.c_str(),
      at::get_num_threads(), static_cast<long long>(r.params), r.step_ms,
      json_list(r.steps_ms, 3).c_str(), r.state_mib, r.rss_max(), json_mem(r, 0).c_str(),
      json_mem(r, 1).c_str(), json_mem(r, 2).c_str(), r.wire_mib, extra, r.loss_first, r.loss_last,
      r.ok ? "true" : "false", r.swap_json.c_str());
}

void print_row(const Row& r, bool json) {
  if (json) {
    print_json(r);
    return;
  }
  char extra[160] = "";
  if (r.measured) {
    std::snprintf(extra, sizeof extra,
                  " (measured: sent point-to-point %.1f, handed to collectives %.1f)",
                  r.measured_mib[0], r.measured_mib[1]);
  }
  std::printf(
      "%s stage %d%-10s N=%d %s %.1fM params: step %.1f ms, model states %.1f MiB/rank, "
      "peak RSS %.0f MiB/rank, wire %.1f MiB/step/rank%s, loss %.4f -> %.4f%s\n",
      r.model.c_str(), r.stage, r.variant, r.ranks, r.dtype.c_str(), r.params / 1e6, r.step_ms,
      r.state_mib, r.rss_max(), r.wire_mib, extra, r.loss_first, r.loss_last, r.swap_text.c_str());
}

Json engine_config(int argc, char** argv, int stage, bool offload, bool prefetch,
                   const std::string& dtype) {
  const double lr = std::stod(flag_value(argc, argv, "--lr", "1e-4"));
  Json cfg = {
      {"train_micro_batch_size_per_gpu", int_flag(argc, argv, "--batch", 8)},
      {"gradient_clipping", 0.0},
      {"optimizer",
       {{"type", "AdamW"},
        {"params", {{"lr", lr}, {"betas", {0.9, 0.999}}, {"eps", 1e-8}, {"weight_decay", 0.01}}}}},
      {"zero_optimization",
       {{"stage", stage},
        {"overlap_comm", true},
        {"reduce_bucket_size", 25000000},
        {"allgather_bucket_size", 50000000},
        {"stage3_prefetch_bucket_size", prefetch ? 50000000 : 0}}}};
  if (dtype == "bf16") cfg["bf16"] = {{"enabled", true}};
  if (offload) cfg["zero_optimization"]["offload_optimizer"] = {{"device", "cpu"}};
  const std::string nvme = flag_value(argc, argv, "--nvme", "");
  if (!nvme.empty()) {
    const bool pipeline = has_flag(argc, argv, "--pipeline");
    cfg["zero_optimization"]["offload_optimizer"] = {
        {"device", "nvme"},
        {"nvme_path", nvme},
        {"buffer_count", int_flag(argc, argv, "--buffer-count", pipeline ? 9 : 4)},
        {"pipeline_read", pipeline},
        {"pipeline_write", pipeline}};
    cfg["zero_optimization"]["sub_group_size"] = int_flag(argc, argv, "--sub-group-size", 1 << 24);
    cfg["aio"] = {{"block_size", int_flag(argc, argv, "--aio-block-size", 1 << 20)},
                  {"queue_depth", int_flag(argc, argv, "--aio-queue-depth", 8)},
                  {"intra_op_parallelism", int_flag(argc, argv, "--aio-threads", 1)}};
    if (has_flag(argc, argv, "--nvme-params")) {  // stage 3: the partitions on disk as well
      cfg["zero_optimization"]["offload_param"] = {
          {"device", "nvme"},
          {"nvme_path", nvme},
          {"buffer_count", int_flag(argc, argv, "--param-buffer-count", 5)},
          {"buffer_size", int_flag(argc, argv, "--param-buffer-size", 1 << 23)},
          {"max_in_cpu", 0}};
    }
  }
  return cfg;
}

// /proc/self/io's read_bytes and write_bytes: what this process made the storage layer move, as
// the kernel counts it (O_DIRECT requests included), not the engine's own bookkeeping.
std::array<double, 2> storage_io_bytes() {
  std::ifstream in("/proc/self/io");
  std::array<double, 2> out{0, 0};
  std::string key;
  double value = 0;
  while (in >> key >> value) {
    if (key == "read_bytes:") out[0] = value;
    if (key == "write_bytes:") out[1] = value;
  }
  return out;
}

// The swap traffic of the timed steps with NVMe offload, per step, the largest over ranks: the
// bytes the I/O engine completed, the bytes the kernel counted, the optimizer's streaming time and
// the part of it spent waiting for I/O.
class SwapMeter {
 public:
  explicit SwapMeter(Engine& engine) : swap_(engine.model_states().swap_space()) {}
  void begin() { start_ = sample(); }
  void end(comm::Comm& comm, int steps, Row& row) {
    if (swap_ == nullptr) return;
    const std::array<double, 6> stop = sample();
    at::Tensor t = at::empty({6}, at::kDouble);
    for (int i = 0; i < 6; ++i) t[i] = (stop[i] - start_[i]) / steps;
    comm.all_reduce(t, comm::ReduceOp::kMax);
    const double mib = 1 << 20;
    char text[256];
    std::snprintf(text, sizeof text,
                  ", swap read %.1f / write %.1f MiB/step (kernel: %.1f / %.1f), optimizer "
                  "stream %.1f ms/step of which I/O wait %.1f",
                  t[0].item<double>() / mib, t[1].item<double>() / mib, t[2].item<double>() / mib,
                  t[3].item<double>() / mib, t[4].item<double>() * 1e3, t[5].item<double>() * 1e3);
    row.swap_text = text;
    std::snprintf(text, sizeof text,
                  ", \"swap_read_mib\": %.2f, \"swap_write_mib\": %.2f, \"kernel_read_mib\": %.2f, "
                  "\"kernel_write_mib\": %.2f, \"stream_ms\": %.2f, \"io_wait_ms\": %.2f, "
                  "\"aio_backend\": \"%s\"",
                  t[0].item<double>() / mib, t[1].item<double>() / mib, t[2].item<double>() / mib,
                  t[3].item<double>() / mib, t[4].item<double>() * 1e3, t[5].item<double>() * 1e3,
                  swap_->backend_name());
    row.swap_json = text;
  }

 private:
  std::array<double, 6> sample() const {
    if (swap_ == nullptr) return {};
    const optim::SwapStats st = swap_->stats();
    const std::array<double, 2> io = storage_io_bytes();
    return {static_cast<double>(st.bytes_read),
            static_cast<double>(st.bytes_written),
            io[0],
            io[1],
            st.stream_seconds,
            st.io_wait_seconds};
  }
  std::shared_ptr<optim::SwapSpace> swap_;
  std::array<double, 6> start_{};
};

int run(int argc, char** argv) {
  const int stage = static_cast<int>(int_flag(argc, argv, "--stage", 0));
  const int steps = static_cast<int>(int_flag(argc, argv, "--steps", 10));
  const int warmup = static_cast<int>(int_flag(argc, argv, "--warmup", 2));
  const bool offload = has_flag(argc, argv, "--offload");
  const bool prefetch = !has_flag(argc, argv, "--no-prefetch");
  const std::string dtype = flag_value(argc, argv, "--dtype", "bf16");
  const std::string kind = flag_value(argc, argv, "--model", "blocks");
  const bool json = has_flag(argc, argv, "--json");

  auto comm = comm::init_from_env();
  Workload work = make_workload(kind, argc, argv, comm->rank(), comm->size());
  InitializeOptions io;
  io.comm = comm;
  auto engine =
      initialize(work.model, engine_config(argc, argv, stage, offload, prefetch, dtype), io);

  std::vector<double> losses;
  std::vector<double> times;
  engine->reset_comm_stats();  // the wire bytes of the steps only, not of initialize's broadcast
  SwapMeter swap(*engine);
  PmpiWindow pmpi;
  pmpi.mark("steps_begin", false);
  if (warmup == 0) swap.begin();
  for (int s = 0; s < steps + warmup; ++s) {
    comm->barrier();
    const double t0 = now_seconds();
    auto loss = work.loss(*engine);
    engine->backward(loss);
    engine->step();
    at::Tensor dt = at::full({1}, now_seconds() - t0, at::kDouble);
    comm->all_reduce(dt, comm::ReduceOp::kMax);
    losses.push_back(loss.item<double>());
    if (s >= warmup) times.push_back(dt.item<double>() * 1e3);
    if (s + 1 == warmup) swap.begin();
  }
  pmpi.mark("steps_end", true);
  const bool ok = std::isfinite(losses.back()) && losses.back() < losses.front();
  const auto mem = memory_per_rank(*comm);
  const auto bytes = engine->model_state_bytes();
  at::Tensor state = at::full({1}, static_cast<double>(bytes.total()), at::kDouble);
  comm->all_reduce(state, comm::ReduceOp::kMax);
  const double wire = engine->comm_stats().total_wire_bytes() / (steps + warmup);
  const std::array<double, 2> measured = pmpi.max_per_step(*comm, steps + warmup);
  const bool nvme = !flag_value(argc, argv, "--nvme", "").empty();
  Row row{stage,
          nvme                        ? "+nvme"
          : offload                   ? "+offload"
          : (stage == 3 && !prefetch) ? "-prefetch"
                                      : "",
          comm->size(),
          dtype,
          kind,
          work.sizes,
          work.params,
          median(times),
          state.item<double>() / (1 << 20),
          wire / (1 << 20),
          times,
          mem,
          pmpi.active(),
          {measured[0] / (1 << 20), measured[1] / (1 << 20)},
          losses.front(),
          losses.back(),
          ok};
  swap.end(*comm, steps, row);  // collective
  if (comm->rank() == 0) print_row(row, json);
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace zrt::bench

int main(int argc, char** argv) {
  // This program, not the library, opts in to returning large freed blocks to the system
  // (core/malloc_tuning.h): ZeRO-3's memory bound on models larger than one rank needs it.
  zrt::tune_malloc_for_large_models();
  return zrt::run_tool("zero_bench", [&] { return zrt::bench::run(argc, argv); });
}
