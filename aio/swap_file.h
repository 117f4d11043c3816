// A file that holds swapped-out tensors (ZeRO-Infinity's NVMe offload): an owned descriptor opened
// for direct I/O, with its size reserved on the device up front.
#pragma once

#include <cstdint>
#include <string>

namespace zrt::aio {

// Note [Buffered fallback]:
// Some file systems refuse O_DIRECT (open fails with EINVAL: older tmpfs, some FUSE and network
// file systems). Such a file is opened buffered instead: everything still works, through the page
// cache, but the throughput is not what the disk could do, so the first time it happens in the
// process one warning names the path. direct() tells which mode a file got; IoEngine enforces the
// alignment rules only for direct files.
class SwapFile {
 public:
  // Creates (or truncates) `path`, opens it with O_DIRECT|O_RDWR|O_CLOEXEC and reserves `bytes`
  // rounded up to kIoAlignment on the device (fallocate; ftruncate where the file system does not
  // support fallocate, which reserves nothing). No space: zrt::Error "swap file <path>: cannot
  // reserve N bytes: No space left on device", and the file is removed again.
  // allow_direct = false opens buffered (test-only: exercises the fallback of a file system that
  // refuses O_DIRECT without one), with no warning.
  static SwapFile create(const std::string& path, int64_t bytes, bool allow_direct = true);
  // Opens an existing swap file (resume) with the same flags. Throws zrt::Error when it is missing
  // or shorter than `bytes`.
  static SwapFile open_existing(const std::string& path, int64_t bytes, bool allow_direct = true);

  SwapFile() = default;
  ~SwapFile();  // closes the descriptor; never removes the file (remove() does)
  SwapFile(SwapFile&& other) noexcept;
  SwapFile& operator=(SwapFile&& other) noexcept;
  SwapFile(const SwapFile&) = delete;
  SwapFile& operator=(const SwapFile&) = delete;

  const std::string& path() const { return path_; }
  int fd() const { return fd_; }
  int64_t bytes() const { return bytes_; }  // the size reserved: align_up(bytes asked for)
  bool direct() const { return direct_; }   // opened with O_DIRECT (Note [Buffered fallback])
  bool is_open() const { return fd_ >= 0; }

  // Throws zrt::Error "swap file <path> was deleted while in use" when the file has no name left
  // (someone removed it while we held it open: its data is still readable through the descriptor,
  // but it will vanish on close and nobody can resume from it).
  void check_present() const;
  // Unlinks the file (the descriptor stays valid until destruction); a missing file is no error.
  void remove();

 private:
  SwapFile(std::string path, int fd, int64_t bytes, bool direct);
  void close_fd() noexcept;

  std::string path_;
  int fd_ = -1;
  int64_t bytes_ = 0;
  bool direct_ = false;
};

}  // namespace zrt::aio
