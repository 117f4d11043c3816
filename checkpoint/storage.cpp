#include "checkpoint/storage.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "checkpoint/hash.h"
#include "checkpoint/pipelined_sink.h"
#include "core/error.h"
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace zrt::ckpt {
namespace {

constexpr const char* kTempMarker = ".zrt-tmp-";

std::string sys_error(const char* what, const std::string& path) {
  return str(what, " ", path, ": ", std::strerror(errno));
}

// Note [Early writeback]
// The kernel starts writing dirty pages back only once many are dirty (10% of RAM by default), so
// a file written and then fsynced is first copied into the page cache and then written to the
// device, one after the other. Every 8 MiB we ask for asynchronous writeback of what was just
// written (sync_file_range, Linux), so the device works while we compute the next checksums and
// fsync only waits for the tail. It is a hint: errors surface at fsync.
class PosixFile : public WritableFile {
 public:
  PosixFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~PosixFile() override {
    if (fd_ >= 0) ::close(fd_);
  }
  void write(const void* data, size_t size) override {
    const auto* p = static_cast<const char*>(data);
    while (size > 0) {
      // At most one writeback window per call, so the device starts after the first 8 MiB.
      const ssize_t n = ::write(fd_, p, std::min(size, static_cast<size_t>(kKick)));
      if (n < 0 && errno == EINTR) continue;
      ZRT_CHECK_AS(CheckpointError, n > 0, sys_error("write to", path_));
      p += n;
      size -= static_cast<size_t>(n);
      written_ += static_cast<uint64_t>(n);
#ifdef __linux__
      if (written_ - kicked_ >= kKick) {
        ::sync_file_range(fd_, static_cast<off64_t>(kicked_),
                          static_cast<off64_t>(written_ - kicked_), SYNC_FILE_RANGE_WRITE);
        kicked_ = written_;
      }
#endif
    }
  }
  void sync() override {
    ZRT_CHECK_AS(CheckpointError, ::fsync(fd_) == 0, sys_error("fsync of", path_));
  }
  void close() override {
    if (fd_ < 0) return;
    const int rc = ::close(fd_);
    fd_ = -1;
    ZRT_CHECK_AS(CheckpointError, rc == 0, sys_error("close of", path_));
  }

 private:
  int fd_;
  std::string path_;
  static constexpr uint64_t kKick = uint64_t{8} << 20;
  uint64_t written_ = 0;
  uint64_t kicked_ = 0;
};

class FaultFile : public WritableFile {
 public:
  FaultFile(std::unique_ptr<WritableFile> inner, FaultInjectingStorage& owner, std::string path)
      : inner_(std::move(inner)), owner_(owner), path_(std::move(path)) {}
  void write(const void* data, size_t size) override {
    owner_.tick(FaultInjectingStorage::Op::kWrite, path_);
    inner_->write(data, size);
  }
  void sync() override {
    owner_.tick(FaultInjectingStorage::Op::kSync, path_);
    inner_->sync();
  }
  void close() override { inner_->close(); }

 private:
  std::unique_ptr<WritableFile> inner_;
  FaultInjectingStorage& owner_;
  std::string path_;
};

uint64_t next_nonce() {
  static std::atomic<uint64_t> counter{[] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ (static_cast<uint64_t>(::getpid()) << 16);
  }()};
  // splitmix64 of a per-process counter: unique within the process, spread across processes.
  uint64_t z = (counter += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

// ---- path helpers ----

size_t remove_leftover_temps(Storage& storage, const std::string& dir, int depth) {
  if (!storage.is_dir(dir)) return 0;
  size_t removed = 0;
  for (const std::string& name : storage.list(dir)) {
    const std::string path = join_path(dir, name);
    if (is_temp_name(name)) {
      removed += storage.remove(path) ? 1 : 0;
    } else if (depth > 0 && storage.is_dir(path)) {
      removed += remove_leftover_temps(storage, path, depth - 1);
    }
  }
  return removed;
}

std::string temp_name(const std::string& path) {
  static const char* kHex = "0123456789abcdef";
  std::string suffix(16, '0');
  uint64_t n = next_nonce();
  for (int i = 15; i >= 0; --i, n >>= 4) suffix[i] = kHex[n & 0xF];
  return path + kTempMarker + suffix;
}

bool is_temp_name(const std::string& name) {
  const size_t pos = name.rfind(kTempMarker);
  if (pos == std::string::npos || name.size() - pos != std::strlen(kTempMarker) + 16) return false;
  return std::all_of(name.begin() + static_cast<std::ptrdiff_t>(pos + std::strlen(kTempMarker)),
                     name.end(),
                     [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}

std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

std::string parent_dir(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : p.substr(0, slash);
}

// ---- Storage ----

FileInfo Storage::write_temp(const std::string& path, const std::function<void(ByteSink&)>& produce,
                             std::string* temp_path) {
  const std::string tmp = temp_name(path);
  std::unique_ptr<WritableFile> file;
  FileInfo info;
  info.path = path;
  try {
    file = create(tmp);
    {
      detail::PipelinedFileSink sink(*file);
      produce(sink);
      sink.finish();
      info.size = sink.bytes_written();
      info.crc32 = sink.crc();
    }
    file->sync();
    file->close();
  } catch (const std::exception& e) {
    if (file) {
      try {
        file->close();
      } catch (const std::exception&) {
      }
    }
    try {
      remove(tmp);
    } catch (const std::exception&) {
    }
    if (dynamic_cast<const InternalError*>(&e) != nullptr) throw;
    throw CheckpointError(str("writing ", path, " failed: ", e.what()));
  }
  *temp_path = tmp;
  return info;
}

FileInfo Storage::write_file_atomic(const std::string& path,
                                    const std::function<void(ByteSink&)>& produce,
                                    bool sync_parent) {
  std::string tmp;
  FileInfo info = write_temp(path, produce, &tmp);
  try {
    rename(tmp, path);
  } catch (const std::exception& e) {
    try {
      remove(tmp);
    } catch (const std::exception&) {
    }
    throw CheckpointError(str("writing ", path, " failed: ", e.what()));
  }
  if (sync_parent) {
    try {
      sync_dir(parent_dir(path));
    } catch (const std::exception& e) {
      throw CheckpointError(str("writing ", path, ": the file is in place but ", e.what()));
    }
  }
  return info;
}

FileInfo Storage::write_file_atomic(const std::string& path, const std::string& bytes,
                                    bool sync_parent) {
  return write_file_atomic(
      path, [&](ByteSink& sink) { sink.write(bytes.data(), bytes.size()); }, sync_parent);
}

std::string Storage::read_file(const std::string& path, uint64_t max_bytes) {
  std::unique_ptr<ByteSource> src = open(path);
  ZRT_CHECK_AS(CheckpointError, src->size() <= max_bytes, path, " has ", src->size(),
               " bytes, more than the limit of ", max_bytes);
  return src->read_string(0, src->size());
}

// ---- PosixStorage ----

std::unique_ptr<WritableFile> PosixStorage::create(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  ZRT_CHECK_AS(CheckpointError, fd >= 0, sys_error("cannot create", path));
  return std::make_unique<PosixFile>(fd, path);
}

void PosixStorage::rename(const std::string& from, const std::string& to) {
  ZRT_CHECK_AS(CheckpointError, ::rename(from.c_str(), to.c_str()) == 0,
               sys_error(("rename of " + from + " to").c_str(), to));
}

void PosixStorage::sync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ZRT_CHECK_AS(CheckpointError, fd >= 0, sys_error("cannot open directory", dir));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  errno = err;
  ZRT_CHECK_AS(CheckpointError, rc == 0, sys_error("fsync of directory", dir));
}

void PosixStorage::make_dirs(const std::string& dir) {
  std::string partial;
  size_t pos = 0;
  while (pos <= dir.size()) {
    size_t next = dir.find('/', pos);
    if (next == std::string::npos) next = dir.size();
    partial = dir.substr(0, next);
    pos = next + 1;
    if (partial.empty() || partial == "." || partial == "..") continue;
    if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
      throw CheckpointError(sys_error("cannot create directory", partial));
    }
  }
  ZRT_CHECK_AS(CheckpointError, is_dir(dir), dir, " exists and is not a directory");
}

bool PosixStorage::remove(const std::string& path) {
  if (::unlink(path.c_str()) == 0) return true;
  ZRT_CHECK_AS(CheckpointError, errno == ENOENT, sys_error("cannot remove", path));
  return false;
}

std::vector<std::string> PosixStorage::list(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    ZRT_CHECK_AS(CheckpointError, errno == ENOENT, sys_error("cannot list", dir));
    return names;
  }
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

bool PosixStorage::exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

bool PosixStorage::is_dir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::unique_ptr<ByteSource> PosixStorage::open(const std::string& path) {
  return std::make_unique<FileSource>(path);
}

// ---- FaultInjectingStorage ----

const char* FaultInjectingStorage::op_name(Op op) {
  switch (op) {
    case Op::kCreate:
      return "create";
    case Op::kWrite:
      return "write";
    case Op::kSync:
      return "fsync";
    case Op::kRename:
      return "rename";
    case Op::kSyncDir:
      return "directory fsync";
  }
  return "?";
}

void FaultInjectingStorage::fail_at(Op op, int64_t k) { fail_at_[static_cast<int>(op)] = k; }

void FaultInjectingStorage::tick(Op op, const std::string& path) {
  const int64_t n = ++counts_[static_cast<int>(op)];
  if (fail_at_[static_cast<int>(op)].load() == n) {
    fired_ = true;
    throw CheckpointError(str("injected fault: ", op_name(op), " #", n, " on ", path));
  }
}

std::unique_ptr<WritableFile> FaultInjectingStorage::create(const std::string& path) {
  tick(Op::kCreate, path);
  return std::make_unique<FaultFile>(inner_->create(path), *this, path);
}

void FaultInjectingStorage::rename(const std::string& from, const std::string& to) {
  tick(Op::kRename, to);
  inner_->rename(from, to);
}

void FaultInjectingStorage::sync_dir(const std::string& dir) {
  tick(Op::kSyncDir, dir);
  inner_->sync_dir(dir);
}

}  // namespace zrt::ckpt
