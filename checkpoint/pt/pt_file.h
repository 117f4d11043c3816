// torch.save-compatible .pt files: LibTorch's zip container
// (caffe2::serialize::PyTorchStreamWriter) around our pickle (pickler.h), and the reverse through
// our bounded zip reader (zip_reader.h) and unpickler (unpickler.h). Records: archive/data.pkl,
// archive/data/<key> (64-byte aligned, in Python's sorted key order), archive/version. See
// FORMAT.md.
#pragma once

#include <mutex>
#include <string>
#include <unordered_map>

#include <ATen/ATen.h>

#include "checkpoint/io.h"
#include "checkpoint/storage.h"
#include "checkpoint/pt/unpickler.h"
#include "checkpoint/value.h"

namespace zrt::ckpt {

// Serializes `value` into `sink` (one large write per storage). Throws CheckpointError for values
// that cannot be written (see pickle_value) and for sink failures.
void write_pt(const Value& value, ByteSink& sink);
std::string pt_bytes(const Value& value);
// Writes `path` atomically through `storage` (PosixStorage when omitted); returns size and CRC.
FileInfo save_pt(const Value& value, const std::string& path, Storage* storage = nullptr);

// Reads a torch.save archive. Throws CheckpointError naming the file and what is wrong.
Value read_pt(const ByteSource& source, const ReadOptions& options = {});
Value load_pt(const std::string& path, const ReadOptions& options = {});
Value read_pt_bytes(std::string bytes, std::string name, const ReadOptions& options = {});

// A torch.save file opened for ranged reads: value() is the file's value with every tensor on the
// meta device (dtype, shape, strides; no data read), and read() fetches a tensor's elements from
// the file on demand, so that a reader takes only the parts it needs (one rank's partition of a
// whole parameter, one parameter's share of a rank's flat group). The zip and pickle structure is
// checked as read_pt checks it; with options.verify_crc (the default) the first read of a storage
// record streams the whole record once through its CRC-32 (a record no range is read from is
// never checked).
class PtIndex {
 public:
  explicit PtIndex(const std::string& path, ReadOptions options = {});
  const Value& value() const { return value_; }
  const std::string& path() const { return source_.name(); }
  // Elements [start, start + count) of `meta` (a contiguous tensor of value(), any shape, in its
  // flattened order) as a new 1-D CPU tensor. Throws CheckpointError for a tensor of another file,
  // a range outside it, or a record that fails its CRC-32.
  at::Tensor read(const at::Tensor& meta, int64_t start, int64_t count) const;
  // The whole tensor, its shape and dtype.
  at::Tensor read(const at::Tensor& meta) const;

 private:
  struct Record {
    std::string name;
    uint64_t offset = 0;  // of the stored bytes
    uint64_t size = 0;
    uint32_t crc32 = 0;
    mutable bool verified = false;
  };
  void verify(const Record& record) const;

  FileSource source_;
  Value value_;
  bool verify_crc_ = true;
  std::unordered_map<const c10::StorageImpl*, Record> records_;  // storage -> its record
  mutable std::mutex verified_mutex_;
};

}  // namespace zrt::ckpt
