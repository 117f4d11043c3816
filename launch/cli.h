// The zrt-launch command line: `zrt-launch [options] -- PROGRAM ARGS...`. DeepSpeed's underscore
// spellings (--num_gpus) with dashed aliases (--num-gpus); mpirun's `-np N` is accepted too.
// Every problem is a UsageError naming the flag.
#pragma once

#include <string>
#include <vector>

#include "launch/options.h"

namespace zrt::launch {

struct CliArgs {
  LaunchOptions options;
  bool help = false;  // --help: print launch_help() and exit 0
};

// Parses the arguments after the program name.
CliArgs parse_launch_args(const std::vector<std::string>& args);

// The --help text: usage line, options with defaults, examples.
std::string launch_help();

}  // namespace zrt::launch
