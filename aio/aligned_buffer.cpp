#include "aio/aligned_buffer.h"

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace zrt::aio {

int64_t align_up(int64_t n, int64_t a) {
  ZRT_INTERNAL_ASSERT(n >= 0 && a > 0 && (a & (a - 1)) == 0, "align_up(", n, ", ", a, ")");
  return (n + a - 1) & ~(a - 1);
}

bool is_aligned(const void* p, int64_t a) {
  return reinterpret_cast<std::uintptr_t>(p) % static_cast<std::uintptr_t>(a) == 0;
}

AlignedBuffer::AlignedBuffer(int64_t bytes, BufferInit init) {
  ZRT_CHECK(bytes >= 0, "AlignedBuffer: expected a size >= 0, got ", bytes);
  if (bytes == 0) return;
  const int64_t capacity = align_up(bytes);
  void* p = nullptr;
  const int rc =
      posix_memalign(&p, static_cast<size_t>(kIoAlignment), static_cast<size_t>(capacity));
  ZRT_CHECK(rc == 0, "cannot allocate ", bytes, " bytes aligned to ", kIoAlignment, ": ",
            std::strerror(rc));
  if (init == BufferInit::kZeroed) std::memset(p, 0, static_cast<size_t>(capacity));
  data_ = p;
  size_ = bytes;
  capacity_ = capacity;
}

AlignedBuffer::~AlignedBuffer() { std::free(data_); }

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      capacity_(std::exchange(other.capacity_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

}  // namespace zrt::aio
