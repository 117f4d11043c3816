#include "checkpoint/pipelined_sink.h"

#include <cstring>

#include "checkpoint/hash.h"

namespace zrt::ckpt::detail {

// Note [Pipelined file writes]
// Saving a .pt file is three passes over every byte: the zip records' CRC (LibTorch's before 2.6,
// ours after: Note [Zip CRCs filled in here] in pt_writer.cpp), our CRC-32 for the manifest, and
// the copy into the page cache by write(2), after which the device writes it (Note [Early
// writeback]). Run one after the other they leave the device idle
// while the CPU works and the CPU idle while write(2) blocks. With the writer thread here, the
// zip writer checksums record k+1 while record k is checksummed and written, so on two cores a
// save costs about max(CPU, device) instead of their sum. Both checksums run on the producer's
// thread (ours at hand-over time, in stream order), so the writer thread only writes. Tensor data
// are never copied: the zip writer hands them over as borrowed chunks and waits for them in
// sync_borrowed().

PipelinedFileSink::~PipelinedFileSink() {
  if (!thread_.joinable()) return;
  {
    // Not finished: the file is being abandoned (an exception); drop what is queued rather than
    // touch memory a producer may already have released. A chunk being written completes.
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    while (!queue_.empty()) {
      if (queue_.front().owned) --owned_in_flight_;
      queue_.pop_front();
    }
  }
  cv_.notify_all();
  thread_.join();
}

void PipelinedFileSink::rethrow_if_failed() {
  std::lock_guard<std::mutex> lock(mu_);
  if (error_) std::rethrow_exception(error_);
}

void PipelinedFileSink::write(const void* data, size_t size) {
  rethrow_if_failed();
  total_ += size;
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    if (!staging_) staging_.reset(new char[kBlock]);
    const size_t n = std::min(size, kBlock - staged_);
    std::memcpy(staging_.get() + staged_, p, n);
    staged_ += n;
    p += n;
    size -= n;
    if (staged_ == kBlock) flush_staging();
  }
}

void PipelinedFileSink::write_borrowed(const void* data, size_t size) {
  rethrow_if_failed();
  total_ += size;
  flush_staging();
  crc_ = crc32_update(crc_, data, size);
  Chunk c;
  c.data = static_cast<const char*>(data);
  c.size = size;
  enqueue(std::move(c));
}

void PipelinedFileSink::flush_staging() {
  if (staged_ == 0) return;
  crc_ = crc32_update(crc_, staging_.get(), staged_);
  Chunk c;
  c.size = staged_;
  c.owned = std::move(staging_);
  c.data = c.owned.get();
  staged_ = 0;
  enqueue(std::move(c));
}

void PipelinedFileSink::enqueue(Chunk chunk) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  if (chunk.owned) {
    cv_.wait(lock, [&] { return owned_in_flight_ < kMaxOwnedInFlight; });
    ++owned_in_flight_;
  }
  queue_.push_back(std::move(chunk));
  cv_.notify_all();
}

void PipelinedFileSink::wait_idle(std::unique_lock<std::mutex>& lock) {
  cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
}

void PipelinedFileSink::sync_borrowed() {
  std::unique_lock<std::mutex> lock(mu_);
  if (thread_.joinable()) wait_idle(lock);
  if (error_) std::rethrow_exception(error_);
}

void PipelinedFileSink::finish() {
  if (!thread_.joinable()) {
    // Small file: nothing was handed to a thread, write the block here.
    if (staged_ > 0) {
      crc_ = crc32_update(crc_, staging_.get(), staged_);
      file_.write(staging_.get(), staged_);
      staged_ = 0;
    }
    return;
  }
  flush_staging();
  sync_borrowed();
}

void PipelinedFileSink::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop requested and drained
    Chunk c = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    const bool skip = error_ != nullptr;
    lock.unlock();
    std::exception_ptr failure;
    if (!skip) {
      try {
        file_.write(c.data, c.size);
      } catch (...) {
        failure = std::current_exception();
      }
    }
    const bool owned = c.owned != nullptr;
    c.owned.reset();
    lock.lock();
    if (failure && !error_) error_ = failure;
    if (owned) --owned_in_flight_;
    busy_ = false;
    cv_.notify_all();
  }
}

}  // namespace zrt::ckpt::detail
