// adam_bench: the fused CPU Adam kernel against LibTorch's torch::optim::AdamW and the plain-ATen
// reference, on one flat fp32 tensor (the ZeRO partition layout), next to the triad bandwidth
// measured in the same run.
//
//   build/bench/adam_bench [--sizes 1M,16M,64M,256M] [--threads 1,2] [--variants fp32,bf16]
//                          [--impls fused,torch,reference] [--sweep-size 64M | --no-sweep]
//                          [--json]
//   build/bench/adam_bench --device cuda [--sizes 64M,256M,1G] [--json]
//
// Variants: fp32 (fp32 grads, 28 B/param moved) and bf16 (bf16 grads + bf16 param copy written in
// the same pass, 4+2+4+4 read + 4+4+4+2 written = 28 B/param). GB/s = those bytes / time for
// every implementation (the unfused ones move more; the figure is the useful-work rate). See
// bench/README.md for the metrics and docs/PERFORMANCE.md for results.
#include <cstdio>
#include <sstream>

#include <torch/torch.h>

#include "bench/adam_bench_common.h"
#include "bench/harness.h"
#include "core/error.h"
#include "core/json.h"
#include "kernels/adam_launch.h"
#include "kernels/adam_reference.h"
#include "kernels/cpu_adam.h"
#include "kernels/cpu_thread_pool.h"

