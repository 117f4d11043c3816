// The error model of ZeroRT: one exception hierarchy, two check macros, one exit-code table.
//
//   ZRT_CHECK(cond, ...)            something a user can cause (bad config, bad file, wrong world
//                                   size): throws zrt::Error with the values in the message.
//   ZRT_CHECK_AS(Type, cond, ...)   the same with a typed subclass (ConfigError, CommError, ...).
//   ZRT_INTERNAL_ASSERT(cond, ...)  a ZeroRT bug: throws InternalError with file:line.
//
// Library code never exits; tools translate exceptions into exit codes in one place
// (core/tool_main.h). The one exception is a deadline that passes inside a blocking MPI call,
// which no exception can interrupt: a collective past its deadline (Note [Collective deadlines])
// or the communicator's set-up (Note [Deadline of the communicator's set-up]) ends the process
// through zrt::exit_with_error, the only function of the library that exits.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace zrt {

// Process exit codes used by every zrt-* tool and example binary.
enum class ExitCode : int {
  kOk = 0,
  kUsage = 1,       // bad command line
  kInput = 2,       // bad config or other user input
  kCheckpoint = 3,  // unreadable, incomplete or inconsistent checkpoint
  kComm = 4,        // communication failure or timeout
  kInternal = 70,   // a ZeroRT bug (EX_SOFTWARE)
};

// Base of every ZeroRT exception. what() is the full message.
class Error : public std::runtime_error {
 public:
  explicit Error(std::string message) : std::runtime_error(std::move(message)) {}
  virtual ExitCode exit_code() const { return ExitCode::kInput; }
};

class UsageError : public Error {
 public:
  using Error::Error;
  ExitCode exit_code() const override { return ExitCode::kUsage; }
};

class ConfigError : public Error {
 public:
  using Error::Error;
  ExitCode exit_code() const override { return ExitCode::kInput; }
};

class CheckpointError : public Error {
 public:
  using Error::Error;
  ExitCode exit_code() const override { return ExitCode::kCheckpoint; }
};

class CommError : public Error {
 public:
  using Error::Error;
  ExitCode exit_code() const override { return ExitCode::kComm; }
};

class InternalError : public Error {
 public:
  using Error::Error;
  ExitCode exit_code() const override { return ExitCode::kInternal; }
};

// Concatenates anything streamable: zrt::str("rank ", r, " of ", n).
template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

namespace detail {
[[noreturn]] void throw_internal(const char* file, int line, const char* cond,
                                 const std::string& msg);
}  // namespace detail

}  // namespace zrt

#define ZRT_CHECK_AS(ErrorType, cond, ...)      \
  do {                                          \
    if (!(cond)) {                              \
      throw ErrorType(::zrt::str(__VA_ARGS__)); \
    }                                           \
  } while (false)

#define ZRT_CHECK(cond, ...) ZRT_CHECK_AS(::zrt::Error, cond, __VA_ARGS__)

#define ZRT_INTERNAL_ASSERT(cond, ...)                                                   \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      ::zrt::detail::throw_internal(__FILE__, __LINE__, #cond, ::zrt::str(__VA_ARGS__)); \
    }                                                                                    \
  } while (false)
