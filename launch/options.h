// What the user asked zrt-launch for: the parsed command line, before any hostfile is read.
// Filled by parse_launch_args (launch/cli.h) and consumed by make_plan (launch/plan.h); plain data
// with defaults so tests can build one field by field.
#pragma once

#include <string>
#include <vector>

namespace zrt::launch {

// DeepSpeed's default hostfile; read only when it exists and no --hostfile was given.
inline constexpr const char* kDefaultHostfile = "/job/hostfile";

struct LaunchOptions {
  int np = -1;           // --np: total ranks (-1: not given)
  int num_gpus = -1;     // --num_gpus: ranks per node, one per GPU slot (-1: not given)
  int num_nodes = -1;    // --num_nodes: use the first N hosts (-1: all)
  std::string hostfile;  // --hostfile (empty: default_hostfile, if it exists)
  std::string default_hostfile = kDefaultHostfile;
  std::string include;               // --include SPEC
  std::string exclude;               // --exclude SPEC
  std::string master_addr;           // --master_addr: exported as MASTER_ADDR
  int timeout_s = 0;                 // --timeout: mpirun's job time limit (0: none)
  bool oversubscribe = false;        // --oversubscribe: always pass it to mpirun
  bool dry_run = false;              // --dry-run: print, do not run
  std::string mpirun;                // --mpirun PATH (empty: search PATH)
  std::vector<std::string> program;  // PROGRAM ARGS... (after "--")
  // --launcher_args split into words: more mpirun options, placed after zrt-launch's own
  std::vector<std::string> launcher_args;
};

}  // namespace zrt::launch
