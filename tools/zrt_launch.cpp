// zrt-launch: starts PROGRAM on every rank with Open MPI's mpirun (see launch/README.md).
//
//   zrt-launch [--np N | --num_gpus N] [--num_nodes N] [--hostfile FILE] [--include SPEC]
//       [--exclude SPEC] [--master_addr A] [--timeout S] [--oversubscribe]
//       [--launcher_args ARGS] [--dry-run] [--mpirun PATH] -- PROGRAM ARGS...
//
// Exit status: the job's, 1 for bad options or a program that does not exist, 2 for a bad
// hostfile, spec, env file or Slurm variable, 130 when interrupted (Ctrl-C), after the ranks have
// ended.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tool_main.h"
#include "launch/cli.h"
#include "launch/host_facts.h"
#include "launch/plan.h"
#include "launch/process.h"

namespace {

using namespace zrt::launch;

// The mpirun to run: --mpirun, else `mpirun` on PATH. In a dry run a missing one is not an error.
std::string locate_mpirun(const LaunchOptions& options, const HostFacts& facts) {
  const std::string wanted = options.mpirun.empty() ? "mpirun" : options.mpirun;
  const auto path_it = facts.env.find("PATH");
  const auto found = find_executable(wanted, path_it == facts.env.end() ? "" : path_it->second);
  if (found) return *found;
  ZRT_CHECK(options.dry_run,
            options.mpirun.empty()
                ? std::string("mpirun not found on PATH: install Open MPI (Debian/Ubuntu: "
                              "apt-get install openmpi-bin) or pass --mpirun PATH")
                : "--mpirun '" + options.mpirun + "' is not an executable file");
  return wanted;
}

int run(int argc, char** argv) {
  const CliArgs cli = parse_launch_args(std::vector<std::string>(argv + 1, argv + argc));
  if (cli.help) {
    std::fputs(zrt::launch::launch_help().c_str(), stdout);
    return 0;
  }
  const HostFacts facts = HostFacts::current();
  const std::string mpirun = locate_mpirun(cli.options, facts);
  const LaunchPlan plan = make_plan(cli.options, facts, mpirun);
  for (const std::string& note : plan.notes) std::fprintf(stderr, "zrt-launch: %s\n", note.c_str());
  if (cli.options.dry_run) {
    std::fputs(format_dry_run(plan).c_str(), stdout);
    return 0;
  }
  // On this host a missing program is our error to report (mpirun would exit 132/134 without
  // saying why); on other hosts the path may differ, so it is left to them.
  if (plan.single_node) {
    const std::string& program = cli.options.program[0];
    const auto path_it = facts.env.find("PATH");
    ZRT_CHECK_AS(zrt::UsageError,
                 find_executable(program, path_it == facts.env.end() ? "" : path_it->second),
                 "program '", program, "' not found: ",
                 program.find('/') == std::string::npos ? "no executable of that name on PATH"
                                                        : "no such executable file");
  }
  std::fprintf(stderr, "zrt-launch: %d rank(s) on %zu node(s): %s\nzrt-launch: %s\n",
               plan.world.num_ranks(), plan.world.hosts.size(), plan.world.describe().c_str(),
               shell_join(plan.argv).c_str());
  return run_and_wait(plan.argv, plan.env);
}

}  // namespace

int main(int argc, char** argv) {
  return zrt::run_tool("zrt-launch", [&] { return run(argc, argv); });
}
