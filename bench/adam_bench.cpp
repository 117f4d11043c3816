// adam_bench: the fused CPU Adam kernel against LibTorch's torch::optim::AdamW and the plain-ATen
// reference, on one flat fp32 tensor (the ZeRO partition layout), next to the triad bandwidth
// measured in the same run.
//
//   build/bench/adam_bench [--sizes 1M,16M,64M,256M] [--threads 1,2] [--variants fp32,bf16]
//                          [--impls fused,torch,reference] [--sweep-size 64M | --no-sweep]
//                          [--warmup 1] [--reps N] [--no-triad] [--json]
//   build/bench/adam_bench --replay DIR --variant fp32|bf16 --steps K
//   build/bench/adam_bench --device cuda [--sizes 64M,256M,1G] [--json]
//
// Variants: fp32 (fp32 grads, 28 B/param moved) and bf16 (bf16 grads + bf16 param copy written in
// the same pass, 4+2+4+4 read + 4+4+4+2 written = 28 B/param). GB/s = those bytes / time for
// every implementation (the unfused ones move more; the figure is the useful-work rate). See
// bench/README.md for the metrics and docs/PERFORMANCE.md for results.
#include <cstdio>
#include <fstream>
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

// Warm-up and timed runs per row: --warmup (default 1) and --reps (default: 20 runs below 16M
// parameters, down to 3 at 256M).
struct Timing {
  int warmup = 1;
  int reps = 0;  // 0: by size
  int iterations(int64_t n) const {
    if (reps > 0) return reps;
    return static_cast<int>(std::clamp<int64_t>(8'000'000'000LL / (n * 28), 3, 20));
  }
};

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

std::vector<double> time_fused(Problem& pr, const kernels::CpuAdamConfig& config,
                               const Timing& timing) {
  int64_t step = 2;
  return time_runs(timing.warmup, timing.iterations(pr.n),
                   [&] { kernels::adam_step_cpu({pr.tensors()}, step_args(step++), config); });
}

std::vector<double> time_reference(Problem& pr, const Timing& timing) {
  int64_t step = 2;
  return time_runs(timing.warmup, timing.iterations(pr.n),
                   [&] { kernels::adam_reference_step(pr.tensors(), step_args(step++)); });
}

// torch::optim::AdamW on the same flat tensor; for bf16 the unfused equivalent also converts the
// gradient to fp32 and writes the bf16 copy.
std::vector<double> time_torch(Problem& pr, const Timing& timing) {
  at::Tensor param = pr.p.detach().requires_grad_(true);
  torch::optim::AdamW opt({param}, torch::optim::AdamWOptions(1e-3).weight_decay(0.01));
  param.mutable_grad() = pr.g32;
  auto step = [&] {
    if (pr.bf16) param.mutable_grad() = pr.g.to(at::kFloat);
    opt.step();
    if (pr.bf16) pr.copy.copy_(param.detach());
  };
  return time_runs(timing.warmup, timing.iterations(pr.n), step);
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

// Reads exactly t.nbytes() bytes of `path` into t.
void read_raw(const std::string& path, const at::Tensor& t) {
  std::ifstream in(path, std::ios::binary);
  ZRT_CHECK(in, "cannot open ", path);
  in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
  ZRT_CHECK(in.gcount() == static_cast<std::streamsize>(t.nbytes()) && in.peek() == EOF, path,
            " must hold exactly ", t.nbytes(), " bytes");
}

void write_raw(const std::string& path, const at::Tensor& t) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
  ZRT_CHECK(out.good(), "cannot write ", path);
}

// --replay DIR: the correctness run of bench/peers/adam.py. Reads the initial parameters
// DIR/p.f32 and the gradient DIR/g.f32 (fp32) or DIR/g.bf16 (bf16), m = v = 0, runs --steps K
// fused steps (t = 1..K, the same gradient each step, this program's hyper-parameters) and writes
// DIR/out_p.f32 and, for bf16, the bf16 copy DIR/out_copy.bf16.
int run_replay(int argc, char** argv) {
  const std::string dir = flag_value(argc, argv, "--replay", "");
  const bool bf16 = flag_value(argc, argv, "--variant", "fp32") == "bf16";
  const int steps = std::stoi(flag_value(argc, argv, "--steps", "5"));
  std::ifstream probe(dir + "/p.f32", std::ios::binary | std::ios::ate);
  ZRT_CHECK(probe && probe.tellg() % 4 == 0, "cannot read ", dir, "/p.f32");
  const int64_t n = static_cast<int64_t>(probe.tellg()) / 4;
  kernels::AdamTensors t{at::empty({n}), at::empty({n}, bf16 ? at::kBFloat16 : at::kFloat),
                         at::zeros({n}), at::zeros({n}),
                         bf16 ? at::empty({n}, at::kBFloat16) : at::Tensor()};
  read_raw(dir + "/p.f32", t.param);
  read_raw(dir + (bf16 ? "/g.bf16" : "/g.f32"), t.grad);
  for (int64_t step = 1; step <= steps; ++step) kernels::adam_step_cpu({t}, step_args(step));
  write_raw(dir + "/out_p.f32", t.param);
  if (bf16) write_raw(dir + "/out_copy.bf16", t.param_copy);
  return 0;
}

// What run_cpu was asked for.
struct CpuRun {
  bool json = false;
  bool triad = true;  // --no-triad: skip the triad measurements (for drivers that time elsewhere)
  Timing timing;
  std::vector<std::string> impls;
};

// The rows of one size, variant and thread count: every implementation asked for, each timed
// `timing` runs; the triad measured right before and right after the fused timing and averaged,
// so that the ratio is not skewed by the bandwidth drifting on a shared host.
void run_rows(Problem& pr, const std::string& variant, int t, double diff, bool ok,
              const CpuRun& run, Json* out) {
  at::set_num_threads(t);
  kernels::CpuAdamConfig config;
  config.num_threads = t;
  std::map<std::string, std::vector<double>> runs;
  double row_triad = run.triad ? measure_triad_gbps(64 << 20, t) : 0.0;
  if (contains(run.impls, "fused")) runs["fused"] = time_fused(pr, config, run.timing);
  if (run.triad) row_triad = 0.5 * (row_triad + measure_triad_gbps(64 << 20, t));
  if (contains(run.impls, "torch")) runs["torch"] = time_torch(pr, run.timing);
  if (contains(run.impls, "reference")) runs["reference"] = time_reference(pr, run.timing);
  const int64_t n = pr.n;
  for (const auto& [impl, r] : runs) {
    const double s = median(r);
    const double gbps = pr.bytes_per_param() * static_cast<double>(n) / s / 1e9;
    const double vs_torch = runs.count("torch") ? median(runs.at("torch")) / s : 0.0;
    const double pct = row_triad > 0 ? 100.0 * gbps / row_triad : 0.0;
    Json runs_ms = Json::array();
    for (const double x : r) runs_ms.push_back(x * 1e3);
    (*out)["rows"].push_back({{"variant", variant},
                              {"params", n},
                              {"threads", t},
                              {"impl", impl},
                              {"ms", s * 1e3},
                              {"min_ms", *std::min_element(r.begin(), r.end()) * 1e3},
                              {"max_ms", *std::max_element(r.begin(), r.end()) * 1e3},
                              {"runs_ms", runs_ms},
                              {"gparams_per_s", n / s / 1e9},
                              {"gbps", gbps},
                              {"triad_gbps", row_triad},
                              {"pct_triad", pct},
                              {"speedup_vs_torch", vs_torch},
                              {"check_max_rel_diff", diff},
                              {"check_ok", ok}});
    if (!run.json) {
      std::printf("%-5s %6s %3d %-9s %9.2f %8.3f %7.2f %6.2f %6.1f%% %8.2f %6s\n", variant.c_str(),
                  format_count(n).c_str(), t, impl.c_str(), s * 1e3, n / s / 1e9, gbps, row_triad,
                  pct, vs_torch, impl == "fused" ? (ok ? "ok" : "FAILED") : "");
      std::fflush(stdout);
    }
  }
}

int run_cpu(int argc, char** argv) {
  CpuRun run;
  run.json = has_flag(argc, argv, "--json");
  run.triad = !has_flag(argc, argv, "--no-triad");
  run.timing.warmup = std::stoi(flag_value(argc, argv, "--warmup", "1"));
  run.timing.reps = std::stoi(flag_value(argc, argv, "--reps", "0"));
  ZRT_CHECK(run.timing.warmup >= 0 && run.timing.reps >= 0, "--warmup and --reps must be >= 0");
  run.impls = split(flag_value(argc, argv, "--impls", "fused,torch,reference"));
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

  Json out = {{"device", "cpu"},
              {"isa", kernels::cpu_adam_isa_name()},
              {"torch", TORCH_VERSION},
              {"rows", Json::array()},
              {"triad_gbps", Json::object()}};
  for (const int t : threads) {
    if (!run.triad) break;
    out["triad_gbps"][std::to_string(t)] = measure_triad_gbps(64 << 20, t);
  }
  if (!run.json) {
    std::printf("# adam_bench: CPU, isa %s, LibTorch %s, %d CPUs for kernels\n",
                kernels::cpu_adam_isa_name(), TORCH_VERSION, all);
    for (const auto& [t, gbps] : out["triad_gbps"].items()) {
      std::printf("# triad at start (64M floats, 12 B/elem counted): %s thread(s) %.2f GB/s\n",
                  t.c_str(), gbps.get<double>());
    }
    std::printf("\n%-5s %6s %3s %-9s %9s %8s %7s %6s %7s %8s %6s\n", "var", "params", "thr", "impl",
                "ms", "Gparam/s", "GB/s", "triad", "%triad", "x torch", "check");
  }
  bool all_ok = true;
  for (const int64_t n : sizes) {
    for (const std::string& variant : variants) {
      Problem pr = make_problem(n, variant == "bf16");
      bool copy_ok = true;
      const double diff = check_fused(pr, kernels::CpuAdamConfig{}, &copy_ok);
      const bool ok = diff <= 1e-6 && copy_ok;
      all_ok = all_ok && ok;
      for (const int t : threads) run_rows(pr, variant, t, diff, ok, run, &out);
    }
  }
  if (!has_flag(argc, argv, "--no-sweep")) {
    const int64_t sweep_n = parse_count(flag_value(argc, argv, "--sweep-size", "64M"));
    sweep_cpu_options(sweep_n, threads.back(), run.json, &out);
  }
  if (run.json) std::printf("%s\n", out.dump(2).c_str());
  return all_ok ? 0 : 1;
}

}  // namespace
}  // namespace zrt::bench

int main(int argc, char** argv) {
  try {
    const std::string device = zrt::bench::flag_value(argc, argv, "--device", "cpu");
    if (device == "cuda") return zrt::bench::run_cuda(argc, argv);
    if (zrt::bench::has_flag(argc, argv, "--replay")) return zrt::bench::run_replay(argc, argv);
    ZRT_CHECK(device == "cpu", "--device must be cpu or cuda, got ", device);
    return zrt::bench::run_cpu(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "adam_bench: %s\n", e.what());
    return 2;
  }
}
