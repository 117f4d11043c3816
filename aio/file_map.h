// Read-mostly views of file bytes through the page cache: a private mapping of a byte range, for
// writers and loaders that read a large tensor once (a swapped state into a checkpoint, a
// checkpoint's record into swap files) without holding it in anonymous memory. The pages are the
// page cache's, which the kernel reclaims under memory pressure (a memory cgroup counts them as
// reclaimable cache). Writes to the view (MAP_PRIVATE) copy the page and never reach the file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace zrt::aio {

class FileMap {
 public:
  // Bytes [offset, offset + bytes) of the file open as `fd` (any flags; O_DIRECT files too), or of
  // `path`. Throws zrt::Error naming `what` (the file) when the range cannot be mapped.
  static std::shared_ptr<FileMap> of_fd(int fd, int64_t offset, int64_t bytes,
                                        const std::string& what);
  static std::shared_ptr<FileMap> of_path(const std::string& path, int64_t offset, int64_t bytes);
  ~FileMap();
  FileMap(const FileMap&) = delete;
  FileMap& operator=(const FileMap&) = delete;

  void* data() const { return data_; }  // the first byte of the range
  int64_t bytes() const { return bytes_; }

 private:
  FileMap(void* base, size_t length, void* data, int64_t bytes)
      : base_(base), length_(length), data_(data), bytes_(bytes) {}
  void* base_;
  size_t length_;
  void* data_;
  int64_t bytes_;
};

}  // namespace zrt::aio
