#include "core/error.h"

namespace zrt::detail {

void throw_internal(const char* file, int line, const char* cond, const std::string& msg) {
  throw InternalError(str("internal error (a ZeroRT bug, please report it) at ", file, ":", line,
                          ": expected ", cond, msg.empty() ? "" : ": ", msg));
}

}  // namespace zrt::detail