namespace zrt::bench {
namespace {

using kernels::AdamStepArgs;
using kernels::AdamTensors;

constexpr int64_t kCheckWindow = 16 << 20;

struct Problem {
  int64_t n;
  bool bf16;
  at::Tensor p, g32, g, m, v, copy;
  AdamTensors tensors() const { return {p, g, m, v, copy}; }
  // Read p, g, m, v; write p, m, v and the copy.
  double bytes_per_param() const {
    const double grad = static_cast<double>(g.element_size());
    const double copy_bytes = copy.defined() ? static_cast<double>(copy.element_size()) : 0.0;
    return (4 + grad + 4 + 4) + (4 + 4 + 4 + copy_bytes);
  }
};

int iterations(int64_t n) {
  return static_cast<int>(std::clamp<int64_t>(8'000'000'000LL / (n * 28), 3, 20));
}

AdamStepArgs step_args(int64_t step) {
  AdamStepArgs a;
  a.lr = 1e-3;
  a.weight_decay = 0.01;
  a.step = step;
  return a;
}

// One checked step of the fused kernel: the last min(n, 16M) elements (so the tail is included)
// against the reference run on copies of their prior state. Returns max rel. diff of p and m.
double check_fused(Problem& pr, const kernels::CpuAdamConfig& config, bool* copy_ok) {
  const int64_t w = std::min(pr.n, kCheckWindow);
  const int64_t off = pr.n - w;
  AdamTensors ref{pr.p.narrow(0, off, w).clone(),
                  pr.g.narrow(0, off, w).clone(),
                  pr.m.narrow(0, off, w).clone(),
                  pr.v.narrow(0, off, w).clone(),
                  {}};
  if (pr.copy.defined()) ref.param_copy = at::empty({w}, pr.copy.options());
  kernels::adam_step_cpu({pr.tensors()}, step_args(1), config);
  kernels::adam_reference_step(ref, step_args(1));
  *copy_ok = !pr.copy.defined() ||
             pr.copy.narrow(0, off, w).equal(pr.p.narrow(0, off, w).to(pr.copy.scalar_type()));
  return std::max(max_rel_diff(pr.p.narrow(0, off, w), ref.param),
                  max_rel_diff(pr.m.narrow(0, off, w), ref.exp_avg));
}

double time_fused(Problem& pr, const kernels::CpuAdamConfig& config) {
  int64_t step = 2;
  return median(time_runs(1, iterations(pr.n), [&] {
    kernels::adam_step_cpu({pr.tensors()}, step_args(step++), config);
  }));
}

double time_reference(Problem& pr) {
  int64_t step = 2;
  return median(time_runs(1, iterations(pr.n),
                          [&] { kernels::adam_reference_step(pr.tensors(), step_args(step++)); }));
}

// torch::optim::AdamW on the same flat tensor; for bf16 the unfused equivalent also converts the
// gradient to fp32 and writes the bf16 copy.
double time_torch(Problem& pr) {
  at::Tensor param = pr.p.detach().requires_grad_(true);
  torch::optim::AdamW opt({param}, torch::optim::AdamWOptions(1e-3).weight_decay(0.01));
  param.mutable_grad() = pr.g32;
  auto step = [&] {
    if (pr.bf16) param.mutable_grad() = pr.g.to(at::kFloat);
    opt.step();
    if (pr.bf16) pr.copy.copy_(param.detach());
  };
  return median(time_runs(1, iterations(pr.n), step));
}

Problem make_problem(int64_t n, bool bf16) {
  Problem pr;
  pr.n = n;
  pr.bf16 = bf16;
  pr.p = at::rand({n}) - 0.5;
  pr.g32 = at::rand({n}) - 0.5;
  pr.g = bf16 ? pr.g32.to(at::kBFloat16) : pr.g32;
  if (bf16) pr.g32 = at::Tensor();  // torch's fp32 grad is made inside the timed step
  pr.m = at::zeros({n});
  pr.v = at::zeros({n});
  if (bf16) pr.copy = at::empty({n}, at::kBFloat16);
  return pr;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(item);
  return out;
}

bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

int run_cpu(int argc, char** argv) {
  const bool json = has_flag(argc, argv, "--json");
  const int all = kernels::cpu_kernel_threads();
  std::vector<int64_t> sizes;
  for (const auto& s : split(flag_value(argc, argv, "--sizes", "1M,16M,64M,256M"))) {
    sizes.push_back(parse_count(s));
  }
  std::vector<int> threads;
  for (const auto& s :
       split(flag_value(argc, argv, "--threads", all > 1 ? "1," + std::to_string(all) : "1"))) {
    threads.push_back(std::stoi(s));
  }
  const auto variants = split(flag_value(argc, argv, "--variants", "fp32,bf16"));
  const auto impls = split(flag_value(argc, argv, "--impls", "fused,torch,reference"));

  Json out = {{"device", "cpu"},
              {"isa", kernels::cpu_adam_isa_name()},
              {"torch", TORCH_VERSION},
              {"rows", Json::array()},
              {"triad_gbps", Json::object()}};
  std::map<int, double> triad;
  for (const int t : threads) {
    triad[t] = measure_triad_gbps(64 << 20, t);
    out["triad_gbps"][std::to_string(t)] = triad[t];
  }
  if (!json) {
    std::printf("# adam_bench: CPU, isa %s, LibTorch %s, %d CPUs for kernels\n",
                kernels::cpu_adam_isa_name(), TORCH_VERSION, all);
    for (const int t : threads) {
      std::printf("# triad at start (64M floats, 12 B/elem counted): %d thread(s) %.2f GB/s\n", t,
                  triad[t]);
    }
    std::printf("\n%-5s %6s %3s %-9s %9s %8s %7s %6s %7s %8s %6s\n", "var", "params", "thr", "impl",
                "ms", "Gparam/s", "GB/s", "triad", "%triad", "x torch", "check");
  }
  bool all_ok = true;
  for (const int64_t n : sizes) {
    for (const std::string& variant : variants) {
      Problem pr = make_problem(n, variant == "bf16");
      kernels::CpuAdamConfig check_config;
      bool copy_ok = true;
      const double diff = check_fused(pr, check_config, &copy_ok);
      const bool ok = diff <= 1e-6 && copy_ok;
      all_ok = all_ok && ok;
      for (const int t : threads) {
        at::set_num_threads(t);
        kernels::CpuAdamConfig config;
        config.num_threads = t;
        std::map<std::string, double> secs;
        // The triad of this row: measured right before and right after the fused timing and
        // averaged, so that the ratio is not skewed by the bandwidth drifting on a shared host.
        double row_triad = measure_triad_gbps(64 << 20, t);
        if (contains(impls, "fused")) secs["fused"] = time_fused(pr, config);
        row_triad = 0.5 * (row_triad + measure_triad_gbps(64 << 20, t));
        if (contains(impls, "torch")) secs["torch"] = time_torch(pr);
        if (contains(impls, "reference")) secs["reference"] = time_reference(pr);
        for (const auto& [impl, s] : secs) {
          const double gbps = pr.bytes_per_param() * static_cast<double>(n) / s / 1e9;
          const double vs_torch = secs.count("torch") ? secs["torch"] / s : 0.0;
          out["rows"].push_back({{"variant", variant},
                                 {"params", n},
                                 {"threads", t},
                                 {"impl", impl},
                                 {"ms", s * 1e3},
                                 {"gparams_per_s", n / s / 1e9},
                                 {"gbps", gbps},
                                 {"triad_gbps", row_triad},
                                 {"pct_triad", 100.0 * gbps / row_triad},
                                 {"speedup_vs_torch", vs_torch},
                                 {"check_max_rel_diff", diff},
                                 {"check_ok", ok}});
          if (!json) {
            std::printf("%-5s %6s %3d %-9s %9.2f %8.3f %7.2f %6.2f %6.1f%% %8.2f %6s\n",
                        variant.c_str(), format_count(n).c_str(), t, impl.c_str(), s * 1e3,
                        n / s / 1e9, gbps, row_triad, 100.0 * gbps / row_triad, vs_torch,
                        impl == "fused" ? (ok ? "ok" : "FAILED") : "");
            std::fflush(stdout);
          }
        }
      }
    }
  }
  if (!has_flag(argc, argv, "--no-sweep")) {
    const int64_t sweep_n = parse_count(flag_value(argc, argv, "--sweep-size", "64M"));
    sweep_cpu_options(sweep_n, threads.back(), json, &out);
  }
  if (json) std::printf("%s\n", out.dump(2).c_str());
  return all_ok ? 0 : 1;
}

}  // namespace
}  // namespace zrt::bench

int main(int argc, char** argv) {
  try {
    const std::string device = zrt::bench::flag_value(argc, argv, "--device", "cpu");
    if (device == "cuda") return zrt::bench::run_cuda(argc, argv);
    ZRT_CHECK(device == "cpu", "--device must be cpu or cuda, got ", device);
    return zrt::bench::run_cpu(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "adam_bench: %s\n", e.what());
    return 2;
  }
}
