// Running the job: find mpirun, fork/exec it with the plan's environment additions, forward
// SIGINT/SIGTERM/SIGHUP sent to the launcher, wait, and turn the wait status into an exit code.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launch/env_file.h"

namespace zrt::launch {

// `name` itself when it contains a '/', else the first executable `dir/name` for dir in `path`
// (a PATH-style list). nullopt when there is none.
std::optional<std::string> find_executable(const std::string& name, const std::string& path);

// The exit code a shell would report for a waitpid status: the exit status, or 128 + signal.
int exit_code_from_status(int status);

// Runs argv[0] (a path) with argv and the current environment plus `env` (which wins), forwards
// SIGINT, SIGTERM and SIGHUP sent to this process (Note [Forwarding signals]), waits for it and
// for the processes it leaves behind (Note [Waiting for the ranks]) and returns
// exit_code_from_status, or 128 + the signal when a SIGINT, SIGTERM or SIGHUP arrived (saying so
// on stderr). Throws Error when the program cannot be started.
int run_and_wait(const std::vector<std::string>& argv, const EnvVars& env);

}  // namespace zrt::launch
