// Internal to storage.cpp: the sink behind Storage::write_temp. It overlaps producing a file with
// writing it (Note [Pipelined file writes]): a writer thread takes chunks in order and calls
// WritableFile::write, while the producer (the zip writer computing its own checksums, and this
// sink's CRC-32 at hand-over) moves on. Small writes are copied into 1 MiB blocks (at most 8 in
// flight); borrowed large ones are written from the caller's memory.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "checkpoint/io.h"
#include "checkpoint/storage.h"

namespace zrt::ckpt::detail {

class PipelinedFileSink : public ByteSink {
 public:
  explicit PipelinedFileSink(WritableFile& file) : file_(file) {}
  // Stops the writer thread; chunks still queued (finish() was not called) are dropped.
  ~PipelinedFileSink() override;
  PipelinedFileSink(const PipelinedFileSink&) = delete;
  PipelinedFileSink& operator=(const PipelinedFileSink&) = delete;

  void write(const void* data, size_t size) override;
  void write_borrowed(const void* data, size_t size) override;
  void sync_borrowed() override;
  uint64_t bytes_written() const override { return total_; }

  // Writes everything still buffered and waits for it; throws the first write error.
  void finish();
  // CRC-32 of all bytes; valid after finish().
  uint32_t crc() const { return crc_; }

 private:
  struct Chunk {
    const char* data = nullptr;
    size_t size = 0;
    std::unique_ptr<char[]> owned;  // set for copied chunks
  };
  void flush_staging();
  void enqueue(Chunk chunk);
  void wait_idle(std::unique_lock<std::mutex>& lock);
  void rethrow_if_failed();
  void run();

  static constexpr size_t kBlock = size_t{1} << 20;
  static constexpr size_t kMaxOwnedInFlight = 8;

  WritableFile& file_;
  std::unique_ptr<char[]> staging_;
  size_t staged_ = 0;
  uint64_t total_ = 0;
  uint32_t crc_ = 0;  // producer thread only

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Chunk> queue_;
  size_t owned_in_flight_ = 0;
  bool busy_ = false;
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace zrt::ckpt::detail
