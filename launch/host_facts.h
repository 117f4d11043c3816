// What the launcher needs to know about the machine it runs on: root or not, how many cores
// mpirun will count as slots, host name, GPUs, and a snapshot of the environment. Gathered once by
// HostFacts::current(); tests build their own so plans are reproducible.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace zrt::launch {

using EnvMap = std::map<std::string, std::string>;

struct HostFacts {
  bool is_root = false;
  int cores = 1;         // physical cores this process may run on (what mpirun counts as slots)
  int visible_gpus = 0;  // CUDA_VISIBLE_DEVICES entries, else /dev/nvidiaN devices
  std::string hostname;
  std::string cwd;
  EnvMap env;
  // Whether zrt-launch's stdout is a terminal. Open MPI gives each rank a pseudo-terminal for its
  // output whatever mpirun's stdout is, so the ranks cannot tell a log file from a terminal:
  // build_plan tells them (ZRT_PROGRESS=lines) when it is not one.
  bool stdout_is_terminal = true;

  static HostFacts current();
};

// localhost, 127.0.0.1, ::1, this host's name or its first label.
bool is_local_host(const std::string& host, const std::string& hostname);

// Distinct (package, core) pairs among `cpus`, read from `sys_cpu_dir`/cpuN/topology; the number
// of CPUs when the topology cannot be read. At least 1.
int count_physical_cores(const std::vector<int>& cpus, const std::string& sys_cpu_dir);

// GPUs a rank could see: the entries of CUDA_VISIBLE_DEVICES when it is set, else the number of
// /dev/nvidiaN device files under `dev_dir`.
int count_visible_gpus(const EnvMap& env, const std::string& dev_dir);

}  // namespace zrt::launch
