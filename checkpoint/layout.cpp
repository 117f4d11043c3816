#include "checkpoint/layout.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "core/strings.h"

namespace zrt::ckpt {
namespace {

std::string two_digits(int mp_rank) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%02d", mp_rank);
  return buf;
}

bool tag_char(char c, bool first) {
  const bool alnum = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
  return alnum || (!first && (c == '.' || c == '_' || c == '-'));
}

// A printable rendering of an untrusted name for messages.
std::string escaped(const std::string& s) {
  std::string out;
  for (char c : s.substr(0, 200)) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7F && c != '\\') {
      out += c;
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", u);
      out += buf;
    }
  }
  if (s.size() > 200) out += "...";
  return out;
}

PosixStorage& default_storage() {
  static PosixStorage storage;
  return storage;
}

}  // namespace

std::string model_states_name(int mp_rank) {
  return "mp_rank_" + two_digits(mp_rank) + "_model_states.pt";
}

std::string rng_state_name(int dp_rank) {
  return "zrt_rng_state_" + std::to_string(dp_rank) + ".pt";
}

std::string zero3_model_states_name(int dp_rank, int mp_rank) {
  return "zero_pp_rank_" + std::to_string(dp_rank) + "_mp_rank_" + two_digits(mp_rank) +
         "_model_states.pt";
}

std::string model_states_name_of(int zero_stage, int dp_rank) {
  return zero_stage == 3 ? zero3_model_states_name(dp_rank) : model_states_name();
}

std::string optim_states_name(int dp_rank, bool bf16, int mp_rank) {
  return std::string(bf16 ? "bf16_" : "") + "zero_pp_rank_" + std::to_string(dp_rank) +
         "_mp_rank_" + two_digits(mp_rank) + "_optim_states.pt";
}

std::vector<std::string> optim_states_names(int world_size, bool bf16, int mp_rank) {
  std::vector<std::string> names;
  for (int r = 0; r < world_size; ++r) names.push_back(optim_states_name(r, bf16, mp_rank));
  return names;
}

std::string default_tag(int64_t global_steps) {
  return "global_step" + std::to_string(global_steps);
}

bool is_valid_tag(const std::string& tag) {
  if (tag.empty() || tag.size() > 128) return false;
  for (size_t i = 0; i < tag.size(); ++i) {
    if (!tag_char(tag[i], i == 0)) return false;
  }
  return true;
}

void validate_tag(const std::string& tag) {
  ZRT_CHECK_AS(CheckpointError, is_valid_tag(tag), "invalid checkpoint tag '", escaped(tag),
               "': a tag is 1-128 characters of [A-Za-z0-9._-] starting with a letter or digit "
               "(no path separators, '.' or '..')");
}

void validate_file_name(const std::string& name) {
  ZRT_CHECK_AS(CheckpointError, is_valid_tag(name), "invalid checkpoint file name '", escaped(name),
               "'");
}

std::string tag_path(const std::string& save_dir, const std::string& tag) {
  validate_tag(tag);
  return join_path(save_dir, tag);
}

std::optional<std::string> read_latest(const std::string& save_dir, Storage* storage,
                                       const char* file) {
  Storage& s = storage ? *storage : default_storage();
  const std::string path = join_path(save_dir, file);
  if (!s.exists(path)) return std::nullopt;
  std::string text = s.read_file(path, kMaxLatestBytes);
  if (!text.empty() && text.back() == '\n') text.pop_back();
  if (!text.empty() && text.back() == '\r') text.pop_back();
  ZRT_CHECK_AS(CheckpointError, text.find_first_of("\r\n") == std::string::npos, path,
               " has more than one line");
  try {
    validate_tag(text);
  } catch (const CheckpointError& e) {
    throw CheckpointError(str(path, ": ", e.what()));
  }
  return text;
}

std::vector<std::string> glob_global_steps(const std::string& checkpoint_path, Storage* storage) {
  Storage& s = storage ? *storage : default_storage();
  std::vector<std::string> out;
  for (const std::string& name : s.list(checkpoint_path)) {
    if (name.rfind("global_step", 0) == 0) out.push_back(join_path(checkpoint_path, name));
  }
  std::sort(out.begin(), out.end());
  return out;
}

void check_hf_resumable(const std::string& checkpoint_path, Storage* storage) {
  ZRT_CHECK_AS(CheckpointError, !glob_global_steps(checkpoint_path, storage).empty(),
               "Can't find a valid checkpoint at ", checkpoint_path);
}

CheckpointError hf_resume_failed(const std::string& checkpoint_path) {
  return CheckpointError("[deepspeed] failed to resume from checkpoint " + checkpoint_path);
}

bool natural_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const bool da = std::isdigit(static_cast<unsigned char>(a[i]));
    const bool db = std::isdigit(static_cast<unsigned char>(b[j]));
    if (da && db) {
      size_t ie = i, je = j;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      // Compare the numbers without converting (they may be long): strip leading zeros.
      size_t is = i, js = j;
      while (is + 1 < ie && a[is] == '0') ++is;
      while (js + 1 < je && b[js] == '0') ++js;
      if (ie - is != je - js) return ie - is < je - js;
      const int c = a.compare(is, ie - is, b, js, je - js);
      if (c != 0) return c < 0;
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

ZeroFiles list_zero_files(const std::string& dir) {
  PosixStorage storage;
  ZRT_CHECK_AS(CheckpointError, storage.is_dir(dir), "Directory '", dir, "' doesn't exist");
  ZeroFiles files;
  for (const std::string& name : storage.list(dir)) {
    if (ends_with(name, "_optim_states.pt")) files.optim.push_back(name);
    if (ends_with(name, "_model_states.pt")) files.model.push_back(name);
  }
  std::sort(files.optim.begin(), files.optim.end(), natural_less);
  std::sort(files.model.begin(), files.model.end(), natural_less);
  return files;
}

}  // namespace zrt::ckpt
