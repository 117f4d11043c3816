// Asynchronous reads and writes between host memory and swap files (ZeRO-Infinity's NVMe
// offload), over io_uring, libaio or plain pread/pwrite, with DeepSpeed's "aio" knobs.
//
//   IoEngine engine(AioOptions{});                       // io_uring, else libaio, else posix
//   SwapFile file = SwapFile::create("/nvme/zrt.swp", n);
//   AlignedBuffer buffer(n);
//   IoTicket w = engine.write(file, 0, buffer.data(), n);
//   ...                                                  // overlap other work
//   w.wait();                                            // throws zrt::Error on failure
//
// Environment (read when an IoEngine is constructed):
//   ZRT_AIO_BACKEND=io_uring|libaio|posix   replaces IoBackend::kAuto's choice; that backend must
//                                           start or the constructor throws.
//   ZRT_AIO_FAIL=<read|write>:<N>           test-only fault injection, off unless set: the N-th
//                                           request (1-based, as cut by block_size) of that kind,
//                                           counted process-wide over every engine from the last
//                                           engine construction, completes with EIO as if the
//                                           device had returned it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "aio/aligned_buffer.h"
#include "aio/options.h"
#include "aio/swap_file.h"

namespace zrt::aio {

namespace detail {
struct OpState;
class IoWorker;
struct ByteCounters;
}  // namespace detail

// An operation in flight. Copyable (copies share the operation); a default-constructed ticket is
// already done.
class IoTicket {
 public:
  IoTicket() = default;
  // Blocks until every request of the operation completed. Throws zrt::Error naming the file
  // path, the operation ("read"/"write"), the byte offset and size and strerror of the first
  // failure, including a short transfer ("read of <path> at byte X returned Y of Z bytes: file
  // ended"). Calling wait() again after success is a no-op; after failure it throws again.
  void wait();
  // True once every request completed (successfully or not); never blocks.
  bool done() const;

 private:
  friend class IoEngine;
  explicit IoTicket(std::shared_ptr<detail::OpState> op) : op_(std::move(op)) {}
  std::shared_ptr<detail::OpState> op_;
};

// Note [Slices and threads]:
// Each operation is cut into options.thread_count contiguous slices (each a multiple of
// kIoAlignment except the last; a small operation uses fewer), slice i going to worker thread i,
// which cuts it into block_size requests and keeps up to queue_depth in flight on its own io_uring
// ring or libaio context (Note [Worker loop] in io_worker.h). Workers take slices in FIFO order,
// so several operations can be in flight at once, e.g. the read of the next optimizer sub-group
// while the write of the previous one runs. Operations on overlapping bytes are not ordered
// against each other: wait for the first before issuing the second.
class IoEngine {
 public:
  // Throws zrt::Error for invalid options ("aio.block_size: expected a positive multiple of 4096,
  // got 1000"), a malformed ZRT_AIO_BACKEND or ZRT_AIO_FAIL, or an explicitly chosen backend that
  // cannot start here. kAuto falls back from io_uring to libaio to posix with one warning.
  explicit IoEngine(const AioOptions& options, IoBackend backend = IoBackend::kAuto);
  ~IoEngine();  // waits for everything in flight (never throws), stops the threads
  IoEngine(const IoEngine&) = delete;
  IoEngine& operator=(const IoEngine&) = delete;

  // Asynchronous. `buffer` (and `file`) must stay valid until the ticket is waited. For a direct
  // file the buffer address, offset and bytes must be multiples of kIoAlignment (zrt::Error
  // otherwise, naming which). Thread-safe.
  IoTicket read(const SwapFile& file, int64_t offset, void* buffer, int64_t bytes);
  IoTicket write(const SwapFile& file, int64_t offset, const void* buffer, int64_t bytes);

  const char* backend_name() const;  // "io_uring", "libaio", "posix"
  const AioOptions& options() const { return options_; }
  // Bytes read / written by completed requests since construction (counted from completions,
  // so partial transfers of a failed operation count too).
  int64_t bytes_read() const;
  int64_t bytes_written() const;

 private:
  IoTicket submit(bool write, const SwapFile& file, int64_t offset, void* buffer, int64_t bytes);

  AioOptions options_;
  std::unique_ptr<detail::ByteCounters> counters_;
  std::vector<std::unique_ptr<detail::IoWorker>> workers_;
};

// Throws zrt::Error naming the first invalid option and its value.
void validate(const AioOptions& options);
const char* io_backend_name(IoBackend backend);  // "auto", "io_uring", "libaio", "posix"
// Parses "auto", "io_uring", "libaio", "posix"; throws zrt::Error naming `what` otherwise.
IoBackend parse_io_backend(const std::string& text, const std::string& what = "aio backend");

}  // namespace zrt::aio
