#include "aio/swap_file.h"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "aio/aligned_buffer.h"
#include "core/error.h"
#include "core/logging.h"
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace zrt::aio {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

// Opens `path` with O_DIRECT when allowed and the file system takes it, else buffered (Note
// [Buffered fallback]). Sets *direct; returns the descriptor or -1 with errno set.
int open_swap(const std::string& path, int flags, bool allow_direct, bool* direct) {
  flags |= O_RDWR | O_CLOEXEC;
  if (allow_direct) {
    const int fd = ::open(path.c_str(), flags | O_DIRECT, 0600);
    if (fd >= 0 || errno != EINVAL) {
      *direct = true;
      return fd;
    }
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true)) {
      ZRT_LOG_WARN("swap file ", path,
                   ": the file system refuses O_DIRECT; using buffered I/O "
                   "through the page cache, so swap throughput is not what the disk could do");
    }
  }
  *direct = false;
  return ::open(path.c_str(), flags, 0600);
}

// Reserves `bytes` for fd; returns 0 or an errno.
int reserve(int fd, int64_t bytes) {
  if (bytes == 0) return 0;
  int rc;
  do {
    rc = ::fallocate(fd, 0, 0, static_cast<off_t>(bytes));
  } while (rc != 0 && errno == EINTR);
  if (rc == 0) return 0;
  if (errno != EOPNOTSUPP && errno != ENOSYS) return errno;
  // The file system cannot preallocate: at least give the file its size.
  return ::ftruncate(fd, static_cast<off_t>(bytes)) == 0 ? 0 : errno;
}

}  // namespace

SwapFile::SwapFile(std::string path, int fd, int64_t bytes, bool direct)
    : path_(std::move(path)), fd_(fd), bytes_(bytes), direct_(direct) {}

SwapFile SwapFile::create(const std::string& path, int64_t bytes, bool allow_direct) {
  ZRT_CHECK(bytes >= 0, "swap file ", path, ": expected a size >= 0, got ", bytes);
  bool direct = false;
  const int fd = open_swap(path, O_CREAT | O_TRUNC, allow_direct, &direct);
  ZRT_CHECK(fd >= 0, "swap file ", path, ": cannot create: ", errno_text(errno));
  SwapFile file(path, fd, align_up(bytes), direct);
  if (const int err = reserve(fd, file.bytes_); err != 0) {
    file.close_fd();
    ::unlink(path.c_str());
    throw Error(
        str("swap file ", path, ": cannot reserve ", file.bytes_, " bytes: ", errno_text(err)));
  }
  return file;
}

SwapFile SwapFile::open_existing(const std::string& path, int64_t bytes, bool allow_direct) {
  ZRT_CHECK(bytes >= 0, "swap file ", path, ": expected a size >= 0, got ", bytes);
  bool direct = false;
  const int fd = open_swap(path, 0, allow_direct, &direct);
  ZRT_CHECK(fd >= 0, "swap file ", path, ": cannot open: ", errno_text(errno));
  SwapFile file(path, fd, align_up(bytes), direct);
  struct stat st {};
  ZRT_CHECK(::fstat(fd, &st) == 0, "swap file ", path, ": cannot stat: ", errno_text(errno));
  ZRT_CHECK(static_cast<int64_t>(st.st_size) >= bytes, "swap file ", path, " has ",
            static_cast<int64_t>(st.st_size), " bytes, expected at least ", bytes);
  return file;
}

SwapFile::~SwapFile() { close_fd(); }

SwapFile::SwapFile(SwapFile&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      bytes_(std::exchange(other.bytes_, 0)),
      direct_(std::exchange(other.direct_, false)) {}

SwapFile& SwapFile::operator=(SwapFile&& other) noexcept {
  if (this != &other) {
    close_fd();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    bytes_ = std::exchange(other.bytes_, 0);
    direct_ = std::exchange(other.direct_, false);
  }
  return *this;
}

void SwapFile::close_fd() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void SwapFile::check_present() const {
  ZRT_CHECK(fd_ >= 0, "swap file ", path_, " is not open");
  struct stat st {};
  ZRT_CHECK(::fstat(fd_, &st) == 0, "swap file ", path_, ": cannot stat: ", errno_text(errno));
  ZRT_CHECK(st.st_nlink > 0, "swap file ", path_, " was deleted while in use");
}

void SwapFile::remove() {
  if (path_.empty()) return;
  ZRT_CHECK(::unlink(path_.c_str()) == 0 || errno == ENOENT, "swap file ", path_,
            ": cannot remove: ", errno_text(errno));
}

}  // namespace zrt::aio
