// The posix backend: requests run synchronously with pread/pwrite on the worker thread, one per
// wait(). The fallback where neither io_uring nor libaio can start (e.g. a seccomp filter); the
// parallelism is then thread_count, not queue_depth.
#include <cerrno>
#include <deque>
#include <memory>

#include "aio/backend.h"
#include "core/error.h"
#include <unistd.h>

namespace zrt::aio::detail {
namespace {

class PosixBackend final : public Backend {
 public:
  void prepare(const IoRequest& r) override { queued_.push_back(r); }
  void submit() override {}

  int wait(IoCompletion* out, int max) override {
    ZRT_INTERNAL_ASSERT(!queued_.empty() && max > 0, "posix backend: wait with nothing queued");
    const IoRequest r = queued_.front();
    queued_.pop_front();
    ssize_t n;
    do {
      n = r.write ? ::pwrite(r.fd, r.buffer, static_cast<size_t>(r.bytes), r.offset)
                  : ::pread(r.fd, r.buffer, static_cast<size_t>(r.bytes), r.offset);
    } while (n < 0 && errno == EINTR);
    out[0] = IoCompletion{r.tag, n < 0 ? -static_cast<int64_t>(errno) : static_cast<int64_t>(n)};
    return 1;
  }

  const char* name() const override { return "posix"; }

 private:
  std::deque<IoRequest> queued_;
};

}  // namespace

std::unique_ptr<Backend> make_posix_backend(int) { return std::make_unique<PosixBackend>(); }

}  // namespace zrt::aio::detail
