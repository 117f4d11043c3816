// NVMe offload (ZeRO-Infinity: optimizer states, optim/swap_space.h, and stage-3 parameters,
// zero/param_swapper.h) through the engine, ranks as threads:
// bitwise the same training as CPU offload and as no offload at stages 1-3, fp32 and bf16, 1-3
// ranks, whatever the sub-group size and pipeline; checkpoints that move between NVMe, CPU and no
// offload; the swap folder's life; and the faults (deleted swap file, I/O error, full disk), each
// a clear error naming the file, after which the last checkpoint still loads.
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "comm/local_comm.h"
#include "core/error.h"
#include "optim/swap_space.h"
#include "runtime/gathered_parameters.h"
#include "runtime/initialize.h"
#include "runtime/model_states.h"
#include "runtime/stage3_model_states.h"
#include "tests/runtime/parity.h"
#include "tests/support/error_of.h"
#include "tests/support/temp_dir.h"
#include "zero/param_swapper.h"
#include <sys/mount.h>
#include <unistd.h>

namespace zrt {
namespace {

namespace fs = std::filesystem;
using test::Case;
using test::Precision;

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE((text).find(part), std::string::npos) << "'" << (part) << "' not in: " << (text)

// TinyStack's shape at width 48 (7635 parameters): partitions of several 1024-element sub-groups
// (the swap unit is a page of floats) at every world size here.
struct WideStackImpl : torch::nn::Module {
  WideStackImpl() {
    in = register_module("input", torch::nn::Linear(5, 48));
    for (int i = 0; i < 3; ++i) {
      blocks.push_back(register_module(std::string("h").append(std::to_string(i)),
                                       std::make_shared<ShardUnit<test::TinyBlockImpl>>(48)));
    }
    out = register_module("output", torch::nn::Linear(48, 3));
    test::fill_by_order(*this, 0.29f, 0.2f);
  }
  torch::Tensor forward(torch::Tensor x) {
    x = in->forward(x);
    for (auto& b : blocks) x = b->forward(x);
    return out->forward(x);
  }
  torch::nn::Linear in{nullptr}, out{nullptr};
  std::vector<std::shared_ptr<ShardUnit<test::TinyBlockImpl>>> blocks;
};

enum class Offload { kNone, kCpu, kNvme };

struct OffloadRun {
  Offload offload = Offload::kNone;
  std::string nvme_path;
  int64_t sub_group_size = 16;  // rounded up to 1024: several sub-groups per partition
  bool pipeline_read = false;
  bool pipeline_write = false;
  int64_t buffer_count = 4;
  // offload_param (stage 3): kNone, kCpu or kNvme, with the NVMe keys.
  Offload params = Offload::kNone;
  int64_t max_in_cpu = 0;  // 0: every partition on disk
  int64_t param_buffer_count = 5;
  int64_t param_buffer_size = 100000000;
};

Json config_of(const Case& c, const OffloadRun& run) {
  Json cfg = test::config_for(c);
  Json& z = cfg["zero_optimization"];
  if (run.offload == Offload::kCpu) z["offload_optimizer"] = {{"device", "cpu"}};
  if (run.offload == Offload::kNvme) {
    z["offload_optimizer"] = {{"device", "nvme"},
                              {"nvme_path", run.nvme_path},
                              {"buffer_count", run.buffer_count},
                              {"pipeline_read", run.pipeline_read},
                              {"pipeline_write", run.pipeline_write}};
    z["sub_group_size"] = run.sub_group_size;
    cfg["aio"] = {{"block_size", 4096}, {"queue_depth", 4}};
  }
  // cfg["aio"] may have moved cfg's members (an ordered map is a vector): no `z` from here on.
  Json& zp = cfg["zero_optimization"];
  if (run.params == Offload::kCpu) zp["offload_param"] = {{"device", "cpu"}};
  if (run.params == Offload::kNvme) {
    zp["offload_param"] = {{"device", "nvme"},
                           {"nvme_path", run.nvme_path},
                           {"buffer_count", run.param_buffer_count},
                           {"buffer_size", run.param_buffer_size},
                           {"max_in_cpu", run.max_in_cpu}};
    cfg["aio"] = {{"block_size", 4096}, {"queue_depth", 4}};
  }
  return cfg;
}

std::shared_ptr<comm::Comm> borrow(comm::Comm& comm) {
  return std::shared_ptr<comm::Comm>(&comm, [](comm::Comm*) {});
}

// Trains `steps` steps (from `first_step`'s batches) and returns the losses.
std::vector<double> train(Engine& engine, WideStackImpl& model, const Case& c, int rank, int steps,
                          int first_step = 0) {
  std::vector<double> losses;
  for (int step = first_step; step < first_step + steps; ++step) {
    for (int s = 0; s < c.gas; ++s) {
      auto [x, y] = test::tiny_batch(rank, step * c.gas + s);
      auto loss = torch::mse_loss(model.forward(engine.to_model_dtype(x)).to(at::kFloat), y);
      engine.backward(loss);
      engine.step();
      losses.push_back(loss.item<double>());
    }
  }
  return losses;
}

// Every parameter whole (gathered at stage 3), cloned.
std::map<std::string, at::Tensor> whole_params(Engine& engine, torch::nn::Module& model) {
  std::optional<GatheredParameters> access;
  if (engine.zero_stage() == 3) access.emplace(engine);
  std::map<std::string, at::Tensor> out;
  for (const auto& p : model.named_parameters()) out[p.key()] = p.value().detach().clone();
  return out;
}

struct Result {
  std::vector<double> losses;
  std::map<std::string, at::Tensor> params;
  std::vector<at::Tensor> masters;
};

Result train_run(comm::Comm& comm, const Case& c, const OffloadRun& run, int steps) {
  auto model = std::make_shared<WideStackImpl>();
  InitializeOptions io;
  io.comm = borrow(comm);
  auto engine = initialize(model, config_of(c, run), io);
  Result r;
  r.losses = train(*engine, *model, c, comm.rank(), steps);
  r.params = whole_params(*engine, *model);
  for (size_t g = 0; g < engine->model_states().targets().size(); ++g) {
    r.masters.push_back(runtime::master_values(engine->model_states(), g).clone());
  }
  return r;
}

void expect_bitwise(const Result& a, const Result& b, const std::string& what) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) EXPECT_EQ(a.losses[i], b.losses[i]) << what << i;
  for (const auto& [name, t] : a.params) {
    EXPECT_TRUE(at::equal(t, b.params.at(name))) << what << " parameter " << name;
  }
  ASSERT_EQ(a.masters.size(), b.masters.size());
  for (size_t g = 0; g < a.masters.size(); ++g) {
    EXPECT_TRUE(at::equal(a.masters[g], b.masters[g])) << what << " fp32 master of group " << g;
  }
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  return out;
}

