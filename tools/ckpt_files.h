// zrt-ckpt's view of a checkpoint directory: which save_dir and tag a user's DIR means (a save_dir
// with `latest`, an HF checkpoint-N folder, or the tag folder itself), what each file of the tag
// is (model states, optimizer partition of rank r, RNG state, manifest), and a cheap read of a .pt
// file's pickle without its tensor bytes (shapes and dtypes only) for `inspect`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/pt/unpickler.h"
#include "checkpoint/value.h"

namespace zrt::tools {

struct CheckpointLocation {
  std::string save_dir;  // holds the tag folder (and `latest`)
  std::string tag;
  std::string tag_dir;  // save_dir/tag
  std::string how;      // "--tag", "latest" or "DIR is the tag folder"
};

// Resolves DIR (and --tag) to a tag folder. Throws CheckpointError when DIR or the tag folder does
// not exist, `latest` is unsafe or names a missing tag, or neither `latest` nor --tag says which
// tag to use (the message lists the tags found).
CheckpointLocation locate_checkpoint(const std::string& dir, const std::optional<std::string>& tag);

enum class FileKind {
  kModelStates,       // mp_rank_00_model_states.pt (stages 0-2)
  kZero3ModelStates,  // zero_pp_rank_{r}_mp_rank_00_model_states.pt (stage 3)
  kOptimStates,       // [bf16_]zero_pp_rank_{r}_mp_rank_00_optim_states.pt
  kRngState,          // zrt_rng_state_{r}.pt (ZeroRT)
  kManifest,          // zrt_manifest.json (ZeroRT)
  kTemp,              // left over by an unfinished save (*.zrt-tmp-*)
  kOther,
};
const char* file_kind_name(FileKind kind);

struct TagFile {
  std::string name;
  std::string path;
  uint64_t size = 0;
  bool regular = true;  // false for directories, FIFOs, devices, sockets
  FileKind kind = FileKind::kOther;
  int rank = -1;  // for per-rank files
  bool bf16 = false;
};

// Every entry of the tag folder (sorted naturally, so rank 2 comes before rank 10), classified.
std::vector<TagFile> list_tag_files(const std::string& tag_dir);

// The files of one kind, in rank order.
std::vector<const TagFile*> files_of(const std::vector<TagFile>& files, FileKind kind);

// Reads a .pt file's pickle (zip structure and data.pkl checked as load_pt does) but not the tensor
// bytes: tensors come back as meta tensors with the saved dtype and shape. Throws CheckpointError.
ckpt::Value read_pt_metadata(const std::string& path, ckpt::ReadMode mode);

// Human-readable byte count: "1.5 MiB".
std::string format_bytes(uint64_t bytes);

}  // namespace zrt::tools
