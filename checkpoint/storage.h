// The storage seam of checkpoint writing: primitive file-system operations (virtual, so tests can
// inject failures) and, built on them, the atomic file write every checkpoint file goes through:
// temp name in the same directory -> bytes -> fsync -> rename over the target -> directory fsync.
// Owns PosixStorage and FaultInjectingStorage. The multi-rank commit protocol is commit.h's.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "checkpoint/io.h"

namespace zrt::ckpt {

// A file being written. write() may be called many times; sync() makes the bytes durable.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual void write(const void* data, size_t size) = 0;
  virtual void sync() = 0;
  virtual void close() = 0;
};

// What write_file_atomic wrote: the final path, its size and the CRC-32 of its bytes.
struct FileInfo {
  std::string path;
  uint64_t size = 0;
  uint32_t crc32 = 0;
};

class Storage {
 public:
  virtual ~Storage() = default;

  // Primitives; each throws CheckpointError naming the path and the system error.
  // create() makes a new file (failing if it exists) opened for writing.
  virtual std::unique_ptr<WritableFile> create(const std::string& path) = 0;
  virtual void rename(const std::string& from, const std::string& to) = 0;
  virtual void sync_dir(const std::string& dir) = 0;
  virtual void make_dirs(const std::string& dir) = 0;
  // Removes a file; false when it did not exist.
  virtual bool remove(const std::string& path) = 0;
  // Names in `dir` (not "." / ".."), sorted; empty when `dir` does not exist.
  virtual std::vector<std::string> list(const std::string& dir) = 0;
  virtual bool exists(const std::string& path) = 0;
  virtual bool is_dir(const std::string& path) = 0;
  // Opens a regular file for bounded reading.
  virtual std::unique_ptr<ByteSource> open(const std::string& path) = 0;

  // Writes `path` atomically from what `produce` writes into the sink: the bytes go to a temp
  // file next to `path` (temp_name), which is fsynced, closed and renamed over `path`; then the
  // directory is fsynced when `sync_parent` is set. Writes reach the file in large blocks
  // (small writes are buffered, large ones pass through). On any failure the temp file is
  // removed and CheckpointError names `path`; `path` itself is then untouched.
  FileInfo write_file_atomic(const std::string& path, const std::function<void(ByteSink&)>& produce,
                             bool sync_parent = true);
  FileInfo write_file_atomic(const std::string& path, const std::string& bytes,
                             bool sync_parent = true);
  // The first half of write_file_atomic: the bytes end up fsynced and closed in `*temp_path`
  // (= temp_name(path)), not yet renamed; the returned info already names `path`. On failure the
  // temp file is removed. The commit protocol renames later, after every rank succeeded.
  FileInfo write_temp(const std::string& path, const std::function<void(ByteSink&)>& produce,
                      std::string* temp_path);
  // The whole file as a string; CheckpointError when larger than `max_bytes`.
  std::string read_file(const std::string& path, uint64_t max_bytes);
};

// The temp name used for `path`: "<path>.zrt-tmp-<16 hex digits>", unique per call.
std::string temp_name(const std::string& path);
// True for names made by temp_name (leftovers of a crash; safe to delete before a save).
bool is_temp_name(const std::string& name);
// Deletes the files named like temp_name() (never anything else) in `dir` and, `depth` levels
// down, in its subdirectories: what saves killed before their rename left behind. Returns how
// many it deleted. Only for a directory no save is writing into at the same time.
size_t remove_leftover_temps(Storage& storage, const std::string& dir, int depth);
// "dir/name" without doubling the separator; parent_dir("a/b/c") == "a/b", of "c" is ".".
std::string join_path(const std::string& dir, const std::string& name);
std::string parent_dir(const std::string& path);

// The local file system (POSIX calls; EINTR and partial writes handled).
class PosixStorage : public Storage {
 public:
  std::unique_ptr<WritableFile> create(const std::string& path) override;
  void rename(const std::string& from, const std::string& to) override;
  void sync_dir(const std::string& dir) override;
  void make_dirs(const std::string& dir) override;
  bool remove(const std::string& path) override;
  std::vector<std::string> list(const std::string& dir) override;
  bool exists(const std::string& path) override;
  bool is_dir(const std::string& path) override;
  std::unique_ptr<ByteSource> open(const std::string& path) override;
};

// Wraps another Storage and fails the k-th call (1-based, counted per operation kind over the
// lifetime of this object) of the chosen operations with CheckpointError("injected fault: ...").
// Thread-safe. Counting without failing (k = 0) tells a test how many calls a save makes.
class FaultInjectingStorage : public Storage {
 public:
  enum class Op { kCreate, kWrite, kSync, kRename, kSyncDir };
  static constexpr int kNumOps = 5;
  static const char* op_name(Op op);

  explicit FaultInjectingStorage(std::shared_ptr<Storage> inner) : inner_(std::move(inner)) {}

  // Fail the k-th call of `op` (k >= 1); k = 0 disarms.
  void fail_at(Op op, int64_t k);
  int64_t count(Op op) const { return counts_[static_cast<int>(op)].load(); }
  // True once an armed fault fired.
  bool fired() const { return fired_.load(); }

  std::unique_ptr<WritableFile> create(const std::string& path) override;
  void rename(const std::string& from, const std::string& to) override;
  void sync_dir(const std::string& dir) override;
  void make_dirs(const std::string& dir) override { inner_->make_dirs(dir); }
  bool remove(const std::string& path) override { return inner_->remove(path); }
  std::vector<std::string> list(const std::string& dir) override { return inner_->list(dir); }
  bool exists(const std::string& path) override { return inner_->exists(path); }
  bool is_dir(const std::string& path) override { return inner_->is_dir(path); }
  std::unique_ptr<ByteSource> open(const std::string& path) override { return inner_->open(path); }

  // Counts a call of `op` and throws if it is the armed one (used by the wrapped files too).
  void tick(Op op, const std::string& path);

 private:
  std::shared_ptr<Storage> inner_;
  std::atomic<int64_t> counts_[kNumOps] = {};
  std::atomic<int64_t> fail_at_[kNumOps] = {};
  std::atomic<bool> fired_{false};
};

}  // namespace zrt::ckpt
