#include "checkpoint/pt/zip_reader.h"

#include <algorithm>
#include <cstring>

#include "checkpoint/hash.h"
#include "core/error.h"

namespace zrt::ckpt {
namespace {

constexpr uint32_t kLocalSig = 0x04034b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kEndSig = 0x06054b50;
constexpr uint32_t kEnd64Sig = 0x06064b50;
constexpr uint32_t kEnd64LocatorSig = 0x07064b50;
constexpr size_t kEndSize = 22;
constexpr size_t kEnd64LocatorSize = 20;
constexpr size_t kEnd64Size = 56;
constexpr size_t kCentralSize = 46;
constexpr size_t kLocalSize = 30;
constexpr size_t kMaxComment = 0xFFFF;

uint16_t u16(const char* p) {
  return static_cast<uint16_t>(static_cast<uint8_t>(p[0]) | (static_cast<uint8_t>(p[1]) << 8));
}
uint32_t u32(const char* p) { return u16(p) | (static_cast<uint32_t>(u16(p + 2)) << 16); }
uint64_t u64(const char* p) { return u32(p) | (static_cast<uint64_t>(u32(p + 4)) << 32); }

}  // namespace

void check_entry_name(const std::string& file, const std::string& name) {
  ZRT_CHECK_AS(CheckpointError, !name.empty() && name.size() <= 1024, file, ": zip entry name of ",
               name.size(), " bytes");
  for (char c : name) {
    ZRT_CHECK_AS(CheckpointError, static_cast<unsigned char>(c) >= 0x20 && c != '\\' && c != 0x7F,
                 file, ": zip entry name contains a control character or backslash");
  }
  ZRT_CHECK_AS(CheckpointError, name[0] != '/', file, ": zip entry name '", name,
               "' is an absolute path");
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string::npos) end = name.size();
    const std::string part = name.substr(start, end - start);
    ZRT_CHECK_AS(CheckpointError, !part.empty() && part != "." && part != "..", file,
                 ": zip entry name '", name, "' has an empty, '.' or '..' component");
    start = end + 1;
  }
}

ZipReader::ZipReader(const ByteSource& source, size_t max_entries) : source_(source) {
  parse(max_entries);
}

