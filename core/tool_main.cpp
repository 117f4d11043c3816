#include "core/tool_main.h"

#include <cstdio>
#include <exception>

#include "core/error.h"

namespace zrt {

int run_tool(const char* tool_name, const std::function<int()>& body) {
  try {
    return body();
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: error: %s\n", tool_name, e.what());
    return static_cast<int>(e.exit_code());
  } catch (const std::bad_alloc& e) {
    std::fprintf(stderr, "%s: error: out of memory (%s)\n", tool_name, e.what());
    return static_cast<int>(ExitCode::kInternal);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: internal error (please report it): %s\n", tool_name, e.what());
    return static_cast<int>(ExitCode::kInternal);
  }
}

}  // namespace zrt
