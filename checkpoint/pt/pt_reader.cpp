#include <ATen/ATen.h>

#include "checkpoint/pt/pt_file.h"
#include "checkpoint/tensor_types.h"
#include "checkpoint/pt/zip_reader.h"
#include "core/error.h"

namespace zrt::ckpt {

Value read_pt(const ByteSource& source, const ReadOptions& options) {
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
    if (options.meta_tensors) return at::empty({numel}, at::TensorOptions().dtype(dtype).device(at::kMeta));
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

Value load_pt(const std::string& path, const ReadOptions& options) {
  FileSource source(path);
  return read_pt(source, options);
}

Value read_pt_bytes(std::string bytes, std::string name, const ReadOptions& options) {
  MemorySource source(std::move(bytes), std::move(name));
  return read_pt(source, options);
}

}  // namespace zrt::ckpt
