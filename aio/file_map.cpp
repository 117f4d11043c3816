#include "aio/file_map.h"

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

namespace zrt::aio {

std::shared_ptr<FileMap> FileMap::of_fd(int fd, int64_t offset, int64_t bytes,
                                        const std::string& what) {
  ZRT_CHECK(offset >= 0 && bytes >= 0, what, ": cannot map ", bytes, " bytes at ", offset);
  const int64_t page = ::sysconf(_SC_PAGESIZE);
  const int64_t start = offset / page * page;
  const size_t length = static_cast<size_t>(offset - start + bytes);
  if (length == 0) return std::shared_ptr<FileMap>(new FileMap(nullptr, 0, nullptr, 0));
  void* base =
      ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, static_cast<off_t>(start));
  ZRT_CHECK(base != MAP_FAILED, what, ": cannot map ", bytes, " bytes at ", offset, ": ",
            std::strerror(errno));
  ::madvise(base, length, MADV_SEQUENTIAL);
  return std::shared_ptr<FileMap>(
      new FileMap(base, length, static_cast<char*>(base) + (offset - start), bytes));
}

std::shared_ptr<FileMap> FileMap::of_path(const std::string& path, int64_t offset, int64_t bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ZRT_CHECK(fd >= 0, path, ": cannot open: ", std::strerror(errno));
  try {
    auto map = of_fd(fd, offset, bytes, path);
    ::close(fd);  // the mapping keeps the file
    return map;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

FileMap::~FileMap() {
  if (base_ != nullptr) ::munmap(base_, length_);
}

}  // namespace zrt::aio
