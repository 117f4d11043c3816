// pickle bytes -> Value: a bounded, allowlist-only unpickler for the files torch.save writes.
// It never imports or calls anything: allowed GLOBALs are recognised by name and rebuilt natively
// (Note [Unpickler allowlist] in unpickler.cpp). Every length is checked against the remaining
// bytes before use, and nodes, stack, memo, nesting and expanded size are capped.
// Tensor bytes come from the caller through StorageLoader (pt_reader.cpp reads zip records).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "checkpoint/value.h"

namespace zrt::ckpt {

enum class ReadMode {
  // Any GLOBAL outside the allowlist is a CheckpointError naming it.
  kStrict,
  // Unknown globals and the objects built from them become Value::object placeholders (never
  // executed), so that e.g. the `module` of a DeepSpeed-written file can be read although the
  // file also pickles a LossScaler. Malformed pickles are still errors.
  kTolerant,
};

struct ReadOptions {
  ReadMode mode = ReadMode::kStrict;
  // Verify the CRC-32 of every zip record (the pickle's is always verified).
  bool verify_crc = true;
  // Keep only these top-level dict keys (empty: everything); storages reachable only from the
  // other keys are not read at all.
  std::vector<std::string> only_keys;
  // Read no tensor data: every tensor is on the meta device, with its dtype, shape and strides
  // (an index of the file; record sizes are still checked against the pickle).
  bool meta_tensors = false;
  // A file's storages of at least this many bytes (0: none) are not read but mapped: the tensor
  // is a private mapping of the record (aio/file_map.h), whose pages the kernel may reclaim, for
  // a loader that goes through it once (e.g. into swap files). Writes to it never reach the file.
  // verify_crc streams the record once through its CRC-32.
  uint64_t map_storages_from = 0;
  // Resource caps (each violation is a CheckpointError).
  uint64_t max_pickle_bytes = uint64_t{256} << 20;
  size_t max_zip_entries = size_t{1} << 20;
  size_t max_nodes = size_t{4} << 20;    // objects created while parsing
  size_t max_stack = size_t{1} << 20;    // stack entries, all mark levels together
  size_t max_marks = 4096;               // nested MARKs
  size_t max_values = size_t{16} << 20;  // Values after expanding shared references
  int max_depth = 512;                   // container nesting of the result
};

// Fetches the bytes of storage `key`: returns a contiguous 1-D CPU tensor of `numel` elements of
// `dtype`. Called once per storage that a kept tensor uses, after the whole pickle was parsed.
using StorageLoader =
    std::function<at::Tensor(const std::string& key, at::ScalarType dtype, int64_t numel)>;

// Parses `pickle` (a data.pkl). `context` names the file in errors ("x.pt: data.pkl offset 17:
// ..."). Throws CheckpointError for anything malformed, unsupported or over a limit.
Value unpickle(const std::string& pickle, const StorageLoader& loader, const ReadOptions& options,
               const std::string& context);

}  // namespace zrt::ckpt
