// TensorBoard event files, written natively: the TFRecord framing (length, masked CRC-32C of the
// length, the record, masked CRC-32C of the record) around hand-encoded `Event` protocol
// buffers (wall_time = 1, step = 2, file_version = 3, summary = 5 holding `Value`s with tag = 1
// and simple_value = 2). The first record is the "brain.Event:2" version event, as every writer
// starts. Read back by tensorboard's own reader in the tests.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace zrt {

// CRC-32C (Castagnoli), and the masked form TFRecord stores.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);
uint32_t masked_crc32c(const void* data, size_t size);

class EventFileWriter {
 public:
  // Creates `dir` (and parents) and dir/events.out.tfevents.<unix seconds>.<host>.<pid>.
  // Throws zrt::Error naming the path when it cannot.
  explicit EventFileWriter(const std::string& dir);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  void add_scalar(const std::string& tag, double value, int64_t step);
  // Flushed records survive a crash of the process (a reader sees every complete record).
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& event);
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace zrt