// After a fault: a new engine (`run`; by default the optimizer on NVMe in `dir`) loads dir/ckpt,
// holds `saved`, and trains a step.
void expect_checkpoint_resumes(comm::Comm& comm, const Case& c, const std::string& dir,
                               const std::map<std::string, at::Tensor>& saved,
                               std::optional<OffloadRun> run = std::nullopt) {
  InitializeOptions io;
  io.comm = borrow(comm);
  auto model = std::make_shared<WideStackImpl>();
  auto engine = initialize(model, config_of(c, run.value_or(OffloadRun{Offload::kNvme, dir})), io);
  ASSERT_TRUE(engine->load_checkpoint(dir + "/ckpt").has_value());
  for (const auto& [name, t] : whole_params(*engine, *model)) {
    EXPECT_TRUE(at::equal(t, saved.at(name))) << name;
  }
  train(*engine, *model, c, comm.rank(), 1, 1);
}

class NvmeOffload : public ::testing::TestWithParam<int> {};

// The acceptance matrix: stages 1-3 × fp32 / bf16 (AdamW, fp32 gradients) × 1-3 ranks, NVMe vs CPU
// offload vs none, all bitwise, with sub-groups of 16 elements and every pipeline setting.
TEST_P(NvmeOffload, BitwiseEqualToCpuOffloadAndToNoOffload) {
  const int world = GetParam();
  test::TempDir dir("zrt_nvme");
  int variant = 0;
  for (int stage : {1, 2, 3}) {
    for (Precision precision : {Precision::kFp32, Precision::kBf16Adam}) {
      const Case c{stage, precision, /*gas=*/2, /*clip=*/true, false};
      OffloadRun nvme{Offload::kNvme, dir.path()};
      nvme.pipeline_read = variant % 2 == 1;
      nvme.pipeline_write = variant % 4 >= 2;
      nvme.buffer_count = 9;
      ++variant;
      const std::string what = test::describe(c) + " world " + std::to_string(world) + ": ";
      comm::run_local_world(world, [&](comm::Comm& comm) {
        const Result none = train_run(comm, c, OffloadRun{Offload::kNone}, 4);
        const Result cpu = train_run(comm, c, OffloadRun{Offload::kCpu}, 4);
        const Result swapped = train_run(comm, c, nvme, 4);
        expect_bitwise(cpu, swapped, what + "NVMe vs CPU offload");
        expect_bitwise(none, swapped, what + "NVMe vs no offload");
      });
      EXPECT_TRUE(entries(dir.path()).empty()) << "swap folders left behind";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, NvmeOffload, ::testing::Values(1, 2, 3),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

// Parameters on NVMe (offload_param "nvme", Note [Swapped partitions]): stage 3 × fp32 / bf16 ×
// 1-3 ranks, bitwise the same as parameters and optimizer offloaded to the CPU and as no offload,
// with the optimizer on the CPU (its copies written to disk after the step) or on NVMe too (written
// per sub-group), every partition on disk or a max_in_cpu prefix kept in memory, and few buffers.
class NvmeParamOffload : public ::testing::TestWithParam<int> {};

TEST_P(NvmeParamOffload, BitwiseEqualToCpuOffloadAndToNoOffload) {
  const int world = GetParam();
  test::TempDir dir("zrt_nvme");
  for (Precision precision : {Precision::kFp32, Precision::kBf16Adam}) {
    const Case c{3, precision, /*gas=*/2, /*clip=*/true, false};
    OffloadRun cpu{Offload::kCpu};
    cpu.params = Offload::kCpu;
    OffloadRun params_only{Offload::kCpu, dir.path()};
    params_only.params = Offload::kNvme;
    params_only.param_buffer_count = 2;  // one read ahead at most
    OffloadRun both{Offload::kNvme, dir.path()};
    both.params = Offload::kNvme;
    both.pipeline_read = both.pipeline_write = true;
    both.buffer_count = 9;
    OffloadRun split = both;
    split.max_in_cpu = 3000;  // the first parameters' partitions stay in memory
    const std::string what = test::describe(c) + " world " + std::to_string(world) + ": ";
    comm::run_local_world(world, [&](comm::Comm& comm) {
      const Result none = train_run(comm, c, OffloadRun{Offload::kNone}, 4);
      const Result reference = train_run(comm, c, cpu, 4);
      expect_bitwise(reference, none, what + "CPU offload vs none");
      expect_bitwise(reference, train_run(comm, c, params_only, 4), what + "params on NVMe");
      expect_bitwise(reference, train_run(comm, c, both, 4), what + "params and optimizer on NVMe");
      expect_bitwise(reference, train_run(comm, c, split, 4), what + "max_in_cpu 3000");
    });
    EXPECT_TRUE(entries(dir.path()).empty()) << "swap folders left behind";
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, NvmeParamOffload, ::testing::Values(1, 2, 3),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

// The parameter swap folder per rank, the partitions on disk and not in memory, the units read
// ahead of their gathers once the trace is known, and the folder gone with the engine.
TEST(NvmeParamOffloadSingle, SwapFolderReadAheadAndMemory) {
  test::TempDir dir("zrt_nvme");
  const Case c{3, Precision::kBf16Adam, 1, false, false};
  comm::run_local_world(2, [&](comm::Comm& comm) {
    auto model = std::make_shared<WideStackImpl>();
    InitializeOptions io;
    io.comm = borrow(comm);
    OffloadRun run{Offload::kNvme, dir.path()};
    run.params = Offload::kNvme;
    auto engine = initialize(model, config_of(c, run), io);
    auto& states = dynamic_cast<runtime::Stage3ModelStates&>(engine->model_states());
    const zero::ParamSwapper* swapper = states.layout().swapper();
    ASSERT_NE(swapper, nullptr);
    EXPECT_CONTAINS(swapper->folder(),
                    dir.path() + "/zerort-param-rank" + std::to_string(comm.rank()) + "-");
    EXPECT_EQ(entries(swapper->folder()), std::vector<std::string>{"g0.param.swp"});
    train(*engine, *model, c, comm.rank(), 1);
    const zero::ParamSwapStats first = swapper->stats();
    EXPECT_EQ(first.read_ahead_hits, 0) << "no trace yet in the first step";
    train(*engine, *model, c, comm.rank(), 2, 1);
    const zero::ParamSwapStats later = swapper->stats();
    // Each step reads each unit at least once (again for its backward when it was released).
    EXPECT_GE(later.unit_reads - first.unit_reads, 2 * 3);
    EXPECT_GT(later.read_ahead_hits, 0);
    EXPECT_GT(later.bytes_written, first.bytes_written) << "the step writes the partitions back";
    const runtime::ModelStateBytes bytes = engine->model_state_bytes();
    EXPECT_EQ(bytes.params, 0) << "every partition is on disk";
    EXPECT_EQ(bytes.master, 0);
    EXPECT_GE(bytes.swapped, later.swapped_bytes + 3 * 4 * swapper->numel(0));
    const std::string folder = swapper->folder();
    engine.reset();
    EXPECT_FALSE(fs::exists(folder));
  });
}

// A unit whose partitions do not fit one buffer is a configuration error naming the unit and the
// buffer_size it needs.
TEST(NvmeParamOffloadSingle, BufferTooSmallIsAConfigError) {
  test::TempDir dir("zrt_nvme");
  const Case c{3, Precision::kFp32, 1, false, false};
  comm::run_local_world(1, [&](comm::Comm& comm) {
    auto model = std::make_shared<WideStackImpl>();
    InitializeOptions io;
    io.comm = borrow(comm);
    OffloadRun run{Offload::kCpu, dir.path()};
    run.params = Offload::kNvme;
    run.param_buffer_size = 100;
    const std::string error =
        test::error_of<ConfigError>([&] { initialize(model, config_of(c, run), io); });
    EXPECT_CONTAINS(error, "offload_param.buffer_size: unit 0's parameter partitions need ");
    EXPECT_CONTAINS(error, "buffer_size is 100");
    EXPECT_TRUE(entries(dir.path()).empty());
  });
}

// One folder per rank, fresh per engine, files reserved for three states per group, streamed
// bytes counted by the I/O engine, the folder gone when the engine is.
TEST(NvmeOffloadSingle, SwapFolderAndTraffic) {
  test::TempDir dir("zrt_nvme");
  const Case c{2, Precision::kFp32, 1, false, false};
  comm::run_local_world(2, [&](comm::Comm& comm) {
    auto model = std::make_shared<WideStackImpl>();
    InitializeOptions io;
    io.comm = borrow(comm);
    auto engine = initialize(model, config_of(c, OffloadRun{Offload::kNvme, dir.path()}), io);
    auto swap = engine->model_states().swap_space();
    ASSERT_NE(swap, nullptr);
    EXPECT_CONTAINS(swap->folder(),
                    dir.path() + "/zerort-swap-rank" + std::to_string(comm.rank()) + "-");
    EXPECT_EQ(entries(swap->folder()).size(), 3u * swap->num_groups());
    const optim::SwapStats before = swap->stats();
    train(*engine, *model, c, comm.rank(), 1);
    const optim::SwapStats after = swap->stats();
    int64_t padded = 0;
    for (int g = 0; g < swap->num_groups(); ++g) padded += (swap->numel(g) + 1023) / 1024 * 1024;
    // One step reads and writes every state of every sub-group once (whole pages).
    EXPECT_GE(after.bytes_read - before.bytes_read, 3 * 4 * swap->numel(0));
    EXPECT_LE(after.bytes_read - before.bytes_read, 3 * 4 * padded * 2);
    EXPECT_EQ(after.bytes_written - before.bytes_written, after.bytes_read - before.bytes_read);
    const runtime::ModelStateBytes bytes = engine->model_state_bytes();
    EXPECT_EQ(bytes.master, 0) << "the masters are on disk";
    EXPECT_EQ(bytes.optimizer, 0) << "the moments are on disk";
    EXPECT_GT(bytes.swapped, 0);
    const std::string folder = swap->folder();
    swap.reset();
    engine.reset();
    EXPECT_FALSE(fs::exists(folder));
  });
}

// A checkpoint saved with NVMe offload resumes without offload, and the other way round, and the
// continued training is bitwise the same as if nothing had changed.
TEST(NvmeOffloadSingle, CheckpointsMoveBetweenNvmeAndNoOffload) {
  test::TempDir dir("zrt_nvme");
  for (int stage : {2, 3}) {
    for (Precision precision : {Precision::kFp32, Precision::kBf16Adam}) {
      const Case c{stage, precision, 1, false, false};
      const std::string what = test::describe(c) + ": ";
      const OffloadRun nvme{Offload::kNvme, dir.path()};
      const OffloadRun none{Offload::kNone};
      OffloadRun all_nvme = nvme;  // parameters too (stage 3)
      all_nvme.params = Offload::kNvme;
      std::vector<std::pair<OffloadRun, OffloadRun>> moves{{nvme, none}, {none, nvme}};
      if (stage == 3) {
        moves.emplace_back(all_nvme, none);
        moves.emplace_back(none, all_nvme);
      }
      comm::run_local_world(2, [&](comm::Comm& comm) {
        for (const auto& [first, second] : moves) {
          const std::string ckpt = dir.path() + "/ckpt" + std::to_string(stage);
          auto run_engine = [&](const OffloadRun& run) {
            auto model = std::make_shared<WideStackImpl>();
            InitializeOptions io;
            io.comm = borrow(comm);
            return std::make_pair(model, initialize(model, config_of(c, run), io));
          };
          auto [m1, e1] = run_engine(first);
          train(*e1, *m1, c, comm.rank(), 2);
          e1->save_checkpoint(ckpt, std::string("mid"));
          train(*e1, *m1, c, comm.rank(), 2, /*first_step=*/2);
          const auto straight = whole_params(*e1, *m1);
          const at::Tensor straight_master = runtime::master_values(e1->model_states(), 0).clone();
          e1.reset();
          auto [m2, e2] = run_engine(second);
          ASSERT_TRUE(e2->load_checkpoint(ckpt, std::string("mid")).has_value());
          train(*e2, *m2, c, comm.rank(), 2, /*first_step=*/2);
          const auto resumed = whole_params(*e2, *m2);
          for (const auto& [name, t] : straight) {
            EXPECT_TRUE(at::equal(t, resumed.at(name))) << what << name;
          }
          EXPECT_TRUE(at::equal(straight_master, runtime::master_values(e2->model_states(), 0)))
              << what << "fp32 master";
          comm.barrier();
          if (comm.rank() == 0) fs::remove_all(ckpt);
          comm.barrier();
        }
      });
    }
  }
}

// A swap file deleted while training: the next step fails naming the file; nothing is silently
// wrong, and the last checkpoint still loads into a new engine.
TEST(NvmeOffloadFaults, DeletedSwapFileIsAnErrorAndTheCheckpointStillLoads) {
  test::TempDir dir("zrt_nvme");
  const Case c{2, Precision::kFp32, 1, false, false};
  comm::run_local_world(1, [&](comm::Comm& comm) {
    auto model = std::make_shared<WideStackImpl>();
    InitializeOptions io;
    io.comm = borrow(comm);
    auto engine = initialize(model, config_of(c, OffloadRun{Offload::kNvme, dir.path()}), io);
    train(*engine, *model, c, 0, 1);
    engine->save_checkpoint(dir.path() + "/ckpt");
    const auto saved = whole_params(*engine, *model);
    const std::string victim =
        engine->model_states().swap_space()->file_path(0, optim::SwapState::kExpAvg);
    fs::remove(victim);
    const std::string error = test::error_of<Error>([&] { train(*engine, *model, c, 0, 1, 1); });
    EXPECT_CONTAINS(error, victim);
    EXPECT_CONTAINS(error, "deleted");
    engine.reset();
    expect_checkpoint_resumes(comm, c, dir.path(), saved);
  });
}

// An I/O error in the middle of a step (ZRT_AIO_FAIL makes the 60th write request fail with EIO,
// as a device would): the step throws naming the swap file and the operation, and the last
// checkpoint still loads and trains.
TEST(NvmeOffloadFaults, IoErrorMidStepIsAnErrorAndTheCheckpointStillLoads) {
  test::TempDir dir("zrt_nvme");
  const Case c{3, Precision::kFp32, 1, false, false};
  comm::run_local_world(1, [&](comm::Comm& comm) {
    InitializeOptions io;
    io.comm = borrow(comm);
    auto model = std::make_shared<WideStackImpl>();
    ::setenv("ZRT_AIO_FAIL", "write:60", 1);
    auto engine = initialize(model, config_of(c, OffloadRun{Offload::kNvme, dir.path()}), io);
    ::unsetenv("ZRT_AIO_FAIL");
    train(*engine, *model, c, 0, 1);
    engine->save_checkpoint(dir.path() + "/ckpt");
    const auto saved = whole_params(*engine, *model);
    std::string error;
    for (int step = 1; step < 30 && error.empty(); ++step) {
      try {
        train(*engine, *model, c, 0, 1, step);
      } catch (const Error& e) {
        error = e.what();
      }
    }
    EXPECT_CONTAINS(error, dir.path() + "/zerort-swap-rank0-");
    EXPECT_CONTAINS(error, "write");
    EXPECT_CONTAINS(error, "Input/output error");
    engine.reset();
    expect_checkpoint_resumes(comm, c, dir.path(), saved);
  });
}

// Parameters on NVMe: a deleted parameter swap file and a failing read are errors naming the file;
// the last checkpoint still loads.
TEST(NvmeParamOffloadFaults, DeletedFileAndReadErrorAreErrors) {
  test::TempDir dir("zrt_nvme");
  const Case c{3, Precision::kFp32, 1, false, false};
  OffloadRun run{Offload::kCpu, dir.path()};
  run.params = Offload::kNvme;
  comm::run_local_world(1, [&](comm::Comm& comm) {
    InitializeOptions io;
    io.comm = borrow(comm);
    auto model = std::make_shared<WideStackImpl>();
    auto engine = initialize(model, config_of(c, run), io);
    train(*engine, *model, c, 0, 1);
    engine->save_checkpoint(dir.path() + "/ckpt");
    const auto saved = whole_params(*engine, *model);
    auto& states = dynamic_cast<runtime::Stage3ModelStates&>(engine->model_states());
    const std::string victim = states.layout().swapper()->file_path(0);
    fs::remove(victim);
    std::string error = test::error_of<Error>([&] { train(*engine, *model, c, 0, 1, 1); });
    EXPECT_CONTAINS(error, victim);
    EXPECT_CONTAINS(error, "deleted");
    engine.reset();

    // The 60th read request fails: in the partitioning writes' page merges or in a step's reads.
    model = std::make_shared<WideStackImpl>();
    ::setenv("ZRT_AIO_FAIL", "read:60", 1);
    error.clear();
    try {
      engine = initialize(model, config_of(c, run), io);
      ::unsetenv("ZRT_AIO_FAIL");
      for (int step = 1; step < 30; ++step) train(*engine, *model, c, 0, 1, step);
    } catch (const Error& e) {
      error = e.what();
    }
    ::unsetenv("ZRT_AIO_FAIL");
    EXPECT_CONTAINS(error, dir.path() + "/zerort-param-rank0-");
    EXPECT_CONTAINS(error, "read");
    EXPECT_CONTAINS(error, "Input/output error");
    engine.reset();
    expect_checkpoint_resumes(comm, c, dir.path(), saved, run);
  });
}

// A full disk fails at construction (the files are reserved up front), naming the file; the
// partial folder is removed.
TEST(NvmeOffloadFaults, FullDiskIsAnErrorAtConstruction) {
  test::TempDir dir("zrt_nvme");
  if (::geteuid() != 0 || ::mount("tmpfs", dir.path().c_str(), "tmpfs", 0, "size=8k") != 0) {
    GTEST_SKIP() << "needs root to mount a small tmpfs";
  }
  const Case c{2, Precision::kFp32, 1, false, false};
  comm::run_local_world(1, [&](comm::Comm& comm) {
    auto model = std::make_shared<WideStackImpl>();
    InitializeOptions io;
    io.comm = borrow(comm);
    const std::string error = test::error_of<Error>([&] {
      initialize(model, config_of(c, OffloadRun{Offload::kNvme, dir.path()}), io);
    });
    EXPECT_CONTAINS(error, dir.path() + "/zerort-swap-rank0-");
    EXPECT_CONTAINS(error, "No space left on device");
    EXPECT_TRUE(entries(dir.path()).empty());
  });
  ::umount(dir.path().c_str());
}

}  // namespace
}  // namespace zrt