void ZipReader::parse(size_t max_entries) {
  const std::string& file = source_.name();
  const uint64_t size = source_.size();
  ZRT_CHECK_AS(CheckpointError, size >= kEndSize, file, ": ", size,
               " bytes is too small to be a torch checkpoint (zip) file");

  // The end-of-central-directory record is in the last 22 + 65535 bytes.
  const uint64_t tail_size = std::min<uint64_t>(size, kEndSize + kMaxComment);
  const std::string tail = source_.read_string(size - tail_size, tail_size);
  int64_t end_pos = -1;
  for (int64_t i = static_cast<int64_t>(tail_size - kEndSize); i >= 0; --i) {
    if (u32(&tail[i]) == kEndSig) {
      end_pos = i;
      break;
    }
  }
  ZRT_CHECK_AS(CheckpointError, end_pos >= 0, file,
               ": no zip end-of-central-directory record (not a torch.save file, or truncated)");
  const char* end = &tail[end_pos];
  const uint64_t end_offset = size - tail_size + static_cast<uint64_t>(end_pos);
  // Every field a zip reader checks is checked, as strictly as torch's reader (miniz) does, so
  // that a file we read is one torch.load reads too.
  ZRT_CHECK_AS(CheckpointError, u16(end + 4) == 0 && u16(end + 6) == 0, file,
               ": multi-disk zip archives are not supported");
  ZRT_CHECK_AS(CheckpointError, u16(end + 8) == u16(end + 10), file, ": the end record counts ",
               u16(end + 8), " entries on this disk but ", u16(end + 10), " in all");
  uint64_t count = u16(end + 10);
  uint64_t cd_size = u32(end + 12);
  uint64_t cd_offset = u32(end + 16);
  uint64_t cd_limit = end_offset;  // the central directory ends before this

  const bool saturated = count == 0xFFFF || cd_size == 0xFFFFFFFFu || cd_offset == 0xFFFFFFFFu;
  const bool has_locator =
      end_offset >= kEnd64LocatorSize &&
      u32(source_.read_string(end_offset - kEnd64LocatorSize, 4).data()) == kEnd64LocatorSig;
  ZRT_CHECK_AS(CheckpointError, has_locator || !saturated, file,
               ": zip64 archive without a zip64 locator");
  if (has_locator) {
    // torch.save always writes the zip64 records; when present they are authoritative (as for
    // miniz), and the 32-bit fields that are not saturated must agree with them.
    const std::string loc = source_.read_string(end_offset - kEnd64LocatorSize, kEnd64LocatorSize);
    ZRT_CHECK_AS(CheckpointError, u32(&loc[4]) == 0 && u32(&loc[16]) <= 1, file,
                 ": the zip64 locator describes a multi-disk archive");
    const uint64_t end64_offset = u64(&loc[8]);
    ZRT_CHECK_AS(CheckpointError,
                 end64_offset <= end_offset - kEnd64LocatorSize &&
                     end_offset - kEnd64LocatorSize - end64_offset >= kEnd64Size,
                 file, ": zip64 end record offset ", end64_offset, " is out of range");
    const std::string e64 = source_.read_string(end64_offset, kEnd64Size);
    ZRT_CHECK_AS(CheckpointError, u32(&e64[0]) == kEnd64Sig, file,
                 ": bad zip64 end-of-central-directory signature");
    ZRT_CHECK_AS(CheckpointError,
                 u64(&e64[4]) >= kEnd64Size - 12 &&
                     u64(&e64[4]) <= end_offset - kEnd64LocatorSize - end64_offset - 12,
                 file, ": zip64 end record has a bad size (", u64(&e64[4]), ")");
    ZRT_CHECK_AS(CheckpointError, u32(&e64[16]) == 0 && u32(&e64[20]) == 0, file,
                 ": multi-disk zip archives are not supported");
    ZRT_CHECK_AS(CheckpointError, u64(&e64[24]) == u64(&e64[32]), file,
                 ": the zip64 end record counts ", u64(&e64[24]), " entries on this disk but ",
                 u64(&e64[32]), " in all");
    const uint64_t count64 = u64(&e64[32]), size64 = u64(&e64[40]), offset64 = u64(&e64[48]);
    ZRT_CHECK_AS(CheckpointError,
                 (count == 0xFFFF || count == count64) &&
                     (cd_size == 0xFFFFFFFFu || cd_size == size64) &&
                     (cd_offset == 0xFFFFFFFFu || cd_offset == offset64),
                 file, ": the zip end record and the zip64 end record disagree (entries ", count,
                 " / ", count64, ", directory size ", cd_size, " / ", size64, ", offset ",
                 cd_offset, " / ", offset64, ")");
    ZRT_CHECK_AS(CheckpointError, offset64 + size64 == end64_offset, file,
                 ": the central directory does not end where the zip64 end record starts");
    count = count64;
    cd_size = size64;
    cd_offset = offset64;
    cd_limit = end64_offset;
  } else {
    ZRT_CHECK_AS(CheckpointError, cd_offset + cd_size == end_offset, file,
                 ": the central directory does not end where the end record starts");
  }
  ZRT_CHECK_AS(CheckpointError, count <= max_entries, file, ": zip declares ", count,
               " entries, more than the limit of ", max_entries);
  ZRT_CHECK_AS(CheckpointError, cd_offset <= cd_limit && cd_size <= cd_limit - cd_offset, file,
               ": central directory [", cd_offset, ", +", cd_size, ") lies outside the file");
  ZRT_CHECK_AS(CheckpointError, cd_size >= count * kCentralSize, file, ": central directory of ",
               cd_size, " bytes cannot hold ", count, " entries");

  const std::string cd = source_.read_string(cd_offset, cd_size);
  entries_.reserve(count);
  size_t pos = 0;
  for (uint64_t i = 0; i < count; ++i) {
    ZRT_CHECK_AS(CheckpointError, cd.size() - pos >= kCentralSize && u32(&cd[pos]) == kCentralSig,
                 file, ": bad central directory entry ", i);
    const char* h = &cd[pos];
    const uint16_t flags = u16(h + 8);
    const uint16_t method = u16(h + 10);
    const uint32_t crc = u32(h + 16);
    uint64_t comp = u32(h + 20);
    uint64_t uncomp = u32(h + 24);
    const size_t name_len = u16(h + 28), extra_len = u16(h + 30), comment_len = u16(h + 32);
    uint64_t local = u32(h + 42);
    ZRT_CHECK_AS(CheckpointError,
                 cd.size() - pos - kCentralSize >= name_len + extra_len + comment_len, file,
                 ": central directory entry ", i, " overruns the directory");
    ZipEntry e;
    e.name.assign(h + kCentralSize, name_len);
    check_entry_name(file, e.name);
    ZRT_CHECK_AS(CheckpointError, u16(h + 34) == 0, file, ": entry '", e.name,
                 "' starts on disk ", u16(h + 34), " (multi-disk archives are not supported)");
    ZRT_CHECK_AS(CheckpointError, (u32(h + 38) & 0x10) == 0, file, ": entry '", e.name,
                 "' is marked as a directory");
    // zip64 extended information: the 64-bit values present are those whose 32-bit field is ~0.
    const char* extra = h + kCentralSize + name_len;
    for (size_t x = 0; x + 4 <= extra_len;) {
      const uint16_t id = u16(extra + x), len = u16(extra + x + 2);
      ZRT_CHECK_AS(CheckpointError, x + 4 + len <= extra_len, file, ": entry '", e.name,
                   "' has a malformed extra field");
      if (id == 0x0001) {
        size_t f = x + 4;
        auto take = [&](uint64_t& field) {
          ZRT_CHECK_AS(CheckpointError, f + 8 <= x + 4 + len, file, ": entry '", e.name,
                       "' has a short zip64 field");
          field = u64(extra + f);
          f += 8;
        };
        if (uncomp == 0xFFFFFFFFu) take(uncomp);
        if (comp == 0xFFFFFFFFu) take(comp);
        if (local == 0xFFFFFFFFu) take(local);
      }
      x += 4 + len;
    }
    ZRT_CHECK_AS(CheckpointError, method == 0, file, ": entry '", e.name,
                 "' is compressed (method ", method, "); torch checkpoints store entries");
    ZRT_CHECK_AS(CheckpointError, (flags & 1) == 0, file, ": entry '", e.name, "' is encrypted");
    ZRT_CHECK_AS(CheckpointError, comp == uncomp, file, ": entry '", e.name,
                 "' is stored with compressed size ", comp, " != size ", uncomp);
    e.size = uncomp;
    e.crc32 = crc;

    // The local header repeats the name; the data follow it and must lie before the directory.
    ZRT_CHECK_AS(CheckpointError, local <= cd_offset && cd_offset - local >= kLocalSize, file,
                 ": entry '", e.name, "' has local header offset ", local, " out of range");
    const std::string lh = source_.read_string(local, kLocalSize);
    ZRT_CHECK_AS(CheckpointError, u32(&lh[0]) == kLocalSig, file, ": entry '", e.name,
                 "' has a bad local header signature");
    const uint64_t data = local + kLocalSize + u16(&lh[26]) + u16(&lh[28]);
    ZRT_CHECK_AS(
        CheckpointError,
        u16(&lh[26]) == name_len && source_.read_string(local + kLocalSize, name_len) == e.name,
        file, ": entry '", e.name, "' local header names a different entry");
    ZRT_CHECK_AS(CheckpointError, data <= cd_offset && e.size <= cd_offset - data, file,
                 ": entry '", e.name, "' data [", data, ", +", e.size,
                 ") runs past the central directory at ", cd_offset, " (truncated or lying sizes)");
    e.data_offset = data;
    ZRT_CHECK_AS(CheckpointError, index_.emplace(e.name, entries_.size()).second, file,
                 ": duplicate zip entry '", e.name, "'");
    entries_.push_back(std::move(e));
    pos += kCentralSize + name_len + extra_len + comment_len;
  }
  ZRT_CHECK_AS(CheckpointError, pos == cd.size(), file, ": the central directory has ",
               cd.size() - pos, " bytes after its ", count, " entries");

  // Data ranges must not overlap: together they then never exceed the file size, which bounds
  // what a reader allocates.
  std::vector<const ZipEntry*> sorted;
  sorted.reserve(entries_.size());
  for (const auto& e : entries_) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(),
            [](const ZipEntry* a, const ZipEntry* b) { return a->data_offset < b->data_offset; });
  for (size_t i = 1; i < sorted.size(); ++i) {
    ZRT_CHECK_AS(CheckpointError,
                 sorted[i - 1]->data_offset + sorted[i - 1]->size <= sorted[i]->data_offset, file,
                 ": zip entries '", sorted[i - 1]->name, "' and '", sorted[i]->name, "' overlap");
  }
}

const ZipEntry* ZipReader::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

void ZipReader::read(const ZipEntry& entry, void* dst, bool verify_crc) const {
  // One read for the whole record (the device sees one large sequential request), then the
  // checksum over memory.
  if (entry.size > 0) source_.read_at(entry.data_offset, dst, entry.size);
  if (!verify_crc) return;
  const uint32_t crc = crc32(dst, entry.size);
  ZRT_CHECK_AS(CheckpointError, crc == entry.crc32, source_.name(), ": entry '", entry.name,
               "' fails its CRC-32 check (stored ", crc32_hex(entry.crc32), ", computed ",
               crc32_hex(crc), "): the file is corrupt");
}

std::string ZipReader::read_string(const ZipEntry& entry, uint64_t max_bytes,
                                   bool verify_crc) const {
  ZRT_CHECK_AS(CheckpointError, entry.size <= max_bytes, source_.name(), ": entry '", entry.name,
               "' has ", entry.size, " bytes, more than the limit of ", max_bytes);
  std::string s(entry.size, '\0');
  read(entry, s.empty() ? nullptr : &s[0], verify_crc);
  return s;
}

}  // namespace zrt::ckpt
