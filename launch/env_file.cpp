// Env file grammar and discovery (see env_file.h).
#include "launch/env_file.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace zrt::launch {
namespace {

namespace fs = std::filesystem;

std::string strip(const std::string& s) {
  const auto begin = s.find_first_not_of(" \t\r");
  if (begin == std::string::npos) return "";
  const auto end = s.find_last_not_of(" \t\r");
  return s.substr(begin, end - begin + 1);
}

bool is_identifier(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (unsigned char c : name) {
    if (!std::isalnum(c) && c != '_') return false;
  }
  return true;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  ZRT_CHECK_AS(ConfigError, in.good(), "cannot read env file '", path, "'");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

void set_var(EnvVars* vars, const std::string& name, const std::string& value) {
  for (auto& [n, v] : *vars) {
    if (n == name) {
      v = value;
      return;
    }
  }
  vars->emplace_back(name, value);
}

bool is_forwarded_name(const std::string& name) {
  for (const char* prefix : kForwardPrefixes) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

EnvVars parse_env_file(const std::string& text, const std::string& source) {
  EnvVars vars;
  std::istringstream in(text);
  std::string raw;
  int line_no = 0;
  while (std::getline(in, raw)) {
    ++line_no;
    std::string line = strip(raw);
    if (line.empty() || line[0] == '#') continue;
    if (line.rfind("export ", 0) == 0) line = strip(line.substr(7));
    const std::size_t eq = line.find('=');
    const std::string name = eq == std::string::npos ? line : strip(line.substr(0, eq));
    ZRT_CHECK_AS(ConfigError, eq != std::string::npos && is_identifier(name), source, ":", line_no,
                 ": expected 'NAME=VALUE', got '", line, "'");
    std::string value = strip(line.substr(eq + 1));
    if (value.size() >= 2 && (value[0] == '"' || value[0] == '\'') && value.back() == value[0]) {
      value = value.substr(1, value.size() - 2);
    }
    set_var(&vars, name, value);
  }
  return vars;
}

EnvFiles load_env_files(const EnvMap& env, const std::string& cwd) {
  EnvFiles files;
  for (const char* var : kEnvFileVars) {
    const auto it = env.find(var);
    if (it == env.end() || it->second.empty()) continue;
    fs::path path = it->second;
    if (path.is_relative()) path = fs::path(cwd) / path;
    std::error_code ec;
    ZRT_CHECK_AS(ConfigError, fs::is_regular_file(path, ec), var, "='", it->second,
                 "': no such env file (", path.string(), ")");
    files.paths.push_back(path.string());
    break;
  }
  if (files.paths.empty()) {
    std::vector<fs::path> dirs;
    const auto home = env.find("HOME");
    if (home != env.end() && !home->second.empty()) dirs.emplace_back(home->second);
    std::error_code ec;
    if (dirs.empty() || !fs::equivalent(dirs[0], cwd, ec)) dirs.emplace_back(cwd);
    for (const fs::path& dir : dirs) {
      for (const char* name : kEnvFileNames) {
        if (fs::is_regular_file(dir / name, ec)) files.paths.push_back((dir / name).string());
      }
    }
  }
  for (const std::string& path : files.paths) {
    for (const auto& [name, value] : parse_env_file(read_text(path), path)) {
      set_var(&files.vars, name, value);
    }
  }
  return files;
}

}  // namespace zrt::launch
