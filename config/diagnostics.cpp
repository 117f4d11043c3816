#include "config/diagnostics.h"

#include <algorithm>
#include <cctype>

#include "config/section_reader.h"
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
void Diagnostics::auto_error(std::string_view dotted_key) {
  errors_.push_back(auto_error_message(dotted_key, hf_trainer_));
}

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

namespace {

std::vector<std::string_view> tokens(std::string_view s) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    const std::size_t end = std::min(s.find('_', start), s.size());
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

bool token_subset(std::string_view small, std::string_view big) {
  const auto big_tokens = tokens(big);
  for (std::string_view t : tokens(small)) {
    if (std::find(big_tokens.begin(), big_tokens.end(), t) == big_tokens.end()) return false;
  }
  return true;
}

// Edit distance, but a key whose words are all words of the candidate (or the reverse:
// "warmup_steps" vs "warmup_num_steps") counts as close: 1 + the difference in word count.
std::size_t suggestion_score(std::string_view key, std::string_view candidate) {
  std::size_t score = edit_distance(key, candidate);
  if (token_subset(key, candidate) || token_subset(candidate, key)) {
    const std::size_t a = tokens(key).size();
    const std::size_t b = tokens(candidate).size();
    score = std::min(score, 1 + (a > b ? a - b : b - a));
  }
  return score;
}

}  // namespace

std::optional<std::string> did_you_mean(std::string_view key,
                                        const std::vector<std::string_view>& candidates) {
  if (key.empty()) return std::nullopt;
  std::optional<std::string> best;
  std::size_t best_distance = 0;
  for (std::string_view candidate : candidates) {
    const std::size_t d = suggestion_score(key, candidate);
    if (!best || d < best_distance) {
      best = std::string(candidate);
      best_distance = d;
    }
  }
  if (!best) return std::nullopt;
  // Close enough: a few edits, scaled with the length (long DeepSpeed keys get more slack); a key
  // of three letters or fewer only one ("foo" is not a misspelling of "aio").
  const std::size_t limit = std::min(key.size(), best->size()) <= 3
                                ? 1
                                : std::max<std::size_t>(2, std::max(key.size(), best->size()) / 3);
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
