// Environment the launcher hands to every rank: variables whose names start with one of
// kForwardPrefixes, plus KEY=VALUE lines from an env file (DeepSpeed's `.deepspeed_env`, or
// ZeroRT's `.zrt_env`). Env file values override the launcher's own environment.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "launch/host_facts.h"

namespace zrt::launch {

// Names an env file explicitly (ZeroRT's name first, then DeepSpeed's).
inline constexpr const char* kEnvFileVars[] = {"ZRT_ENV_FILE", "DS_ENV_FILE"};
// Looked for in $HOME, then the working directory; later files override earlier ones.
inline constexpr const char* kEnvFileNames[] = {".deepspeed_env", ".zrt_env"};
// Variables with these name prefixes are forwarded to every rank with `mpirun -x NAME`.
inline constexpr const char* kForwardPrefixes[] = {"ZRT_", "NCCL_",  "CUDA_", "OMP_",
                                                   "MKL_", "PYTHON", "UCX_"};

using EnvVars = std::vector<std::pair<std::string, std::string>>;

bool is_forwarded_name(const std::string& name);

// Sets `name` to `value`: replaces the value of an existing entry, else appends one.
void set_var(EnvVars* vars, const std::string& name, const std::string& value);

// `KEY=VALUE` lines; blank lines and `#` comments are skipped, a leading `export ` is allowed,
// and one pair of matching quotes around the value is removed. A bad line is a ConfigError naming
// `source`:line.
EnvVars parse_env_file(const std::string& text, const std::string& source);

struct EnvFiles {
  std::vector<std::string> paths;  // the files read, in order
  EnvVars vars;                    // their variables, later files overriding earlier ones
};

// Reads the env file named by ZRT_ENV_FILE / DS_ENV_FILE (relative paths are taken from `cwd`;
// it must exist), or else whichever of $HOME/.deepspeed_env, $HOME/.zrt_env, cwd/.deepspeed_env,
// cwd/.zrt_env exist.
EnvFiles load_env_files(const EnvMap& env, const std::string& cwd);

}  // namespace zrt::launch
