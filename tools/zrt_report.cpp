// zrt-report: the environment report (like DeepSpeed's ds_report). What this ZeroRT build has,
// what it finds at run time, and whether each optional part is usable.
//
//   build/bin/zrt-report [--json]
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <cxxopts.hpp>

#include <torch/torch.h>

#include "comm/init.h"
#include "comm/mpi_comm.h"
#include "comm/nccl_comm.h"
#include "core/env.h"
#include "core/error.h"
#include "core/json.h"
#include "core/tool_main.h"
#include "kernels/adam_cuda.h"
#include "kernels/cpu_adam.h"
#include "zrt/build_config.h"
#include <sys/statvfs.h>
#include <unistd.h>

namespace {

std::string yes_no(bool b) { return b ? "yes" : "no"; }

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

int64_t shm_megabytes() {
  struct statvfs s {};
  if (statvfs("/dev/shm", &s) != 0) return -1;
  return static_cast<int64_t>(s.f_blocks) * static_cast<int64_t>(s.f_frsize) / (1 << 20);
}

// The versions of the peers in the project's Python venv (scripts/install_deps.sh), read from the
// packages' metadata (nothing is imported); an empty object when there is no such Python.
zrt::Json venv_versions(std::string* python) {
  *python = env_or("ZRT_PYTHON", ZRT_PYTHON_DEFAULT);
  if (::access(python->c_str(), X_OK) != 0) return zrt::Json::object();
  const std::string cmd =
      "'" + *python +
      "' -c 'import importlib.metadata as m, json\n"
      "v = {}\n"
      "for p in (\"torch\", \"deepspeed\", \"transformers\", \"accelerate\", \"safetensors\", "
      "\"tensorboard\", \"numpy\"):\n"
      "    try: v[p] = m.version(p)\n"
      "    except m.PackageNotFoundError: v[p] = None\n"
      "print(json.dumps(v))' 2>/dev/null";
  std::string out;
  if (FILE* pipe = ::popen(cmd.c_str(), "r")) {
    char buf[1024];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
    if (::pclose(pipe) != 0) out.clear();
  }
  try {
    return out.empty() ? zrt::Json::object() : zrt::Json::parse(out);
  } catch (const std::exception&) {
    return zrt::Json::object();
  }
}

int run(int argc, char** argv) {
  cxxopts::Options options("zrt-report",
                           "Prints what this ZeroRT build and machine have: LibTorch, MPI, CUDA, "
                           "NCCL, the CPU Adam path, threads, the launch and the venv's peers.");
  options.add_options()("json", "print JSON instead of the text report")("h,help",
                                                                          "print this help");
  cxxopts::ParseResult result;
  try {
    result = options.parse(argc, argv);
  } catch (const cxxopts::exceptions::exception& e) {
    throw zrt::UsageError(zrt::str(e.what(), " (usage: zrt-report [--json])"));
  }
  if (result.count("help")) {
    std::printf("%s", options.help().c_str());
    return 0;
  }
  if (!result.unmatched().empty()) {
    throw zrt::UsageError(zrt::str("unexpected argument '", result.unmatched().front(),
                                   "' (usage: zrt-report [--json])"));
  }
  const bool json = result.count("json") > 0;
  const int gpus = zrt::kernels::cuda_device_count();
  const zrt::comm::LaunchInfo launch = zrt::comm::detect_launch();
  std::string python;
  const zrt::Json peers = venv_versions(&python);
  zrt::Json r = {
      {"zerort", {{"version", ZRT_VERSION}, {"git_hash", ZRT_GIT_HASH}}},
      {"libtorch",
       {{"version", ZRT_TORCH_VERSION},
        {"source", ZRT_TORCH_SOURCE},
        {"path", ZRT_TORCH_PREFIX},
        {"cxx11_abi", static_cast<bool>(_GLIBCXX_USE_CXX11_ABI)},
        {"cuda", static_cast<bool>(ZRT_TORCH_HAS_CUDA)}}},
      {"mpi",
       {{"compiled", static_cast<bool>(ZRT_WITH_MPI)},
        {"library", zrt::comm::mpi_library_version()}}},
      {"cuda",
       {{"compiled", static_cast<bool>(ZRT_WITH_CUDA)},
        {"adam_kernel_built", zrt::kernels::cuda_kernels_built()},
        {"devices_visible", gpus},
        {"CUDA_VISIBLE_DEVICES", env_or("CUDA_VISIBLE_DEVICES", "(unset)")}}},
      {"nccl",
       {{"compiled", static_cast<bool>(ZRT_WITH_NCCL)}, {"version", zrt::comm::nccl_version()}}},
      {"cpu_adam", {{"simd_path", zrt::kernels::cpu_adam_isa_name()}}},
      {"sentencepiece", {{"compiled", static_cast<bool>(ZRT_WITH_SENTENCEPIECE)}}},
      {"threads",
       {{"hardware", std::thread::hardware_concurrency()},
        {"torch_intra_op", at::get_num_threads()},
        {"OMP_NUM_THREADS", env_or("OMP_NUM_THREADS", "(unset)")},
        {"ZRT_NUM_THREADS", env_or("ZRT_NUM_THREADS", "(unset)")}}},
      {"launch", launch.describe()},
      {"dev_shm_mib", shm_megabytes()},
      {"venv", {{"python", python}, {"found", !peers.empty()}, {"packages", peers}}},
      {"usable",
       {{"cpu_training_mpi", static_cast<bool>(ZRT_WITH_MPI)},
        {"cpu_training_single_process", true},
        {"cuda_training_nccl", ZRT_WITH_NCCL && ZRT_TORCH_HAS_CUDA && gpus > 0},
        {"cuda_fused_adam", zrt::kernels::cuda_kernels_built() && ZRT_TORCH_HAS_CUDA && gpus > 0}}},
  };
  if (json) {
    std::printf("%s\n", r.dump(2).c_str());
    return 0;
  }
  std::printf("ZeroRT environment report\n");
  std::printf("-------------------------------------------------------------------\n");
  std::printf("zerort version ............ %s (git %s)\n", ZRT_VERSION, ZRT_GIT_HASH);
  std::printf("libtorch version .......... %s from %s (C++11 ABI %s, CUDA used %s)\n",
              ZRT_TORCH_VERSION, ZRT_TORCH_SOURCE, yes_no(_GLIBCXX_USE_CXX11_ABI).c_str(),
              yes_no(ZRT_TORCH_HAS_CUDA).c_str());
  std::printf("libtorch path ............. %s\n", ZRT_TORCH_PREFIX);
  if (peers.empty()) {
    std::printf("python venv ............... not found (%s; scripts/install_deps.sh makes it)\n",
                python.c_str());
  } else {
    std::string list;
    for (const auto& [name, version] : peers.items()) {
      list += (list.empty() ? "" : ", ") + name + " " +
              (version.is_string() ? version.get<std::string>() : std::string("missing"));
    }
    std::printf("python venv ............... %s\n", python.c_str());
    std::printf("  packages ................ %s\n", list.c_str());
  }
  std::printf("MPI backend ............... %s: %s\n", yes_no(ZRT_WITH_MPI).c_str(),
              zrt::comm::mpi_library_version().c_str());
  std::printf("CUDA kernels .............. compiled %s, built %s, %d device(s) visible\n",
              yes_no(ZRT_WITH_CUDA).c_str(), yes_no(zrt::kernels::cuda_kernels_built()).c_str(),
              gpus);
  std::printf("NCCL backend .............. %s: %s\n", yes_no(ZRT_WITH_NCCL).c_str(),
              zrt::comm::nccl_version().c_str());
  std::printf("CPU Adam SIMD path ........ %s\n", zrt::kernels::cpu_adam_isa_name());
  std::printf("SentencePiece ............. %s (zrt-generate's text prompts)\n",
              yes_no(ZRT_WITH_SENTENCEPIECE).c_str());
  std::printf("threads ................... %u hardware, %d torch intra-op, OMP_NUM_THREADS=%s\n",
              std::thread::hardware_concurrency(), at::get_num_threads(),
              env_or("OMP_NUM_THREADS", "(unset)").c_str());
  std::printf("launcher environment ...... %s\n", launch.describe().c_str());
  std::printf("/dev/shm .................. %lld MiB\n", static_cast<long long>(shm_megabytes()));
  std::printf("-------------------------------------------------------------------\n");
  for (const auto& [name, ok] : r["usable"].items()) {
    std::printf("%-26s %s\n", name.c_str(), ok.get<bool>() ? "[OKAY]" : "[NO]");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return zrt::run_tool("zrt-report", [&] { return run(argc, argv); });
}
