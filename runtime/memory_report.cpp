#include "runtime/memory_report.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace zrt::runtime {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kMiB = 1024.0 * 1024.0;

// The value in kB of "Key:   1234 kB" in a /proc file; -1 when absent.
double proc_kb(const char* path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) != 0) continue;
    std::istringstream fields(line.substr(key.size() + 1));
    double kb = -1;
    fields >> kb;
    return kb;
  }
  return -1;
}

double round2(double v) { return std::round(v * 100) / 100; }

}  // namespace

MemoryUsage read_memory_usage() {
  MemoryUsage u;
  const double rss = proc_kb("/proc/self/status", "VmRSS");
  const double hwm = proc_kb("/proc/self/status", "VmHWM");
  const double total = proc_kb("/proc/meminfo", "MemTotal");
  const double available = proc_kb("/proc/meminfo", "MemAvailable");
  if (rss >= 0) u.rss_gb = rss * 1024 / kGiB;
  u.peak_rss_gb = std::max(u.rss_gb, hwm >= 0 ? hwm * 1024 / kGiB : 0.0);
  if (total > 0 && available >= 0) {
    u.used_gb = (total - available) * 1024 / kGiB;
    u.percent = 100.0 * (total - available) / total;
  }
  return u;
}

void reset_peak_rss() {
  std::ofstream clear("/proc/self/clear_refs");
  if (clear) clear << "5";
}

std::vector<std::string> format_memory_report(const std::string& message, const MemoryUsage& u,
                                              const ModelStateBytes& s) {
  return {
      message,
      str("MA ", round2(u.rss_gb), " GB Max_MA ", round2(u.peak_rss_gb), " GB CA ",
          round2(u.rss_gb), " GB Max_CA ", round2(u.peak_rss_gb), " GB"),
      str("CPU Virtual Memory:  used = ", round2(u.used_gb),
          " GB, percent = ", std::round(u.percent * 10) / 10, "%"),
      str("model states of this rank: params ", round2(s.params / kMiB), " MB, grads ",
          round2(s.grads / kMiB), " MB, fp32 master ", round2(s.master / kMiB), " MB, optimizer ",
          round2(s.optimizer / kMiB), " MB, gathered ", round2(s.gathered / kMiB), " MB",
          s.swapped > 0 ? str(", swap buffers ", round2(s.swap_buffers / kMiB), " MB, on NVMe ",
                              round2(s.swapped / kMiB), " MB")
                        : std::string())};
}

std::vector<std::string> format_state_dump(const std::string& name,
                                           std::vector<std::pair<std::string, std::string>> items) {
  std::sort(items.begin(), items.end());
  std::vector<std::string> lines = {name + ":"};
  for (const auto& [key, value] : items) {
    const size_t dots = key.size() < 29 ? 29 - key.size() : 1;
    lines.push_back(str("  ", key, " ", std::string(dots, '.'), " ", value));
  }
  return lines;
}

}  // namespace zrt::runtime
