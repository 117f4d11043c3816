// zrt-ckpt: locating the tag folder, classifying its files, metadata-only .pt reads.
#include "tools/ckpt_files.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include <ATen/ATen.h>

#include "checkpoint/io.h"
#include "checkpoint/layout.h"
#include "checkpoint/manifest.h"
#include "checkpoint/pt/pt_file.h"
#include "checkpoint/storage.h"
#include "checkpoint/tensor_types.h"
#include "core/error.h"
#include "core/strings.h"
#include "runtime/model_states.h"
#include <sys/stat.h>

namespace zrt::tools {
namespace {

namespace fs = std::filesystem;

// The decimal number at the start of `s` (nullopt when there is none or it is absurdly long).
std::optional<int> leading_int(const std::string& s) {
  size_t n = 0;
  while (n < s.size() && n < 9 && std::isdigit(static_cast<unsigned char>(s[n]))) ++n;
  if (n == 0) return std::nullopt;
  return std::stoi(s.substr(0, n));
}

// True when `dir` holds files that only a tag folder holds.
bool looks_like_tag_dir(ckpt::PosixStorage& storage, const std::string& dir) {
  for (const std::string& name : storage.list(dir)) {
    if (ends_with(name, "_model_states.pt") || ends_with(name, "_optim_states.pt") ||
        name == ckpt::kManifestFile) {
      return true;
    }
  }
  return false;
}

std::string strip_trailing_slashes(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

}  // namespace

CheckpointLocation locate_checkpoint(const std::string& dir_arg,
                                     const std::optional<std::string>& tag) {
  ckpt::PosixStorage storage;
  const std::string dir = strip_trailing_slashes(dir_arg);
  ZRT_CHECK_AS(CheckpointError, storage.is_dir(dir), dir, ": no such checkpoint directory");
  CheckpointLocation loc;
  loc.save_dir = dir;
  if (tag) {
    loc.tag = *tag;
    loc.how = "--tag";
  } else if (std::optional<std::string> latest = ckpt::read_latest(dir)) {
    loc.tag = *latest;
    loc.how = "latest";
  } else if (looks_like_tag_dir(storage, dir)) {
    const fs::path p = fs::absolute(fs::path(dir)).lexically_normal();
    loc.tag = p.filename().string();
    loc.save_dir = p.parent_path().string();
    loc.how = "DIR is the tag folder";
  } else {
    std::string found;
    for (const std::string& name : storage.list(dir)) {
      const std::string sub = ckpt::join_path(dir, name);
      if (ckpt::is_valid_tag(name) && storage.is_dir(sub) && looks_like_tag_dir(storage, sub)) {
        found += (found.empty() ? "" : ", ") + name;
      }
    }
    throw CheckpointError(str(dir, " has no 'latest' file and is not a tag folder; pass --tag",
                              found.empty() ? std::string(" (it holds no checkpoint tags)")
                                            : " (tags found: " + found + ")"));
  }
  loc.tag_dir = ckpt::tag_path(loc.save_dir, loc.tag);  // validates the tag
  ZRT_CHECK_AS(CheckpointError, storage.is_dir(loc.tag_dir), "checkpoint tag '", loc.tag, "' (",
               loc.how, ") not found: ", loc.tag_dir, " is not a directory");
  return loc;
}

const char* file_kind_name(FileKind kind) {
  switch (kind) {
    case FileKind::kModelStates:
      return "model states";
    case FileKind::kZero3ModelStates:
      return "model states (ZeRO-3 partition)";
    case FileKind::kOptimStates:
      return "optimizer partition";
    case FileKind::kRngState:
      return "RNG state";
    case FileKind::kManifest:
      return "manifest";
    case FileKind::kTemp:
      return "temp file of an unfinished save";
    case FileKind::kOther:
      return "other";
  }
  return "?";
}

std::vector<TagFile> list_tag_files(const std::string& tag_dir) {
  ckpt::PosixStorage storage;
  std::vector<std::string> names = storage.list(tag_dir);
  std::sort(names.begin(), names.end(), ckpt::natural_less);
  std::vector<TagFile> files;
  for (const std::string& name : names) {
    TagFile f;
    f.name = name;
    f.path = ckpt::join_path(tag_dir, name);
    struct stat st {};
    if (::lstat(f.path.c_str(), &st) == 0) {
      f.regular = S_ISREG(st.st_mode);
      f.size = f.regular ? static_cast<uint64_t>(st.st_size) : 0;
    } else {
      f.regular = false;
    }
    std::string rest = name;
    if (starts_with(rest, "bf16_")) {
      f.bf16 = true;
      rest = rest.substr(5);
    }
    if (ckpt::is_temp_name(name)) {
      f.kind = FileKind::kTemp;
    } else if (name == ckpt::kManifestFile) {
      f.kind = FileKind::kManifest;
    } else if (!f.bf16 && name == ckpt::model_states_name()) {
      f.kind = FileKind::kModelStates;
    } else if (starts_with(rest, "zero_pp_rank_") &&
               (ends_with(rest, "_mp_rank_00_optim_states.pt") ||
                ends_with(rest, "_mp_rank_00_model_states.pt"))) {
      const std::optional<int> r = leading_int(rest.substr(13));
      const bool optim = ends_with(rest, "_optim_states.pt");
      if (r && name == (optim ? ckpt::optim_states_name(*r, f.bf16)
                              : (f.bf16 ? "" : ckpt::zero3_model_states_name(*r)))) {
        f.kind = optim ? FileKind::kOptimStates : FileKind::kZero3ModelStates;
        f.rank = *r;
      }
    } else if (!f.bf16 && starts_with(name, "zrt_rng_state_") && ends_with(name, ".pt")) {
      const std::optional<int> r = leading_int(name.substr(14));
      if (r && name == ckpt::rng_state_name(*r)) {
        f.kind = FileKind::kRngState;
        f.rank = *r;
      }
    }
    // "bf16_" only prefixes optimizer partitions.
    if (f.bf16 && f.kind != FileKind::kOptimStates && f.kind != FileKind::kTemp) {
      f.kind = FileKind::kOther;
    }
    files.push_back(std::move(f));
  }
  return files;
}

std::vector<const TagFile*> files_of(const std::vector<TagFile>& files, FileKind kind) {
  std::vector<const TagFile*> out;
  for (const TagFile& f : files) {
    if (f.kind == kind) out.push_back(&f);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const TagFile* a, const TagFile* b) { return a->rank < b->rank; });
  return out;
}

ckpt::Value read_pt_metadata(const std::string& path, ckpt::ReadMode mode) {
  ckpt::ReadOptions options;
  options.mode = mode;
  options.meta_tensors = true;  // shapes and dtypes; no tensor bytes are read
  return ckpt::load_pt(path, options);
}

std::string format_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0) {
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f %s", v, units[u]);
  }
  return buf;
}

}  // namespace zrt::tools
