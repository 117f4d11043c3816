#include "config/diagnostics.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace zrt::config {

void Diagnostics::error(std::string_view path, std::string_view message) {
  if (path.empty()) {
    errors_.emplace_back(message);
  } else {
    errors_.push_back(str(path, ": ", message));
  }
}

void Diagnostics::error_text(std::string line) { errors_.push_back(std::move(line)); }
void Diagnostics::warn(std::string line) { warnings_.push_back(std::move(line)); }
void Diagnostics::note(std::string line) { notes_.push_back(std::move(line)); }

void Diagnostics::throw_if_errors() const {
  if (errors_.empty()) return;
  if (errors_.size() == 1) throw ConfigError(errors_.front());
  std::string message = str(errors_.size(), " problems in the DeepSpeed config:");
  for (const auto& line : errors_) message += "\n" + line;
  throw ConfigError(message);
}

std::string join_path(std::string_view path, std::string_view key) {
  if (path.empty()) return std::string(key);
  return str(path, ".", key);
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  const std::size_t n = a.size();
  const std::size_t m = b.size();
  // Three rolling rows: i-2, i-1 and i (the transposition looks two rows back).
  std::vector<std::size_t> prev2(m + 1), prev(m + 1), cur(m + 1);
  for (std::size_t j = 0; j <= m; ++j) prev[j] = j;
  auto lower = [](char c) {
    return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  };
  for (std::size_t i = 1; i <= n; ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= m; ++j) {
      const bool same = lower(a[i - 1]) == lower(b[j - 1]);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (same ? 0 : 1)});
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) &&
          lower(a[i - 2]) == lower(b[j - 1])) {
        cur[j] = std::min(cur[j], prev2[j - 2] + 1);
      }
    }
    std::swap(prev2, prev);
    std::swap(prev, cur);
  }
  return prev[m];
}

std::optional<std::string> did_you_mean(std::string_view key,
                                        const std::vector<std::string_view>& candidates) {
  std::optional<std::string> best;
  std::size_t best_distance = 0;
  for (std::string_view candidate : candidates) {
    const std::size_t d = edit_distance(key, candidate);
    if (!best || d < best_distance) {
      best = std::string(candidate);
      best_distance = d;
    }
  }
  if (!best) return std::nullopt;
  // Close enough: a few edits, scaled with the length (long DeepSpeed keys get more slack).
  const std::size_t limit = std::max<std::size_t>(2, std::max(key.size(), best->size()) / 3);
  if (best_distance > limit || *best == key) return std::nullopt;
  return best;
}

std::string did_you_mean_suffix(std::string_view key,
                                const std::vector<std::string_view>& candidates) {
  auto best = did_you_mean(key, candidates);
  if (!best) return "";
  return str(" (did you mean \"", *best, "\"?)");
}

}  // namespace zrt::config
