#include "aio/fault_injection.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace zrt::aio::detail {
namespace {

enum Kind : int { kNone = 0, kRead = 1, kWrite = 2 };

std::atomic<int> g_kind{kNone};
std::atomic<int64_t> g_target{0};
std::atomic<int64_t> g_count{0};  // requests of g_kind's kind seen since arming

}  // namespace

void arm_fault_injection_from_env() {
  const char* env = std::getenv("ZRT_AIO_FAIL");
  const std::string text = env != nullptr ? env : "";
  if (text.empty()) {
    g_kind = kNone;
    return;
  }
  const auto colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  int64_t n = 0;
  bool ok =
      colon != std::string::npos && (kind == "read" || kind == "write") && colon + 1 < text.size();
  for (size_t i = colon + 1; ok && i < text.size(); ++i) {
    ok = text[i] >= '0' && text[i] <= '9' && n < (int64_t{1} << 50);
    n = n * 10 + (text[i] - '0');
  }
  ZRT_CHECK(ok && n >= 1, "ZRT_AIO_FAIL: expected <read|write>:<N> with N >= 1, got '", text, "'");
  g_kind = kNone;  // no request counts against a half-written plan
  g_count = 0;
  g_target = n;
  g_kind = kind == "read" ? kRead : kWrite;
}

bool take_injected_failure(bool write) {
  const int kind = g_kind.load(std::memory_order_relaxed);
  if (kind == kNone || kind != (write ? kWrite : kRead)) return false;
  return g_count.fetch_add(1) + 1 == g_target.load();
}

}  // namespace zrt::aio::detail
