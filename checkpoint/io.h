// Byte streams of the checkpoint formats: a sequential ByteSink that writers produce into, and a
// bounded random-access ByteSource that readers parse from (a regular file via pread, or memory).
// Owns the bounds checks of every read: a read past the end is a CheckpointError naming the
// source, never a short buffer. Atomic file creation lives in storage.h, not here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

namespace zrt::ckpt {

class ByteSink {
 public:
  virtual ~ByteSink() = default;
  // Appends `size` bytes; throws CheckpointError on failure.
  virtual void write(const void* data, size_t size) = 0;
  virtual uint64_t bytes_written() const = 0;
  // Like write(), but the caller guarantees that `data` stays valid and unchanged until its next
  // sync_borrowed() call, so the sink may write it later, without copying (large tensor data).
  virtual void write_borrowed(const void* data, size_t size) { write(data, size); }
  // Returns once no borrowed pointer is used any more; throws a deferred write error.
  virtual void sync_borrowed() {}
};

// Collects everything in memory (tests, small files).
class StringSink : public ByteSink {
 public:
  void write(const void* data, size_t size) override {
    data_.append(static_cast<const char*>(data), size);
  }
  uint64_t bytes_written() const override { return data_.size(); }
  const std::string& data() const { return data_; }
  std::string take() { return std::move(data_); }

 private:
  std::string data_;
};

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual uint64_t size() const = 0;
  // Reads exactly `size` bytes at `offset`; throws CheckpointError naming the source when the
  // range is outside [0, size()) or the read fails.
  virtual void read_at(uint64_t offset, void* dst, size_t size) const = 0;
  // The file name used in error messages.
  virtual const std::string& name() const = 0;

  // read_at into a new string (`size` must already be bounded by the caller).
  std::string read_string(uint64_t offset, size_t size) const;
};

// A regular file opened read-only. Refuses anything else (FIFO, device, directory) before reading
// so that a FIFO cannot block the reader; symlinks are followed to a regular file.
class FileSource : public ByteSource {
 public:
  explicit FileSource(const std::string& path);
  ~FileSource() override;
  FileSource(const FileSource&) = delete;
  FileSource& operator=(const FileSource&) = delete;

  uint64_t size() const override { return size_; }
  void read_at(uint64_t offset, void* dst, size_t size) const override;
  const std::string& name() const override { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Bytes held in memory.
class MemorySource : public ByteSource {
 public:
  MemorySource(std::string bytes, std::string name)
      : bytes_(std::move(bytes)), name_(std::move(name)) {}
  uint64_t size() const override { return bytes_.size(); }
  void read_at(uint64_t offset, void* dst, size_t size) const override;
  const std::string& name() const override { return name_; }

 private:
  std::string bytes_;
  std::string name_;
};

// Throws CheckpointError unless [offset, offset + size) lies within [0, total).
void check_range(const std::string& name, uint64_t offset, uint64_t size, uint64_t total,
                 const char* what);

}  // namespace zrt::ckpt
