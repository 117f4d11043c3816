// The completeness marker of a tag: save_dir/<tag>/zrt_manifest.json, written last by the commit
// protocol (commit.h). It lists every file of the tag with its size and CRC-32, the world size,
// ZeRO stage, ZeroRT version and engine metadata. A tag without it is incomplete. Owns the
// manifest's JSON form and the checks of verify_tag; DeepSpeed itself writes no manifest.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/storage.h"
#include "core/json.h"

namespace zrt::ckpt {

constexpr const char* kManifestFile = "zrt_manifest.json";
constexpr int kManifestVersion = 1;
constexpr uint64_t kMaxManifestBytes = uint64_t{16} << 20;

struct ManifestEntry {
  std::string name;  // inside the tag directory
  uint64_t size = 0;
  uint32_t crc32 = 0;
  int rank = 0;  // the rank that wrote it
};

struct Manifest {
  std::string tag;
  int world_size = 1;
  int zero_stage = 0;
  std::string zrt_version;
  int64_t created_unix_ms = 0;
  std::vector<ManifestEntry> files;
  Json engine = Json::object();  // whatever the engine recorded (steps, dtype, ...)
  // True for a DeepSpeed-written tag: implied by its files (deepspeed_tag_manifest), so there are
  // no checksums to compare and the sizes are those found on disk.
  bool derived = false;

  const ManifestEntry* find(const std::string& name) const;
  Json to_json() const;
  // Throws CheckpointError("<context>: ...") for a malformed manifest.
  static Manifest from_json(const Json& json, const std::string& context);
};

enum class VerifyLevel {
  kSizes,      // the manifest, and every file present with its recorded size
  kChecksums,  // and every file's CRC-32 (reads every byte)
};

// Reads save_dir/<tag>/zrt_manifest.json. Throws CheckpointError when the tag directory does not
// exist, when the manifest is missing ("incomplete") or malformed, or names another tag.
Manifest read_manifest(const std::string& save_dir, const std::string& tag,
                       Storage* storage = nullptr);
// Every problem found with the tag (empty when it is complete and intact).
std::vector<std::string> check_tag(const std::string& save_dir, const std::string& tag,
                                   VerifyLevel level = VerifyLevel::kChecksums,
                                   Storage* storage = nullptr);
// check_tag, throwing one CheckpointError listing the problems; returns the manifest.
Manifest verify_tag(const std::string& save_dir, const std::string& tag,
                    VerifyLevel level = VerifyLevel::kChecksums, Storage* storage = nullptr);
// A tag DeepSpeed wrote: no manifest, none of ZeroRT's own files (RNG states, temp files), and
// DeepSpeed's model-states file(s). The manifest its files imply: every regular file with its
// size (rank from the per-rank names), the world size from the per-rank files (stage 0: the
// model states' dp_world_size), stage 3 when the model states are per rank, else the stage its
// ds_config records (1 or 2; 0 without optimizer files). nullopt for anything else, e.g. a
// ZeroRT save that did not finish.
std::optional<Manifest> deepspeed_tag_manifest(const std::string& save_dir, const std::string& tag,
                                               Storage* storage = nullptr);
// What a loader relies on: the verified manifest of a ZeroRT tag (verify_tag at `level`), or the
// implied manifest of a DeepSpeed-written tag. Throws verify_tag's CheckpointError otherwise.
Manifest open_tag(const std::string& save_dir, const std::string& tag,
                  VerifyLevel level = VerifyLevel::kSizes, Storage* storage = nullptr);

// Tags in save_dir that have a readable manifest, oldest save first (for falling back to the
// newest complete tag when `latest` names a broken one).
std::vector<std::string> complete_tags(const std::string& save_dir, Storage* storage = nullptr);

// CRC-32 of a whole file, read in blocks.
uint32_t file_crc32(const ByteSource& source);

}  // namespace zrt::ckpt
