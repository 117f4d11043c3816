// adam_bench, part two: the sweep of CPU kernel options (ISA path, tile size, streaming copy)
// and the CUDA run (multi-tensor kernel vs the device's copy bandwidth). See adam_bench.cpp.
#include <cstdio>
#include <vector>

#include "bench/adam_bench_common.h"
#include "bench/harness.h"
#include "core/error.h"
#include "kernels/adam_cuda.h"
#include "kernels/adam_launch.h"
#include "kernels/cpu_adam.h"

namespace zrt::bench {
namespace {

using kernels::AdamStepArgs;

AdamStepArgs args_at(int64_t step) {
  AdamStepArgs a;
  a.lr = 1e-3;
  a.weight_decay = 0.01;
  a.step = step;
  return a;
}

struct SweepCase {
  std::string name;
  bool bf16;
  kernels::CpuAdamConfig config;
};

}  // namespace

void sweep_cpu_options(int64_t n, int threads, bool json, Json* out) {
  std::vector<SweepCase> cases;
  auto base = [&] {
    kernels::CpuAdamConfig c;
    c.num_threads = threads;
    return c;
  };
  for (const auto isa :
       {kernels::CpuIsa::kAvx512, kernels::CpuIsa::kAvx2, kernels::CpuIsa::kScalar}) {
    if (!kernels::cpu_isa_supported(isa)) continue;
    auto c = base();
    c.isa = isa;
    cases.push_back({std::string("isa=") + kernels::cpu_isa_name(isa), false, c});
  }
  const int64_t static_tile = (n / threads + 63) / 64 * 64;
  for (const int64_t tile : {int64_t{4096}, int64_t{16384}, kernels::kCpuAdamTileElems,
                             int64_t{262144}, int64_t{1048576}, static_tile}) {
    auto c = base();
    c.tile_elems = tile;
    cases.push_back(
        {tile == static_tile ? "tile=n/threads (static split)" : "tile=" + std::to_string(tile),
         false, c});
  }
  for (const bool stream : {true, false}) {
    auto c = base();
    c.streaming_copy = stream;
    cases.push_back({std::string("bf16 copy, streaming=") + (stream ? "on" : "off"), true, c});
  }

  const at::Tensor p = at::rand({n}) - 0.5, m = at::zeros({n}), v = at::zeros({n});
  const at::Tensor g32 = at::rand({n}) - 0.5;
  const at::Tensor g16 = g32.to(at::kBFloat16);
  const at::Tensor copy = at::empty({n}, at::kBFloat16);
  const double triad = measure_triad_gbps(64 << 20, threads);
  if (!json) {
    std::printf("\n# option sweep: %s params, %d thread(s), triad %.2f GB/s\n",
                format_count(n).c_str(), threads, triad);
    std::printf("%-32s %9s %7s %7s\n", "case", "ms", "GB/s", "%triad");
  }
  (*out)["sweep"] = Json::array();
  for (const SweepCase& sc : cases) {
    const kernels::AdamTensors t{p, sc.bf16 ? g16 : g32, m, v, sc.bf16 ? copy : at::Tensor()};
    int64_t step = 1;
    const int iters = static_cast<int>(std::clamp<int64_t>(8'000'000'000LL / (n * 28), 3, 20));
    const double s = median(
        time_runs(1, iters, [&] { kernels::adam_step_cpu({t}, args_at(step++), sc.config); }));
    const double gbps = 28.0 * static_cast<double>(n) / s / 1e9;
    (*out)["sweep"].push_back({{"case", sc.name},
                               {"params", n},
                               {"threads", threads},
                               {"ms", s * 1e3},
                               {"gbps", gbps},
                               {"pct_triad", 100 * gbps / triad}});
    if (!json) {
      std::printf("%-32s %9.2f %7.2f %6.1f%%\n", sc.name.c_str(), s * 1e3, gbps,
                  100 * gbps / triad);
      std::fflush(stdout);
    }
  }
}

namespace {

// Device buffers for one variant, freed on destruction.
struct DeviceProblem {
  std::vector<void*> blocks;
  kernels::CudaAdamTensor t;
  ~DeviceProblem() {
    for (void* b : blocks) kernels::cuda_free(b);
  }
  void* alloc(size_t bytes) {
    blocks.push_back(kernels::cuda_malloc(bytes));
    kernels::cuda_memset(blocks.back(), 0, bytes);
    return blocks.back();
  }
};

// D2D copy bandwidth (read + write counted, like the kernel's bytes) over 1 GiB.
double measure_d2d_gbps() {
  const size_t bytes = size_t{1} << 30;
  void* a = kernels::cuda_malloc(bytes);
  void* b = kernels::cuda_malloc(bytes);
  kernels::cuda_copy_on_device(b, a, bytes);
  kernels::cuda_synchronize();
  const double s = median(time_runs(0, 10, [&] {
    kernels::cuda_copy_on_device(b, a, bytes);
    kernels::cuda_synchronize();
  }));
  kernels::cuda_free(a);
  kernels::cuda_free(b);
  return 2.0 * static_cast<double>(bytes) / s / 1e9;
}

// Writes a random window at the end of the device arrays, runs one step there and compares with
// the CPU kernel. Returns the max relative difference of p (0 expected: same arithmetic).
double check_window(const DeviceProblem& d, int64_t n, bool bf16) {
  const int64_t w = std::min<int64_t>(n, 1 << 20);
  const int64_t off = n - w;
  const at::Tensor p = at::rand({w}) - 0.5,
                   g = (at::rand({w}) - 0.5).to(bf16 ? at::kBFloat16 : at::kFloat);
  const at::Tensor m = at::rand({w}) * 0.1, v = at::rand({w}) * 0.01;
  const int gs = bf16 ? 2 : 4;
  kernels::cuda_copy_to_device(d.t.param + off, p.data_ptr(), w * 4);
  kernels::cuda_copy_to_device(static_cast<char*>(const_cast<void*>(d.t.grad)) + off * gs,
                               g.data_ptr(), w * gs);
  kernels::cuda_copy_to_device(d.t.exp_avg + off, m.data_ptr(), w * 4);
  kernels::cuda_copy_to_device(d.t.exp_avg_sq + off, v.data_ptr(), w * 4);
  kernels::CudaAdamTensor win = d.t;
  win.param += off;
  win.grad = static_cast<const char*>(d.t.grad) + off * gs;
  win.exp_avg += off;
  win.exp_avg_sq += off;
  win.param_copy = d.t.param_copy ? static_cast<char*>(d.t.param_copy) + off * 2 : nullptr;
  win.numel = w;
  const auto scalars = kernels::make_adam_scalars(args_at(1));
  kernels::cuda_adam_step(&win, 1, bf16 ? DType::kBFloat16 : DType::kFloat32, DType::kBFloat16,
                          scalars, nullptr);
  kernels::cuda_synchronize();
  kernels::AdamTensors cpu{p.clone(), g, m.clone(), v.clone(), {}};
  kernels::adam_step_cpu({cpu}, args_at(1));
  const at::Tensor back = at::empty({w});
  kernels::cuda_copy_to_host(back.data_ptr(), win.param, w * 4);
  return max_rel_diff(back, cpu.param);
}

}  // namespace

int run_cuda(int argc, char** argv) {
  if (!kernels::cuda_kernels_built()) {
    std::printf("adam_bench --device cuda: skipped: built without the CUDA kernels (no nvcc)\n");
    return 0;
  }
  if (kernels::cuda_device_count() == 0) {
    std::printf("adam_bench --device cuda: skipped: no CUDA device on this machine\n");
    return 0;
  }
  const bool json = has_flag(argc, argv, "--json");
  std::vector<int64_t> sizes;
  std::string list = flag_value(argc, argv, "--sizes", "64M,256M,1G");
  for (size_t pos = 0; pos <= list.size();) {
    const size_t comma = std::min(list.find(',', pos), list.size());
    sizes.push_back(parse_count(list.substr(pos, comma - pos)));
    pos = comma + 1;
  }
  const double d2d = measure_d2d_gbps();
  Json out = {{"device", "cuda"}, {"d2d_copy_gbps", d2d}, {"rows", Json::array()}};
  if (!json) {
    std::printf("# adam_bench: CUDA, device-to-device copy %.1f GB/s (read + write)\n", d2d);
    std::printf("%-5s %6s %9s %8s %8s %7s %8s %9s\n", "var", "params", "ms", "Gparam/s", "GB/s",
                "%copy", "launches", "check");
  }
  bool ok_all = true;
  for (const int64_t n : sizes) {
    for (const bool bf16 : {false, true}) {
      DeviceProblem d;
      d.t.param = static_cast<float*>(d.alloc(n * 4));
      d.t.grad = d.alloc(n * (bf16 ? 2 : 4));
      d.t.exp_avg = static_cast<float*>(d.alloc(n * 4));
      d.t.exp_avg_sq = static_cast<float*>(d.alloc(n * 4));
      d.t.param_copy = bf16 ? d.alloc(n * 2) : nullptr;
      d.t.numel = n;
      const double diff = check_window(d, n, bf16);
      ok_all = ok_all && diff <= 1e-6;
      const DType gd = bf16 ? DType::kBFloat16 : DType::kFloat32;
      int launches = 0;
      int64_t step = 2;
      const double s = median(time_runs(2, 10, [&] {
        launches = kernels::cuda_adam_step(&d.t, 1, gd, DType::kBFloat16,
                                           kernels::make_adam_scalars(args_at(step++)), nullptr);
        kernels::cuda_synchronize();
      }));
      const double gbps = 28.0 * static_cast<double>(n) / s / 1e9;
      out["rows"].push_back({{"variant", bf16 ? "bf16" : "fp32"},
                             {"params", n},
                             {"ms", s * 1e3},
                             {"gbps", gbps},
                             {"pct_copy", 100 * gbps / d2d},
                             {"launches", launches},
                             {"check_max_rel_diff", diff}});
      if (!json) {
        std::printf("%-5s %6s %9.3f %8.2f %8.1f %6.1f%% %8d %9s\n", bf16 ? "bf16" : "fp32",
                    format_count(n).c_str(), s * 1e3, n / s / 1e9, gbps, 100 * gbps / d2d, launches,
                    diff <= 1e-6 ? "ok" : "FAILED");
        std::fflush(stdout);
      }
    }
  }
  if (json) std::printf("%s\n", out.dump(2).c_str());
  return ok_all ? 0 : 1;
}

}  // namespace zrt::bench
