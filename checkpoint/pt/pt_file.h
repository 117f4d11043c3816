// torch.save-compatible .pt files: LibTorch's zip container
// (caffe2::serialize::PyTorchStreamWriter) around our pickle (pickler.h), and the reverse through
// our bounded zip reader (zip_reader.h) and unpickler (unpickler.h). Records: archive/data.pkl,
// archive/data/<key> (64-byte aligned, in Python's sorted key order), archive/version. See
// FORMAT.md.
#pragma once

#include <string>

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

}  // namespace zrt::ckpt
