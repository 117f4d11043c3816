// A bounded reader of the zip container torch.save writes (stored entries, optional zip64).
// Owns the container checks of the loader checklist: entry count cap, central-directory bounds,
// entry names (no "..", no absolute paths), stored sizes and data ranges within the file and not
// overlapping, local headers matching the central directory, optional CRC-32 verification.
// Knows nothing about pickles or tensors (pt_reader.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "checkpoint/io.h"

namespace zrt::ckpt {

struct ZipEntry {
  std::string name;
  uint64_t data_offset = 0;  // of the stored bytes
  uint64_t size = 0;
  uint32_t crc32 = 0;
};

class ZipReader {
 public:
  // Parses the central directory of `source` (which must outlive the reader); throws
  // CheckpointError naming the file and the first problem found.
  ZipReader(const ByteSource& source, size_t max_entries);

  const std::vector<ZipEntry>& entries() const { return entries_; }
  const ZipEntry* find(const std::string& name) const;
  const std::string& file_name() const { return source_.name(); }

  // Reads the entry's bytes into `dst` (entry.size bytes), verifying the CRC when asked.
  void read(const ZipEntry& entry, void* dst, bool verify_crc) const;
  // The same into a string; throws when the entry is larger than `max_bytes`.
  std::string read_string(const ZipEntry& entry, uint64_t max_bytes, bool verify_crc) const;

 private:
  void parse(size_t max_entries);

  const ByteSource& source_;
  std::vector<ZipEntry> entries_;
  std::unordered_map<std::string, size_t> index_;
};

// Throws CheckpointError unless `name` is a safe relative entry name: non-empty, at most 1024
// bytes, '/'-separated components that are neither empty, "." nor "..", no backslash, NUL or
// control characters.
void check_entry_name(const std::string& file, const std::string& name);

}  // namespace zrt::ckpt
