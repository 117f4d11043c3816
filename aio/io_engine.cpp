#include "aio/io_engine.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <utility>

#include "aio/backend.h"
#include "aio/fault_injection.h"
#include "aio/io_worker.h"
#include "core/error.h"
#include "core/logging.h"

namespace zrt::aio {
namespace {

// The largest request: the kernel moves at most about 2 GiB per read/write call, and io_uring's
// length field is 32 bits.
constexpr int64_t kMaxBlockSize = int64_t{1} << 30;

std::unique_ptr<detail::Backend> make_backend(IoBackend kind, int depth) {
  switch (kind) {
    case IoBackend::kIoUring:
      return detail::make_io_uring_backend(depth);
    case IoBackend::kLibaio:
      return detail::make_libaio_backend(depth);
    case IoBackend::kPosix:
      return detail::make_posix_backend(depth);
    case IoBackend::kAuto:
      break;
  }
  ZRT_INTERNAL_ASSERT(false, "make_backend(kAuto)");
  return nullptr;
}

// The first worker's backend, which decides the kind: an explicit choice (or ZRT_AIO_BACKEND)
// must start; kAuto falls back io_uring -> libaio -> posix, warning once per process.
std::unique_ptr<detail::Backend> start_first_backend(IoBackend* kind, int depth) {
  if (*kind == IoBackend::kAuto) {
    const char* env = std::getenv("ZRT_AIO_BACKEND");
    if (env != nullptr && *env != '\0') *kind = parse_io_backend(env, "ZRT_AIO_BACKEND");
  }
  if (*kind != IoBackend::kAuto) {
    try {
      return make_backend(*kind, depth);
    } catch (const Error& e) {
      throw Error(str("aio backend ", io_backend_name(*kind), " cannot start: ", e.what()));
    }
  }
  std::string why;
  for (IoBackend candidate : {IoBackend::kIoUring, IoBackend::kLibaio, IoBackend::kPosix}) {
    try {
      auto started = make_backend(candidate, depth);
      *kind = candidate;
      static std::atomic<bool> warned{false};
      if (!why.empty() && !warned.exchange(true)) {
        ZRT_LOG_WARN("aio: ", why, "; using ", io_backend_name(candidate),
                     candidate == IoBackend::kPosix ? " (pread/pwrite on the aio threads)" : "",
                     " instead (set ZRT_AIO_BACKEND to choose)");
      }
      return started;
    } catch (const Error& e) {
      why += str(why.empty() ? "" : "; ", io_backend_name(candidate), " cannot start: ", e.what());
    }
  }
  throw Error(str("aio: no backend can start: ", why));
}

void check_direct_alignment(const char* kind, const SwapFile& file, int64_t offset,
                            const void* buffer, int64_t bytes) {
  const auto fail = [&](const char* what, const std::string& value) {
    throw Error(str("aio ", kind, " of ", file.path(), ": the ", what, " (", value,
                    ") is not a multiple of ", kIoAlignment,
                    " bytes, which direct I/O (O_DIRECT) requires"));
  };
  if (!is_aligned(buffer)) fail("buffer address", str(buffer));
  if (!is_aligned(offset)) fail("file offset", str(offset));
  if (!is_aligned(bytes)) fail("size", str(bytes));
}

}  // namespace

void validate(const AioOptions& o) {
  ZRT_CHECK(o.block_size > 0 && o.block_size % kIoAlignment == 0,
            "aio.block_size: expected a positive multiple of ", kIoAlignment, ", got ",
            o.block_size);
  ZRT_CHECK(o.block_size <= kMaxBlockSize, "aio.block_size: expected at most ", kMaxBlockSize,
            " (1 GiB), got ", o.block_size);
  ZRT_CHECK(o.queue_depth >= 1 && o.queue_depth <= 4096,
            "aio.queue_depth: expected 1 to 4096, got ", o.queue_depth);
  ZRT_CHECK(o.thread_count >= 1 && o.thread_count <= 256,
            "aio.thread_count (intra_op_parallelism): expected 1 to 256, got ", o.thread_count);
}

const char* io_backend_name(IoBackend backend) {
  switch (backend) {
    case IoBackend::kAuto:
      return "auto";
    case IoBackend::kIoUring:
      return "io_uring";
    case IoBackend::kLibaio:
      return "libaio";
    case IoBackend::kPosix:
      return "posix";
  }
  return "?";
}

IoBackend parse_io_backend(const std::string& text, const std::string& what) {
  for (IoBackend b :
       {IoBackend::kAuto, IoBackend::kIoUring, IoBackend::kLibaio, IoBackend::kPosix}) {
    if (text == io_backend_name(b)) return b;
  }
  throw Error(str(what, ": expected auto, io_uring, libaio or posix, got '", text, "'"));
}

IoEngine::IoEngine(const AioOptions& options, IoBackend backend)
    : options_(options), counters_(std::make_unique<detail::ByteCounters>()) {
  validate(options_);
  detail::arm_fault_injection_from_env();
  const int depth = static_cast<int>(options_.queue_depth);
  IoBackend kind = backend;
  auto first = start_first_backend(&kind, depth);
  workers_.reserve(static_cast<size_t>(options_.thread_count));
  workers_.push_back(
      std::make_unique<detail::IoWorker>(std::move(first), options_, counters_.get()));
  for (int64_t i = 1; i < options_.thread_count; ++i) {
    workers_.push_back(
        std::make_unique<detail::IoWorker>(make_backend(kind, depth), options_, counters_.get()));
  }
}

IoEngine::~IoEngine() = default;

IoTicket IoEngine::read(const SwapFile& file, int64_t offset, void* buffer, int64_t bytes) {
  return submit(false, file, offset, buffer, bytes);
}

IoTicket IoEngine::write(const SwapFile& file, int64_t offset, const void* buffer, int64_t bytes) {
  return submit(true, file, offset, const_cast<void*>(buffer), bytes);
}

IoTicket IoEngine::submit(bool write, const SwapFile& file, int64_t offset, void* buffer,
                          int64_t bytes) {
  const char* kind = write ? "write" : "read";
  ZRT_CHECK(file.is_open(), "aio ", kind, ": the swap file ", file.path(), " is not open");
  ZRT_CHECK(offset >= 0 && bytes >= 0, "aio ", kind, " of ", file.path(),
            ": expected offset >= 0 and size >= 0, got offset ", offset, " and size ", bytes);
  ZRT_CHECK(buffer != nullptr || bytes == 0, "aio ", kind, " of ", file.path(), ": null buffer");
  if (file.direct()) check_direct_alignment(kind, file, offset, buffer, bytes);

  auto op = std::make_shared<detail::OpState>();
  op->path = file.path();
  op->write = write;
  op->offset = offset;
  op->bytes = bytes;
  // Note [Slices and threads]: equal aligned slices, the last one shorter.
  const int64_t threads = options_.thread_count;
  const int64_t slice_bytes = align_up((bytes + threads - 1) / threads);
  const int64_t slices = slice_bytes == 0 ? 0 : (bytes + slice_bytes - 1) / slice_bytes;
  op->slices_left = static_cast<int>(slices);
  for (int64_t i = 0; i < slices; ++i) {
    detail::Slice slice;
    slice.op = op;
    slice.fd = file.fd();
    slice.offset = offset + i * slice_bytes;
    slice.buffer = static_cast<char*>(buffer) + i * slice_bytes;
    slice.bytes = std::min(slice_bytes, bytes - i * slice_bytes);
    workers_[static_cast<size_t>(i)]->push(std::move(slice));
  }
  return IoTicket(std::move(op));
}

const char* IoEngine::backend_name() const { return workers_.front()->backend_name(); }
int64_t IoEngine::bytes_read() const { return counters_->read.load(); }
int64_t IoEngine::bytes_written() const { return counters_->written.load(); }

void IoTicket::wait() {
  if (!op_) return;
  std::unique_lock<std::mutex> lock(op_->mutex);
  op_->finished.wait(lock, [this] { return op_->slices_left == 0; });
  if (!op_->error.empty()) throw Error(str("aio: ", op_->error));
}

bool IoTicket::done() const {
  if (!op_) return true;
  std::lock_guard<std::mutex> lock(op_->mutex);
  return op_->slices_left == 0;
}

}  // namespace zrt::aio
