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

// Splits `text` into words as a POSIX shell would, without expansions: blanks separate words,
// single quotes keep everything literally, double quotes keep everything but `\"`, `\\`, `\$`,
// `` \` `` escapes, and an unquoted backslash keeps the next character. An unbalanced quote or a
// trailing backslash is a UsageError naming `flag` ("--launcher_args").
std::vector<std::string> split_shell_words(const std::string& text, const std::string& flag);

// The --help text: usage line, options with defaults, examples.
std::string launch_help();

}  // namespace zrt::launch
