// Hostfile grammar (see hostfile.h). Stricter than DeepSpeed's regex on purpose: a line with
// extra words or slots=0 is an error rather than something silently half-read.
#include "launch/hostfile.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"

namespace zrt::launch {
namespace {

constexpr int kMaxSlots = 1 << 16;

std::string strip(const std::string& s) {
  const auto begin = s.find_first_not_of(" \t\r");
  if (begin == std::string::npos) return "";
  const auto end = s.find_last_not_of(" \t\r");
  return s.substr(begin, end - begin + 1);
}

// "slots=N" with 1 <= N <= kMaxSlots, or -1.
int parse_slots(const std::string& word) {
  const std::string prefix = "slots=";
  if (word.compare(0, prefix.size(), prefix) != 0) return -1;
  const std::string digits = word.substr(prefix.size());
  if (digits.empty() || digits.size() > 6) return -1;
  for (char c : digits) {
    if (c < '0' || c > '9') return -1;
  }
  const int value = std::stoi(digits);
  return value >= 1 && value <= kMaxSlots ? value : -1;
}

}  // namespace

std::vector<HostfileEntry> parse_hostfile(const std::string& text, const std::string& source) {
  std::vector<HostfileEntry> entries;
  std::map<std::string, int> first_line;
  std::istringstream in(text);
  std::string raw;
  int line_no = 0;
  while (std::getline(in, raw)) {
    ++line_no;
    const std::string line = strip(raw.substr(0, raw.find('#')));
    if (line.empty()) continue;
    std::istringstream words(line);
    std::string host, slots_word, extra;
    words >> host >> slots_word;
    const bool has_extra = static_cast<bool>(words >> extra);
    const int slots = parse_slots(slots_word);
    ZRT_CHECK_AS(ConfigError, !slots_word.empty() && !has_extra && slots > 0, source, ":", line_no,
                 ": expected 'HOST slots=N' with N from 1 to ", kMaxSlots, ", got '", line, "'");
    const auto [it, inserted] = first_line.emplace(host, line_no);
    ZRT_CHECK_AS(ConfigError, inserted, source, ":", line_no, ": host '", host,
                 "' is listed twice (first on line ", it->second, ")");
    entries.push_back({host, slots, line_no});
  }
  ZRT_CHECK_AS(ConfigError, !entries.empty(), source,
               ": no hosts (expected lines like 'worker-0 slots=4')");
  return entries;
}

std::vector<HostfileEntry> read_hostfile(const std::string& path) {
  std::error_code ec;
  ZRT_CHECK_AS(ConfigError, !std::filesystem::is_directory(path, ec), "hostfile '", path,
               "' is a directory");
  std::ifstream in(path);
  ZRT_CHECK_AS(ConfigError, in.good(), "cannot read hostfile '", path, "'");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_hostfile(text.str(), path);
}

}  // namespace zrt::launch
