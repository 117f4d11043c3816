// Rank-aware logging. By default only rank 0 prints (ZRT_LOG / zrt::log); ZRT_LOG_ALL prints on
// every rank. Lines from a non-zero rank carry a "[rank N]" prefix. The threshold comes from the
// ZRT_LOG_LEVEL environment variable (debug, info, warn, error, off; default info) unless set in
// code. Thread-safe: each line is written with one call under a mutex.
#pragma once

#include <functional>
#include <string>

#include "core/error.h"

namespace zrt {

enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

// Parses "debug"/"info"/"warn"/"warning"/"error"/"off" (case-insensitive); throws ConfigError.
LogLevel parse_log_level(const std::string& text);
const char* log_level_name(LogLevel level);

// Process-wide logging state. set_log_rank is called once the communicator knows the rank.
void set_log_rank(int rank);
int log_rank();
void set_log_level(LogLevel level);
LogLevel log_level();
bool log_enabled(LogLevel level);

// Replaces the output (stderr) with a callback receiving whole formatted lines; an empty
// function restores stderr. Used by tests.
using LogSink = std::function<void(LogLevel, const std::string&)>;
void set_log_sink(LogSink sink);

// Writes one formatted line if `level` passes the threshold and (unless all_ranks) this is rank 0.
void log_line(LogLevel level, bool all_ranks, const std::string& message);

// Note [Per-rank log files]
// With ZRT_LOG_DIR set, every line a rank writes through log_line, and the fatal error a tool
// prints (run_tool), is also appended to ZRT_LOG_DIR/<host>.rank<R>.log on the rank's own host
// (R: OMPI_COMM_WORLD_RANK, else the log rank). mpirun forwards a remote rank's stderr through its
// daemons, so when a host loses its network its ranks' last words would otherwise be lost.
// Appends `line` (no newline) to this rank's file; does nothing without ZRT_LOG_DIR. Never throws.
void append_to_rank_log_file(const std::string& line);

}  // namespace zrt

#define ZRT_LOG_IMPL(level, all_ranks, ...)                       \
  do {                                                            \
    if (::zrt::log_enabled(level)) {                              \
      ::zrt::log_line(level, all_ranks, ::zrt::str(__VA_ARGS__)); \
    }                                                             \
  } while (false)

// Rank 0 only.
#define ZRT_LOG_DEBUG(...) ZRT_LOG_IMPL(::zrt::LogLevel::kDebug, false, __VA_ARGS__)
#define ZRT_LOG_INFO(...) ZRT_LOG_IMPL(::zrt::LogLevel::kInfo, false, __VA_ARGS__)
#define ZRT_LOG_WARN(...) ZRT_LOG_IMPL(::zrt::LogLevel::kWarn, false, __VA_ARGS__)
// Every rank (prefixed with [rank N] on non-zero ranks).
#define ZRT_LOG_INFO_ALL(...) ZRT_LOG_IMPL(::zrt::LogLevel::kInfo, true, __VA_ARGS__)
#define ZRT_LOG_WARN_ALL(...) ZRT_LOG_IMPL(::zrt::LogLevel::kWarn, true, __VA_ARGS__)
#define ZRT_LOG_ERROR(...) ZRT_LOG_IMPL(::zrt::LogLevel::kError, true, __VA_ARGS__)
