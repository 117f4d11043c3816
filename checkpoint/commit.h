// The collective save of one checkpoint tag: every rank's files written to temp names, a success
// vote, renames, a completeness marker (manifest.h) and the atomic replacement of `latest`
// (Note [Commit protocol]); plus DeepSpeed's cross-rank tag check (spec §1.9). The engine builds
// the files' contents (ckpt::Value trees); this module owns only how they reach the disk.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "checkpoint/options.h"
#include "checkpoint/storage.h"
#include "checkpoint/value.h"
#include "comm/comm.h"
#include "core/json.h"

namespace zrt::ckpt {

// One file a rank writes into the tag directory.
struct PendingFile {
  std::string name;                        // a plain file name (validate_file_name)
  std::function<void(ByteSink&)> produce;  // writes the bytes

  // A torch.save-compatible .pt file holding `value` (tensors are shared, not copied).
  static PendingFile pt(std::string name, Value value);
};

struct CommitSpec {
  std::string save_dir;
  std::string tag;
  std::vector<PendingFile> files;  // this rank's files; may be empty
  int zero_stage = 0;
  bool save_latest = true;       // DeepSpeed's save_latest
  Json engine = Json::object();  // recorded in the manifest (the marker writer's copy is used)
};

struct CommitResult {
  std::string tag_dir;
  std::vector<FileInfo> files;  // this rank's files, final paths
  Manifest manifest;            // every rank's files (all of them, even with node-local storage)
};

// Note [Commit protocol]
// Every step below ends with a vote: an all-gather of (ok, message) from every rank, so that all
// ranks take the same branch and a failure on one rank is an error naming that rank's file on all.
//  0. tag check (DeepSpeed's SHA-1 MAX/MIN all-reduce; Warn / Fail / Ignore).
//  1. prepare: tag and file names validated; the marker writer (rank 0, or local rank 0 of each
//     node with use_node_local_storage) creates save_dir/tag, fsyncs save_dir and deletes temp
//     files a crashed save left in the tag directory.
//  2. write: each rank writes each file to "<name>.zrt-tmp-<random>" and fsyncs it. A failure
//     anywhere: every rank deletes its temp files; the tag, an older copy of it and `latest` are
//     untouched.
//  3. unmark: the marker writer deletes the tag's old manifest (re-saving a tag), fsyncs the dir.
//  4. rename: each rank renames its temp files over the final names and fsyncs the tag directory.
//     A failure: every rank deletes what it renamed and its temps; the tag has no manifest, i.e.
//     it is incomplete, and `latest` is untouched.
//  5. mark: the marker writer writes zrt_manifest.json (files, sizes, CRC-32s gathered from every
//     rank in step 4's vote) atomically, then `latest` (temp + fsync + rename + directory fsync);
//     the final vote is the closing barrier. A failed manifest removes the tag's files; a failed
//     `latest` leaves a complete tag and the old `latest`.
// So a crash at any moment leaves `latest` naming the previous complete tag or the new complete
// one. Re-saving the very tag `latest` names is the exception: between steps 3 and 5 that tag is
// incomplete (and refused by verify_tag) until the save finishes.

// Collective: every rank must call this, with the same save_dir and tag. Returns on every rank
// once the tag is complete; throws CheckpointError on every rank otherwise (see above).
CommitResult commit_checkpoint(comm::Comm& comm, Storage& storage, const CommitSpec& spec,
                               const CheckpointOptions& options = {});

// Collective: every rank must call this (no collective at all for kIgnore). DeepSpeed's check
// that all ranks save the same tag: SHA-1 of the tag, all-reduced MAX and MIN. A mismatch is a
// warning (kWarn) or a CheckpointError on every rank (kFail). Returns whether the tags agree.
bool check_tag_consistent(comm::Comm& comm, const std::string& tag, TagValidation mode);

}  // namespace zrt::ckpt
