// `zrt-ckpt inspect`: what a checkpoint tag holds, read from the pickles only (no tensor bytes):
// ZeRO stage, world size, dtype, step counters, parameter count, optimizer, the writer's version,
// completeness, and every file with its size and top-level keys. Works on DeepSpeed-written
// checkpoints too (tolerant reading: DeepSpeed's Python objects are shown, never executed).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "core/json.h"
#include "tools/ckpt_files.h"

namespace zrt::tools {

struct FileReport {
  TagFile file;
  std::vector<std::string> keys;  // top-level keys of a .pt file's dict
  std::string error;              // why it could not be read (empty when it could)
};

struct Inspection {
  CheckpointLocation location;
  std::optional<ckpt::Manifest> manifest;
  std::string manifest_status;  // "complete", or why the tag has no usable manifest
  std::string writer;           // "ZeroRT 0.1.0", "ZeroRT", "DeepSpeed" or "unknown"
  std::string ds_version;
  std::optional<int64_t> zero_stage, world_size, mp_world_size;
  std::string dtype;  // "float32", "float16", "bfloat16" or "unknown"
  std::optional<int64_t> global_steps, global_samples, skipped_steps;
  int64_t trainable_params = 0, frozen_params = 0, param_tensors = 0, param_groups = 0;
  std::string optimizer, optimizer_impl, scheduler;  // config types; the engine's class
  std::vector<FileReport> files;
  std::vector<std::string> problems;  // files that could not be read, contradictions
};

// Throws CheckpointError only when the tag folder cannot be listed; unreadable files are problems.
Inspection inspect_checkpoint(const CheckpointLocation& location);
std::string inspection_text(const Inspection& inspection);
Json inspection_json(const Inspection& inspection);

}  // namespace zrt::tools
