// The one place where exceptions become process exit codes (see ExitCode in core/error.h).
// Every zrt-* tool and example main() is `return zrt::run_tool("zrt-x", [&] { ... });`.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/error.h"

namespace zrt {

// Runs `body`; returns its result, or on an exception prints "<tool>: error: <message>" to
// stderr and returns the exception's exit code (zrt::Error subclasses), 70 for anything else.
// On an exception the abort hook (if any) runs first with that exit code.
int run_tool(const char* tool_name, const std::function<int()>& body);

// A tool made of subcommands, `<tool> <subcommand> [arguments]`.
struct Subcommand {
  const char* name;
  int (*run)(const std::vector<std::string>& args);  // the arguments after the subcommand
};

// run_tool around the dispatch of argv[1] to its subcommand: prints `usage` for -h, --help and
// help; a missing or unknown subcommand is a UsageError that shows `usage`.
int run_subcommand_tool(const char* tool_name, int argc, char** argv,
                        const std::vector<Subcommand>& subcommands, const std::string& usage);

// Note [Failing fast in a multi-process job]
// A rank that fails must not go on to MPI_Finalize (which waits for the other ranks, who are
// themselves waiting for the failed one, until their communication timeout). comm/ installs a
// hook that calls MPI_Abort with the exit code, so mpirun ends the whole job within about a
// second. Programs with their own main() get the same by letting the exception escape
// (std::terminate) or by calling zrt::run_abort_hook(code) before returning.
using AbortHook = void (*)(int exit_code);
void set_abort_hook(AbortHook hook);
// Runs the hook if one is installed (it normally does not return).
void run_abort_hook(int exit_code);

// Ends the process from a thread that cannot hand an exception to the code that would report it
// (e.g. the watchdog of a collective that the caller's own thread is blocked in): prints
// "<tool>: error: <message>" to stderr and the rank's log file as run_tool does (the tool named
// by the latest run_tool call, "zrt" before any), runs the abort hook with `code`, and exits with
// it if the hook returns.
[[noreturn]] void exit_with_error(const std::string& message, ExitCode code);

}  // namespace zrt
