// zrt-launch: starts PROGRAM on every rank with Open MPI's mpirun (see launch/README.md).
//
//   zrt-launch [--np N | --num_gpus N] [--num_nodes N] [--hostfile FILE] [--include SPEC]
//       [--exclude SPEC] [--master_addr A] [--timeout S] [--oversubscribe]
//       [--launcher_args ARGS] [--dry-run] [--mpirun PATH] -- PROGRAM ARGS...
//
// Exit status: the job's, 1 for bad options or a program that does not exist, 2 for a bad
// hostfile, spec, env file or Slurm variable, 128 + the signal when stopped by SIGINT (Ctrl-C),
// SIGTERM or SIGHUP, after the ranks have ended (then the newest checkpoint-N of --output_dir is
// named).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
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
namespace fs = std::filesystem;

// After a job stopped by a signal: the newest HF-style checkpoint (output_dir/checkpoint-N with a
// `latest` file, which the save writes last) of a program run with --output_dir, and how to
// resume from it. Only this host's file system is looked at.
void say_where_checkpoints_are(const std::vector<std::string>& program) {
  std::string output_dir;
  for (size_t i = 0; i < program.size(); ++i) {
    if (program[i] == "--output_dir" && i + 1 < program.size()) output_dir = program[i + 1];
    if (program[i].rfind("--output_dir=", 0) == 0) output_dir = program[i].substr(13);
  }
  std::error_code ec;
  if (output_dir.empty() || !fs::is_directory(output_dir, ec)) return;
  int64_t newest = -1;
  for (const auto& entry : fs::directory_iterator(output_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("checkpoint-", 0) != 0 || !fs::exists(entry.path() / "latest", ec)) continue;
    char* end = nullptr;
    const long long step = std::strtoll(name.c_str() + 11, &end, 10);
    if (end != name.c_str() + 11 && *end == '\0' && step > newest) newest = step;
  }
  if (newest < 0) {
    std::fprintf(stderr, "zrt-launch: %s holds no complete checkpoint to resume from\n",
                 output_dir.c_str());
    return;
  }
  const std::string path = (fs::path(output_dir) / ("checkpoint-" + std::to_string(newest))).string();
  std::fprintf(stderr,
               "zrt-launch: the newest checkpoint is %s; to go on, run the same command with "
               "--resume_from_checkpoint %s (or last)\n",
               path.c_str(), path.c_str());
}

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
  const int code = run_and_wait(plan.argv, plan.env);
  if (code > 128) say_where_checkpoints_are(cli.options.program);
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  return zrt::run_tool("zrt-launch", [&] { return run(argc, argv); });
}
