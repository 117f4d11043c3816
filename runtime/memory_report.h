// The memory_breakdown and dump_state config keys: DeepSpeed's see_memory_usage report at the
// engine's points (construction, before/after backward, before/after step) and its
// print_configuration of the engine's state at start.
//
// On the CPU, DeepSpeed's accelerator reports the process's resident set as "memory allocated"
// (MA, and CA alike) and the largest one seen since the last report as Max_MA; ZeroRT reads the
// same from /proc/self/status (VmRSS, and VmHWM, reset after each report through
// /proc/self/clear_refs) and the machine's used memory (MemTotal − MemAvailable) from
// /proc/meminfo, as psutil does. Unlike DeepSpeed (rank 0 only) every rank reports, since ZeRO
// gives ranks different amounts, with the engine's own model-state bytes of that rank.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "runtime/model_states.h"

namespace zrt::runtime {

struct MemoryUsage {
  double rss_gb = 0;       // resident set of this process now
  double peak_rss_gb = 0;  // largest resident set since the last reset_peak_rss()
  double used_gb = 0;      // the machine's MemTotal − MemAvailable
  double percent = 0;      // used / MemTotal, in %
};

// Reads /proc (zeros where a file is missing, e.g. not Linux).
MemoryUsage read_memory_usage();
// Starts a new peak window (writes "5" to /proc/self/clear_refs; harmless if refused).
void reset_peak_rss();

// DeepSpeed's three lines (message, "MA .. GB Max_MA .. GB CA .. GB Max_CA .. GB", "CPU Virtual
// Memory:  used = .. GB, percent = ..%") and a fourth with the engine's model states.
std::vector<std::string> format_memory_report(const std::string& message, const MemoryUsage& usage,
                                              const ModelStateBytes& states);

// DeepSpeed's print_configuration: "NAME:" then "  key ..... value", keys sorted, dots up to
// column 29.
std::vector<std::string> format_state_dump(const std::string& name,
                                           std::vector<std::pair<std::string, std::string>> items);

}  // namespace zrt::runtime
