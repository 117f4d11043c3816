#include "core/tool_main.h"

#include <atomic>
#include <cstdio>
#include <exception>

#include "core/error.h"

namespace zrt {
namespace {
std::atomic<AbortHook> g_abort_hook{nullptr};

int fail(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  run_abort_hook(code);
  return code;
}
}  // namespace

void set_abort_hook(AbortHook hook) { g_abort_hook = hook; }

void run_abort_hook(int exit_code) {
  if (AbortHook hook = g_abort_hook.load()) hook(exit_code);
}

int run_tool(const char* tool_name, const std::function<int()>& body) {
  try {
    return body();
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: error: %s\n", tool_name, e.what());
    return fail(static_cast<int>(e.exit_code()));
  } catch (const std::bad_alloc& e) {
    std::fprintf(stderr, "%s: error: out of memory (%s)\n", tool_name, e.what());
    return fail(static_cast<int>(ExitCode::kInternal));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: internal error (please report it): %s\n", tool_name, e.what());
    return fail(static_cast<int>(ExitCode::kInternal));
  }
}

}  // namespace zrt
