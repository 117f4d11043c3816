// What the config module found wrong (errors), questionable (warnings) or worth saying (notes)
// while reading a DeepSpeed config, plus the "did you mean" helper for misspelled keys.
// Validation never stops at the first problem: it records every error here and throws one
// ConfigError listing them all (one per line) at the end.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zrt::config {

class Diagnostics {
 public:
  // Records "<path>: <message>" (or just <message> when path is empty).
  void error(std::string_view path, std::string_view message);
  // Records a line verbatim (used for DeepSpeed's own error texts).
  void error_text(std::string line);
  void warn(std::string line);
  void note(std::string line);
  // Records the error for a leftover "auto" at `dotted_key` (auto_error_message, worded for the
  // HF-Trainer path or for a config used directly; see set_hf_trainer).
  void auto_error(std::string_view dotted_key);
  // Whether the config went through the HF-Trainer layer (ResolveOptions::hf_trainer).
  void set_hf_trainer(bool hf_trainer) { hf_trainer_ = hf_trainer; }

  bool has_errors() const { return !errors_.empty(); }
  const std::vector<std::string>& errors() const { return errors_; }
  const std::vector<std::string>& warnings() const { return warnings_; }
  const std::vector<std::string>& notes() const { return notes_; }

  // Throws ConfigError with every error: the line itself when there is one, otherwise
  // "N problems in the DeepSpeed config:" followed by one line per problem.
  void throw_if_errors() const;

 private:
  std::vector<std::string> errors_;
  std::vector<std::string> warnings_;
  std::vector<std::string> notes_;
  bool hf_trainer_ = false;
};

// Joins a section path and a key: ("zero_optimization", "stage") -> "zero_optimization.stage".
std::string join_path(std::string_view path, std::string_view key);

// Optimal-string-alignment edit distance (insertions, deletions, substitutions and adjacent
// transpositions), case-insensitive.
std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `key` if it is close enough to be a plausible misspelling.
std::optional<std::string> did_you_mean(std::string_view key,
                                        const std::vector<std::string_view>& candidates);

// " (did you mean \"x\"?)" or "" when nothing is close.
std::string did_you_mean_suffix(std::string_view key,
                                const std::vector<std::string_view>& candidates);

}  // namespace zrt::config
