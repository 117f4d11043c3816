#include "core/tool_main.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "core/env.h"
#include "core/error.h"
#include "core/logging.h"

namespace zrt {
namespace {
std::atomic<AbortHook> g_abort_hook{nullptr};
std::mutex g_tool_name_mutex;
std::string g_tool_name = "zrt";  // guarded by g_tool_name_mutex

void report(const std::string& line) {
  std::fprintf(stderr, "%s\n", line.c_str());
  append_to_rank_log_file(line);  // see Note [Per-rank log files]
}

// This process's rank from the launcher's environment (0 outside a multi-process job).
int launcher_rank() {
  for (const char* name : {env::kOmpiRank, env::kPmiRank, env::kPmixRank}) {
    try {
      if (const std::optional<int64_t> r = env::get_int(name)) return static_cast<int>(*r);
    } catch (const Error&) {
      // Not a number: not a rank we can use.
    }
  }
  return 0;
}

// Note [One error line per job]
// A bad config, command line or checkpoint fails on every rank the same way. Rank 0 reports it at once and
// ends the job (the abort hook, or its non-zero exit, which makes mpirun stop the others); the
// other ranks wait kUserErrorGrace before reporting, so that a job prints the error once. A
// user error that only some rank finds is still printed, by that rank, after the wait.
// zrt-launch then drops Open MPI's banners that follow such a line (launch/process.cpp).
constexpr std::chrono::milliseconds kUserErrorGrace{2500};

void report_user_error(const std::string& line) {
  if (launcher_rank() != 0) std::this_thread::sleep_for(kUserErrorGrace);
  report(line);
}

int fail(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  run_abort_hook(code);
  return code;
}
}  // namespace

void set_abort_hook(AbortHook hook) { g_abort_hook = hook; }

void run_abort_hook(int exit_code) {
  if (AbortHook hook = g_abort_hook.load()) hook(exit_code);
}

void exit_with_error(const std::string& message, ExitCode code) {
  std::string tool;
  {
    const std::lock_guard<std::mutex> lock(g_tool_name_mutex);
    tool = g_tool_name;
  }
  report(str(tool, ": error: ", message));
  std::_Exit(fail(static_cast<int>(code)));
}

int run_tool(const char* tool_name, const std::function<int()>& body) {
  {
    const std::lock_guard<std::mutex> lock(g_tool_name_mutex);
    g_tool_name = tool_name;
  }
  try {
    return body();
  } catch (const Error& e) {
    const ExitCode code = e.exit_code();
    const std::string line = str(tool_name, ": error: ", e.what());
    if (code == ExitCode::kUsage || code == ExitCode::kInput || code == ExitCode::kCheckpoint) {
      report_user_error(line);  // Note [One error line per job]
    } else {
      report(line);
    }
    return fail(static_cast<int>(code));
  } catch (const std::bad_alloc& e) {
    report(str(tool_name, ": error: out of memory (", e.what(), ")"));
    return fail(static_cast<int>(ExitCode::kInternal));
  } catch (const std::exception& e) {
    report(str(tool_name, ": internal error (please report it): ", e.what()));
    return fail(static_cast<int>(ExitCode::kInternal));
  }
}

int run_subcommand_tool(const char* tool_name, int argc, char** argv,
                        const std::vector<Subcommand>& subcommands, const std::string& usage) {
  return run_tool(tool_name, [&]() -> int {
    const std::vector<std::string> args(argv + 1, argv + argc);
    if (args.empty()) throw UsageError("missing subcommand\n" + usage);
    const std::string& name = args.front();
    if (name == "-h" || name == "--help" || name == "help") {
      std::printf("%s", usage.c_str());
      return 0;
    }
    for (const Subcommand& s : subcommands) {
      if (name == s.name) return s.run(std::vector<std::string>(args.begin() + 1, args.end()));
    }
    throw UsageError("unknown subcommand '" + name + "'\n" + usage);
  });
}

}  // namespace zrt
