// The io_uring backend: one ring per worker thread, IORING_OP_READ/WRITE requests.
#include <memory>

#include "aio/backend.h"
#include "core/error.h"

#ifdef ZRT_HAVE_LIBURING

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include <liburing.h>

namespace zrt::aio::detail {
namespace {

class IoUringBackend final : public Backend {
 public:
  explicit IoUringBackend(int depth) : cqes_(static_cast<size_t>(depth)) {
    const int rc = io_uring_queue_init(static_cast<unsigned>(depth), &ring_, 0);
    ZRT_CHECK(rc == 0, "io_uring_queue_init(", depth, "): ", std::strerror(-rc));
  }
  ~IoUringBackend() override { io_uring_queue_exit(&ring_); }

  void prepare(const IoRequest& r) override {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    // The worker keeps at most `depth` requests prepared or in flight and the ring has as many
    // submission entries, so one is always free.
    ZRT_INTERNAL_ASSERT(sqe != nullptr, "io_uring submission queue full");
    if (r.write) {
      io_uring_prep_write(sqe, r.fd, r.buffer, static_cast<unsigned>(r.bytes),
                          static_cast<__u64>(r.offset));
    } else {
      io_uring_prep_read(sqe, r.fd, r.buffer, static_cast<unsigned>(r.bytes),
                         static_cast<__u64>(r.offset));
    }
    io_uring_sqe_set_data64(sqe, r.tag);
  }

  void submit() override {
    while (io_uring_sq_ready(&ring_) > 0) {
      const int rc = io_uring_submit(&ring_);
      if (rc >= 0 || rc == -EINTR || rc == -EAGAIN) continue;
      // Per-request failures come back in completions; a failing io_uring_enter means the ring
      // itself is unusable (IoWorker fails its operations with this message).
      throw Error(str("io_uring_submit: ", std::strerror(-rc)));
    }
  }

  int wait(IoCompletion* out, int max) override {
    io_uring_cqe* cqe = nullptr;
    int rc;
    do {
      rc = io_uring_wait_cqe(&ring_, &cqe);
    } while (rc == -EINTR || rc == -EAGAIN);
    if (rc < 0) throw Error(str("io_uring_wait_cqe: ", std::strerror(-rc)));
    const unsigned want = static_cast<unsigned>(std::min<size_t>(max, cqes_.size()));
    const unsigned n = io_uring_peek_batch_cqe(&ring_, cqes_.data(), want);
    for (unsigned i = 0; i < n; ++i) {
      out[i] = IoCompletion{cqes_[i]->user_data, cqes_[i]->res};
    }
    io_uring_cq_advance(&ring_, n);
    return static_cast<int>(n);
  }

  const char* name() const override { return "io_uring"; }

 private:
  io_uring ring_{};
  std::vector<io_uring_cqe*> cqes_;
};

}  // namespace

std::unique_ptr<Backend> make_io_uring_backend(int depth) {
  return std::make_unique<IoUringBackend>(depth);
}

}  // namespace zrt::aio::detail

#else  // !ZRT_HAVE_LIBURING

namespace zrt::aio::detail {

std::unique_ptr<Backend> make_io_uring_backend(int) {
  throw Error("io_uring: ZeroRT was built without liburing (install liburing-dev and rebuild)");
}

}  // namespace zrt::aio::detail

#endif
