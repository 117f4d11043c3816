// run_command: runs a shell command line and returns its exit status and output, for tests that
// drive the zrt-* tools, mpirun jobs or the project's Python as a user would.
#pragma once

#include <cstdio>
#include <stdexcept>
#include <string>

#include <sys/wait.h>

namespace zrt::test {

struct CommandResult {
  int exit_code = -1;  // -1 when the shell itself did not exit normally
  int signal = 0;      // the signal that ended the command (the shell's 128 + N), if any
  std::string output;  // stdout and stderr together
};

// Runs `command` through /bin/sh with stderr merged into stdout.
inline CommandResult run_command(const std::string& command) {
  CommandResult r;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("popen failed: " + command);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) r.output.append(buf, n);
  const int status = ::pclose(pipe);
  if (WIFEXITED(status)) {
    r.exit_code = WEXITSTATUS(status);
    if (r.exit_code > 128 && r.exit_code < 128 + 65) r.signal = r.exit_code - 128;
  } else if (WIFSIGNALED(status)) {
    r.signal = WTERMSIG(status);
  }
  return r;
}

}  // namespace zrt::test
