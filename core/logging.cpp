#include "core/logging.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>

#include <unistd.h>

namespace zrt {
namespace {

struct LogState {
  std::atomic<int> rank{0};
  std::atomic<int> level{static_cast<int>(LogLevel::kInfo)};
  std::mutex mutex;
  LogSink sink;
  std::FILE* rank_file = nullptr;  // ZRT_LOG_DIR's file, opened on the first line
  bool rank_file_tried = false;
  LogState() {
    // Until the communicator sets it, the launcher's rank: lines logged before MPI starts (a
    // config's warnings) then come once per job, not once per rank.
    for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "RANK"}) {
      const char* env = std::getenv(name);
      if (env == nullptr || *env == '\0') continue;
      char* end = nullptr;
      const long r = std::strtol(env, &end, 10);
      if (*end == '\0' && r >= 0) {
        rank = static_cast<int>(r);
        break;
      }
    }
    if (const char* env = std::getenv("ZRT_LOG_LEVEL"); env != nullptr && *env != '\0') {
      try {
        level = static_cast<int>(parse_log_level(env));
      } catch (const Error& e) {
        std::fprintf(stderr, "[zrt WARN] ignoring ZRT_LOG_LEVEL: %s\n", e.what());
      }
    }
  }
};

LogState& state() {
  static LogState s;
  return s;
}

}  // namespace

LogLevel parse_log_level(const std::string& text) {
  std::string t = text;
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
  if (t == "debug" || t == "trace") return LogLevel::kDebug;
  if (t == "info") return LogLevel::kInfo;
  if (t == "warn" || t == "warning") return LogLevel::kWarn;
  if (t == "error") return LogLevel::kError;
  if (t == "off" || t == "none") return LogLevel::kOff;
  throw ConfigError(
      str("invalid log level '", text, "': expected debug, info, warn, error or off"));
}

const char* log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "DEBUG";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kWarn:
      return "WARN";
    case LogLevel::kError:
      return "ERROR";
    case LogLevel::kOff:
      return "OFF";
  }
  return "?";
}

void set_log_rank(int rank) { state().rank = rank; }
int log_rank() { return state().rank; }
void set_log_level(LogLevel level) { state().level = static_cast<int>(level); }
LogLevel log_level() { return static_cast<LogLevel>(state().level.load()); }

bool log_enabled(LogLevel level) {
  return level != LogLevel::kOff && static_cast<int>(level) >= state().level.load();
}

void set_log_sink(LogSink sink) {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().sink = std::move(sink);
}

void log_line(LogLevel level, bool all_ranks, const std::string& message) {
  LogState& s = state();
  const int rank = s.rank;
  if (!log_enabled(level) || (!all_ranks && rank != 0)) return;
  std::string line = str("[zrt ", log_level_name(level), "]");
  if (rank != 0) line += str("[rank ", rank, "]");
  line += " ";
  line += message;
  if (s.sink) {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.sink(level, line);
    return;
  }
  append_to_rank_log_file(line);
  std::lock_guard<std::mutex> lock(s.mutex);
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

void append_to_rank_log_file(const std::string& line) {
  LogState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.rank_file_tried) {
    s.rank_file_tried = true;
    const char* dir = std::getenv("ZRT_LOG_DIR");
    if (dir == nullptr || *dir == '\0') return;
    const char* env_rank = std::getenv("OMPI_COMM_WORLD_RANK");
    const std::string rank = env_rank != nullptr ? env_rank : std::to_string(s.rank.load());
    char host[256] = "host";
    gethostname(host, sizeof(host) - 1);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    const std::string path = str(dir, "/", host, ".rank", rank, ".log");
    s.rank_file = std::fopen(path.c_str(), "a");
    if (s.rank_file == nullptr) {
      std::fprintf(stderr, "[zrt WARN] ZRT_LOG_DIR: cannot open %s for appending\n", path.c_str());
    }
  }
  if (s.rank_file == nullptr) return;
  std::fprintf(s.rank_file, "%s\n", line.c_str());
  std::fflush(s.rank_file);
}

}  // namespace zrt
