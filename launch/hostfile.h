// Hostfiles in the format DeepSpeed and Open MPI share: one `HOST slots=N` per line, `#` starts a
// comment, blank lines are ignored. Every problem (bad line, duplicate host, no hosts at all) is a
// ConfigError naming the file and line.
#pragma once

#include <string>
#include <vector>

namespace zrt::launch {

struct HostfileEntry {
  std::string host;
  int slots = 0;
  int line = 0;  // 1-based line in the file, for messages
};

// Parses hostfile text; `source` names it in error messages ("hosts.txt").
std::vector<HostfileEntry> parse_hostfile(const std::string& text, const std::string& source);

// Reads and parses the file at `path`; a missing or unreadable file is a ConfigError.
std::vector<HostfileEntry> read_hostfile(const std::string& path);

}  // namespace zrt::launch
