// Internal: the seam between IoEngine's worker threads and the kernel interface that carries their
// requests (io_uring, libaio, or pread/pwrite). Not part of the public API.
#pragma once

#include <cstdint>
#include <memory>

namespace zrt::aio::detail {

// One request: a contiguous transfer of `bytes` at `offset` of `fd`.
struct IoRequest {
  int fd = -1;
  bool write = false;
  int64_t offset = 0;
  void* buffer = nullptr;
  int64_t bytes = 0;
  uint64_t tag = 0;  // handed back in the completion
};

struct IoCompletion {
  uint64_t tag = 0;
  int64_t result = 0;  // bytes transferred (may be fewer than asked), or -errno
};

// One queue of requests, owned and used by one worker thread at a time. The worker never has more
// than `depth` requests prepared or in flight.
class Backend {
 public:
  virtual ~Backend() = default;
  // Queues a request; it reaches the kernel at the next submit().
  virtual void prepare(const IoRequest& request) = 0;
  // Hands every prepared request to the kernel (one syscall where the interface allows). A request
  // the kernel refuses at submission comes back from wait() as a failed completion.
  virtual void submit() = 0;
  // Blocks until at least one submitted request completed; writes up to `max` completions to
  // `out` and returns how many.
  virtual int wait(IoCompletion* out, int max) = 0;
  virtual const char* name() const = 0;
};

// Each throws zrt::Error (with strerror) when the interface cannot start here: not compiled in
// (ZRT_HAVE_LIBURING / ZRT_HAVE_LIBAIO), refused by the kernel or a seccomp filter.
std::unique_ptr<Backend> make_io_uring_backend(int depth);
std::unique_ptr<Backend> make_libaio_backend(int depth);
std::unique_ptr<Backend> make_posix_backend(int depth);

}  // namespace zrt::aio::detail
