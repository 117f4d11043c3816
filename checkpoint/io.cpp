#include "checkpoint/io.h"

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace zrt::ckpt {

void check_range(const std::string& name, uint64_t offset, uint64_t size, uint64_t total,
                 const char* what) {
  ZRT_CHECK_AS(CheckpointError, offset <= total && size <= total - offset, name, ": ", what, " [",
               offset, ", ", offset, " + ", size, ") lies outside the ", total,
               " bytes available (truncated or corrupt file)");
}

std::string ByteSource::read_string(uint64_t offset, size_t size) const {
  check_range(name(), offset, size, this->size(), "read");
  std::string s(size, '\0');
  if (size > 0) read_at(offset, &s[0], size);
  return s;
}

FileSource::FileSource(const std::string& path) : path_(path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  ZRT_CHECK_AS(CheckpointError, fd_ >= 0, "cannot open ", path, ": ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    ZRT_CHECK_AS(CheckpointError, false, path, " is not a regular file",
                 err ? std::string(" (") + std::strerror(err) + ")" : std::string());
  }
  size_ = static_cast<uint64_t>(st.st_size);
  ::posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);  // a hint: larger readahead
}

FileSource::~FileSource() {
  if (fd_ >= 0) ::close(fd_);
}

void FileSource::read_at(uint64_t offset, void* dst, size_t size) const {
  check_range(path_, offset, size, size_, "read");
  auto* p = static_cast<char*>(dst);
  while (size > 0) {
    const size_t chunk = size < (size_t{1} << 30) ? size : (size_t{1} << 30);
    const ssize_t n = ::pread(fd_, p, chunk, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    ZRT_CHECK_AS(CheckpointError, n > 0, path_, ": read of ", size, " bytes at offset ", offset,
                 " failed: ", n == 0 ? "unexpected end of file" : std::strerror(errno));
    p += n;
    offset += static_cast<uint64_t>(n);
    size -= static_cast<size_t>(n);
  }
}

void MemorySource::read_at(uint64_t offset, void* dst, size_t size) const {
  check_range(name_, offset, size, bytes_.size(), "read");
  if (size > 0) std::memcpy(dst, bytes_.data() + offset, size);
}

}  // namespace zrt::ckpt
