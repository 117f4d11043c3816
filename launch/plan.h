// From a LaunchOptions to the exact mpirun command: which hosts and slots (hostfile, Slurm
// allocation or this machine, then --include/--exclude, --num_nodes, --num_gpus, --np), which
// mpirun flags (--oversubscribe, --bind-to, --timeout, --launcher_args, --host), and which
// environment every rank gets (root-allow variables, env files, forwarded prefixes,
// OMP_NUM_THREADS). Pure given HostFacts.
#pragma once

#include <string>
#include <vector>

#include "launch/env_file.h"
#include "launch/host_facts.h"
#include "launch/options.h"
#include "launch/world.h"

namespace zrt::launch {

// mpirun's own settings in its environment (Note [MCA variables] in plan.cpp).
inline constexpr const char* kMcaPrefix = "OMPI_MCA_";

struct LaunchPlan {
  World world;
  bool single_node = true;         // every rank runs on this machine
  std::vector<std::string> argv;   // argv[0] is the mpirun path
  EnvVars env;                     // added to mpirun's environment (and forwarded with -x)
  EnvVars mpi_env;                 // OMPI_MCA_* already in the environment: mpirun reads them
  std::vector<std::string> notes;  // what the launcher decided on its own, one line each
};

// The hosts and slots the job runs on. Reads the hostfile (options.hostfile, else
// options.default_hostfile when it exists), else the Slurm allocation in facts.env (slurm.h), else
// takes this machine alone; appends notes.
World select_world(const LaunchOptions& options, const HostFacts& facts,
                   std::vector<std::string>* notes);

// The mpirun command and environment for `world`.
LaunchPlan build_plan(const World& world, const LaunchOptions& options, const HostFacts& facts,
                      const EnvFiles& env_files, const std::string& mpirun);

// select_world + load_env_files + build_plan.
LaunchPlan make_plan(const LaunchOptions& options, const HostFacts& facts,
                     const std::string& mpirun);

// POSIX shell quoting: the word unchanged when it is safe, else in single quotes.
std::string shell_quote(const std::string& word);
std::string shell_join(const std::vector<std::string>& words);

// What --dry-run prints: a summary comment, a `# from the environment: export NAME=VALUE` comment
// for each of plan.mpi_env, `export NAME=VALUE` for each environment addition, and the command,
// all shell-quoted so the text can be pasted into a shell.
std::string format_dry_run(const LaunchPlan& plan);

}  // namespace zrt::launch
