// `zrt-ckpt verify`: every check that can be made on a checkpoint tag without the model. The
// manifest (complete, every file present with its size and CRC-32, nothing unlisted), every .pt
// file readable (strict for ZeroRT files, tolerant for DeepSpeed's), one optimizer partition per
// rank of the world size, stage and world size agreeing across files, tensor shapes matching
// `param_shapes`, every rank's partition of the length DeepSpeed's padding rules give, and the
// zero_to_fp32 consolidation succeeding. Collects every problem instead of stopping at the first.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/ckpt_files.h"

namespace zrt::tools {

struct VerifyOptions {
  // A tag without zrt_manifest.json is a problem (an unfinished save) unless this is set; then it
  // is checked like a DeepSpeed-written checkpoint (tolerant reading, no sizes or CRCs to compare).
  bool allow_no_manifest = false;
};

struct VerifyReport {
  CheckpointLocation location;
  int zero_stage = -1;  // -1: could not be determined
  int64_t world_size = 0;
  size_t files = 0;
  uint64_t bytes = 0;
  int64_t parameters = 0;             // elements consolidated (stages 1-3)
  std::vector<std::string> problems;  // empty: the checkpoint is intact
  std::vector<std::string> notes;     // harmless findings (leftover temp files, NaN weights, ...)
};

VerifyReport verify_checkpoint(const CheckpointLocation& location, const VerifyOptions& options);

}  // namespace zrt::tools
