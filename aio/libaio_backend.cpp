// The libaio backend: one kernel AIO context per worker thread (io_setup / io_submit /
// io_getevents).
#include <memory>

#include "aio/backend.h"
#include "core/error.h"

#ifdef ZRT_HAVE_LIBAIO

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include <libaio.h>

namespace zrt::aio::detail {
namespace {

class LibaioBackend final : public Backend {
 public:
  explicit LibaioBackend(int depth) : events_(static_cast<size_t>(depth)) {
    const int rc = io_setup(depth, &ctx_);
    ZRT_CHECK(rc == 0, "io_setup(", depth, "): ", std::strerror(-rc));
    prepared_.reserve(static_cast<size_t>(depth));
    pointers_.reserve(static_cast<size_t>(depth));
  }
  ~LibaioBackend() override { io_destroy(ctx_); }

  void prepare(const IoRequest& r) override {
    iocb cb{};
    if (r.write) {
      io_prep_pwrite(&cb, r.fd, r.buffer, static_cast<size_t>(r.bytes), r.offset);
    } else {
      io_prep_pread(&cb, r.fd, r.buffer, static_cast<size_t>(r.bytes), r.offset);
    }
    cb.data = reinterpret_cast<void*>(static_cast<uintptr_t>(r.tag));
    prepared_.push_back(cb);
  }

  void submit() override {
    // The kernel copies each iocb during io_submit, so prepared_ is reusable afterwards.
    pointers_.clear();
    for (iocb& cb : prepared_) pointers_.push_back(&cb);
    size_t done = 0;
    while (done < pointers_.size()) {
      const int rc = io_submit(ctx_, static_cast<long>(pointers_.size() - done), &pointers_[done]);
      if (rc > 0) {
        done += static_cast<size_t>(rc);
      } else if (rc != -EINTR && rc != -EAGAIN) {
        // The kernel refused the first remaining request (e.g. EINVAL for a misaligned direct
        // transfer): it completes as failed, the rest are submitted.
        const uint64_t tag = reinterpret_cast<uintptr_t>(pointers_[done]->data);
        refused_.push_back(IoCompletion{tag, rc < 0 ? rc : -EIO});
        ++done;
      }
    }
    prepared_.clear();
  }

  int wait(IoCompletion* out, int max) override {
    if (!refused_.empty()) {
      const int n = static_cast<int>(std::min<size_t>(max, refused_.size()));
      std::copy(refused_.begin(), refused_.begin() + n, out);
      refused_.erase(refused_.begin(), refused_.begin() + n);
      return n;
    }
    const long want = static_cast<long>(std::min<size_t>(max, events_.size()));
    int rc;
    do {
      rc = io_getevents(ctx_, 1, want, events_.data(), nullptr);
    } while (rc == -EINTR);
    if (rc < 0) throw Error(str("io_getevents: ", std::strerror(-rc)));
    for (int i = 0; i < rc; ++i) {
      // res is the byte count, or a negative errno stored in an unsigned long.
      out[i] = IoCompletion{reinterpret_cast<uintptr_t>(events_[i].data),
                            static_cast<int64_t>(static_cast<long>(events_[i].res))};
    }
    return rc;
  }

  const char* name() const override { return "libaio"; }

 private:
  io_context_t ctx_ = nullptr;
  std::vector<iocb> prepared_;
  std::vector<iocb*> pointers_;
  std::vector<io_event> events_;
  std::vector<IoCompletion> refused_;
};

}  // namespace

std::unique_ptr<Backend> make_libaio_backend(int depth) {
  return std::make_unique<LibaioBackend>(depth);
}

}  // namespace zrt::aio::detail

#else  // !ZRT_HAVE_LIBAIO

namespace zrt::aio::detail {

std::unique_ptr<Backend> make_libaio_backend(int) {
  throw Error("libaio: ZeroRT was built without libaio (install libaio-dev and rebuild)");
}

}  // namespace zrt::aio::detail

#endif
