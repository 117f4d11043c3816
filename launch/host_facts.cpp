// Host discovery for the launcher (see host_facts.h). Linux only: affinity from
// sched_getaffinity, topology from sysfs, GPUs from /dev.
#include "launch/host_facts.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>
#include <utility>

#include <sched.h>
#include <unistd.h>

extern char** environ;

namespace zrt::launch {
namespace {

bool read_int(const std::string& path, int* value) {
  std::ifstream in(path);
  return static_cast<bool>(in >> *value);
}

std::vector<int> affinity_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
    }
  }
  if (cpus.empty()) {
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    for (long cpu = 0; cpu < std::max(1L, n); ++cpu) cpus.push_back(static_cast<int>(cpu));
  }
  return cpus;
}

}  // namespace

HostFacts HostFacts::current() {
  HostFacts facts;
  facts.is_root = geteuid() == 0;
  facts.stdout_is_terminal = isatty(STDOUT_FILENO) != 0;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::size_t eq = entry.find('=');
    if (eq != std::string::npos && eq > 0)
      facts.env.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  facts.cores = count_physical_cores(affinity_cpus(), "/sys/devices/system/cpu");
  facts.visible_gpus = count_visible_gpus(facts.env, "/dev");
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) == 0) facts.hostname = name;
  std::error_code ec;
  facts.cwd = std::filesystem::current_path(ec).string();
  return facts;
}

bool is_local_host(const std::string& host, const std::string& hostname) {
  if (host == "localhost" || host == "127.0.0.1" || host == "::1") return true;
  if (hostname.empty()) return false;
  return host == hostname || host == hostname.substr(0, hostname.find('.'));
}

int count_physical_cores(const std::vector<int>& cpus, const std::string& sys_cpu_dir) {
  std::set<std::pair<int, int>> cores;
  for (int cpu : cpus) {
    const std::string topo = sys_cpu_dir + "/cpu" + std::to_string(cpu) + "/topology/";
    int package = 0;
    int core = 0;
    if (!read_int(topo + "physical_package_id", &package) || !read_int(topo + "core_id", &core)) {
      return std::max<int>(1, static_cast<int>(cpus.size()));
    }
    cores.emplace(package, core);
  }
  return std::max<int>(1, static_cast<int>(cores.size()));
}

int count_visible_gpus(const EnvMap& env, const std::string& dev_dir) {
  const auto it = env.find("CUDA_VISIBLE_DEVICES");
  if (it != env.end()) {
    if (it->second.empty()) return 0;
    int n = 1;
    for (char c : it->second) n += c == ',' ? 1 : 0;
    return n;
  }
  int n = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dev_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 6 && name.compare(0, 6, "nvidia") == 0 &&
        std::all_of(name.begin() + 6, name.end(),
                    [](unsigned char c) { return std::isdigit(c); })) {
      ++n;
    }
  }
  return n;
}

}  // namespace zrt::launch
