// The one place where exceptions become process exit codes (see ExitCode in core/error.h).
// Every zrt-* tool and example main() is `return zrt::run_tool("zrt-x", [&] { ... });`.
#pragma once

#include <functional>

namespace zrt {

// Runs `body`; returns its result, or on an exception prints "<tool>: error: <message>" to
// stderr and returns the exception's exit code (zrt::Error subclasses), 70 for anything else.
int run_tool(const char* tool_name, const std::function<int()>& body);

}  // namespace zrt
