#include <algorithm>
#include <functional>
#include <vector>

#include <ATen/ATen.h>

#include "aio/file_map.h"
#include "checkpoint/hash.h"
#include "checkpoint/pt/pt_file.h"
#include "checkpoint/pt/zip_reader.h"
#include "checkpoint/tensor_types.h"
#include "core/error.h"

namespace zrt::ckpt {

namespace {

// ReadOptions::map_storages_from: the record as a tensor over a private mapping of the file.
at::Tensor mapped_record(const std::string& file, const ZipEntry& e, at::ScalarType dtype,
                         int64_t numel, bool verify_crc) {
  std::shared_ptr<aio::FileMap> map = aio::FileMap::of_path(
      file, static_cast<int64_t>(e.data_offset), static_cast<int64_t>(e.size));
  if (verify_crc) {
    const uint32_t crc = crc32(map->data(), e.size);
    ZRT_CHECK_AS(CheckpointError, crc == e.crc32, file, ": entry '", e.name,
                 "' fails its CRC-32 check (stored ", crc32_hex(e.crc32), ", computed ",
                 crc32_hex(crc), "): the file is corrupt");
  }
  void* data = map->data();
  return at::from_blob(
      data, {numel}, [map](void*) {}, at::TensorOptions().dtype(dtype));
}

// Reads the archive of `source`; `located(tensor, entry)` is told which record holds each storage
// (the storage tensor is on the meta device when options.meta_tensors).
Value read_archive(const ByteSource& source, const ReadOptions& options,
                   const std::function<void(const at::Tensor&, const ZipEntry&)>& located) {
  const std::string& file = source.name();
  ZipReader zip(source, options.max_zip_entries);

  // Every record sits in one top-level folder (the archive name: "archive" for buffers, the file
  // stem for Python's torch.save to a path).
  std::string prefix;
  for (const ZipEntry& e : zip.entries()) {
    const size_t slash = e.name.find('/');
    ZRT_CHECK_AS(CheckpointError, slash != std::string::npos, file, ": zip entry '", e.name,
                 "' is not inside the archive folder (not a torch.save file)");
    const std::string p = e.name.substr(0, slash + 1);
    if (prefix.empty()) prefix = p;
    ZRT_CHECK_AS(CheckpointError, p == prefix, file, ": zip entries in two folders ('", prefix,
                 "' and '", p, "')");
  }
  const ZipEntry* pkl = zip.find(prefix + "data.pkl");
  ZRT_CHECK_AS(CheckpointError, pkl != nullptr, file,
               ": no data.pkl record (not a torch.save file; TorchScript archives are not read)");
  if (const ZipEntry* version = zip.find(prefix + "version")) {
    const std::string v = zip.read_string(*version, 16, true);
    bool digits = !v.empty();
    for (size_t i = 0; i < v.size(); ++i) {
      digits = digits && (std::isdigit(static_cast<unsigned char>(v[i])) ||
                          (v[i] == '\n' && i + 1 == v.size() && i > 0));
    }
    ZRT_CHECK_AS(CheckpointError, digits, file, ": malformed version record");
  }
  if (const ZipEntry* order = zip.find(prefix + "byteorder")) {
    const std::string b = zip.read_string(*order, 16, true);
    ZRT_CHECK_AS(CheckpointError, b == "little", file, ": byte order '", b,
                 "' is not supported (only little-endian checkpoints are)");
  }
  const std::string pickle = zip.read_string(*pkl, options.max_pickle_bytes, true);
  if (options.verify_crc) {
    // The small records no one reads here (.format_version, .storage_alignment,
    // .data/serialization_id, ...) are checked too: torch.load reads them.
    for (const ZipEntry& e : zip.entries()) {
      if (e.name.rfind(prefix + "data/", 0) == 0 || &e == pkl) continue;
      zip.read_string(e, uint64_t{64} << 20, true);
    }
  }

  StorageLoader loader = [&](const std::string& key, at::ScalarType dtype, int64_t numel) {
    const std::string name = prefix + "data/" + key;
    const ZipEntry* e = zip.find(name);
    ZRT_CHECK_AS(CheckpointError, e != nullptr, file, ": storage record '", name, "' is missing");
    const uint64_t nbytes = static_cast<uint64_t>(numel) * dtype_itemsize(dtype);
    ZRT_CHECK_AS(CheckpointError, e->size == nbytes, file, ": storage record '", name, "' has ",
                 e->size, " bytes but the pickle declares ", numel, " ", c10::toString(dtype),
                 " elements (", nbytes, " bytes)");
    if (options.meta_tensors) {
      at::Tensor meta = at::empty({numel}, at::TensorOptions().dtype(dtype).device(at::kMeta));
      if (located) located(meta, *e);
      return meta;
    }
    if (dynamic_cast<const FileSource*>(&source) != nullptr && options.map_storages_from > 0 &&
        e->size >= options.map_storages_from && dtype != at::kBool) {
      return mapped_record(file, *e, dtype, numel, options.verify_crc);
    }
    at::Tensor t = at::empty({numel}, at::TensorOptions().dtype(dtype));
    zip.read(*e, t.data_ptr(), options.verify_crc);
    if (dtype == at::kBool) {
      const auto* b = static_cast<const uint8_t*>(t.data_ptr());
      for (int64_t i = 0; i < numel; ++i) {
        ZRT_CHECK_AS(CheckpointError, b[i] <= 1, file, ": bool storage '", name,
                     "' holds the byte ", int(b[i]), " at element ", i);
      }
    }
    return t;
  };
  return unpickle(pickle, loader, options, file);
}

}  // namespace

Value read_pt(const ByteSource& source, const ReadOptions& options) {
  return read_archive(source, options, nullptr);
}

PtIndex::PtIndex(const std::string& path, ReadOptions options) : source_(path) {
  options.meta_tensors = true;
  verify_crc_ = options.verify_crc;
  value_ = read_archive(source_, options, [&](const at::Tensor& storage, const ZipEntry& e) {
    records_.emplace(storage.storage().unsafeGetStorageImpl(),
                     Record{e.name, e.data_offset, e.size, e.crc32});
  });
}

void PtIndex::verify(const Record& record) const {
  std::lock_guard<std::mutex> lock(verified_mutex_);
  if (record.verified) return;
  // Streamed in pieces: a record may be larger than what the reader means to hold.
  constexpr uint64_t kChunk = uint64_t{4} << 20;
  std::vector<char> buffer(static_cast<size_t>(std::min(kChunk, record.size)));
  uint32_t crc = 0;
  for (uint64_t done = 0; done < record.size;) {
    const uint64_t n = std::min(kChunk, record.size - done);
    source_.read_at(record.offset + done, buffer.data(), static_cast<size_t>(n));
    crc = crc32_update(crc, buffer.data(), static_cast<size_t>(n));
    done += n;
  }
  ZRT_CHECK_AS(CheckpointError, crc == record.crc32, source_.name(), ": entry '", record.name,
               "' fails its CRC-32 check (stored ", crc32_hex(record.crc32), ", computed ",
               crc32_hex(crc), "): the file is corrupt");
  record.verified = true;
}

at::Tensor PtIndex::read(const at::Tensor& meta, int64_t start, int64_t count) const {
  const auto it = records_.find(meta.storage().unsafeGetStorageImpl());
  ZRT_CHECK_AS(CheckpointError, it != records_.end(), source_.name(),
               ": the tensor is not one of this file's");
  if (verify_crc_) verify(it->second);
  ZRT_CHECK_AS(CheckpointError, meta.is_contiguous(), source_.name(),
               ": a ranged read of a non-contiguous tensor");
  ZRT_CHECK_AS(CheckpointError, start >= 0 && count >= 0 && start + count <= meta.numel(),
               source_.name(), ": elements [", start, ", ", start + count, ") of a tensor of ",
               meta.numel());
  at::Tensor out = at::empty({count}, at::TensorOptions().dtype(meta.scalar_type()));
  const uint64_t item = dtype_itemsize(meta.scalar_type());
  // The storage record's bounds were checked against the pickle when the file was indexed.
  source_.read_at(it->second.offset + static_cast<uint64_t>(meta.storage_offset() + start) * item,
                  out.data_ptr(), static_cast<size_t>(count) * item);
  if (meta.scalar_type() == at::kBool) {
    const auto* b = static_cast<const uint8_t*>(out.data_ptr());
    for (int64_t i = 0; i < count; ++i) {
      ZRT_CHECK_AS(CheckpointError, b[i] <= 1, source_.name(), ": a bool tensor holds the byte ",
                   int(b[i]));
    }
  }
  return out;
}

at::Tensor PtIndex::read(const at::Tensor& meta) const {
  if (meta.is_contiguous()) return read(meta, 0, meta.numel()).view(meta.sizes());
  // A strided view: read the span of its storage it covers, then take the view.
  int64_t span = 1;
  for (int64_t d = 0; d < meta.dim(); ++d) {
    if (meta.size(d) == 0) return at::empty(meta.sizes(), meta.options().device(at::kCPU));
    span += (meta.size(d) - 1) * meta.stride(d);
  }
  const at::Tensor base = meta.as_strided({span}, {1}, meta.storage_offset());
  return read(base, 0, span).as_strided(meta.sizes(), meta.strides(), 0).contiguous();
}

Value load_pt(const std::string& path, const ReadOptions& options) {
  FileSource source(path);
  return read_pt(source, options);
}

Value read_pt_bytes(std::string bytes, std::string name, const ReadOptions& options) {
  MemorySource source(std::move(bytes), std::move(name));
  return read_pt(source, options);
}

}  // namespace zrt::ckpt
