// Page-aligned host memory for O_DIRECT transfers, and the alignment arithmetic that goes with it.
#pragma once

#include <cstdint>

namespace zrt::aio {

// O_DIRECT needs the buffer address, the file offset and the length to be multiples of the
// device's logical block size; 4096 covers every common device (and the page size).
constexpr int64_t kIoAlignment = 4096;

// The smallest multiple of `a` (a power of two) not below n; n >= 0.
int64_t align_up(int64_t n, int64_t a = kIoAlignment);
inline bool is_aligned(int64_t n, int64_t a = kIoAlignment) { return n % a == 0; }
bool is_aligned(const void* p, int64_t a = kIoAlignment);

enum class BufferInit {
  kZeroed,         // every byte 0 (costs one pass over the memory)
  kUninitialized,  // whatever the allocator returns: for buffers that are read into first
};

// A move-only block of memory aligned to kIoAlignment. The allocation is padded to a multiple of
// kIoAlignment (capacity()), so a direct transfer of align_up(size()) bytes stays inside it; with
// kZeroed the padding is zeroed too. Allocation failure throws zrt::Error naming the size.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(int64_t bytes, BufferInit init = BufferInit::kZeroed);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  void* data() { return data_; }
  const void* data() const { return data_; }
  int64_t size() const { return size_; }          // bytes asked for
  int64_t capacity() const { return capacity_; }  // bytes allocated: align_up(size())
  bool empty() const { return size_ == 0; }

  template <typename T>
  T* as() {
    return static_cast<T*>(data_);
  }
  template <typename T>
  const T* as() const {
    return static_cast<const T*>(data_);
  }

 private:
  void* data_ = nullptr;
  int64_t size_ = 0;
  int64_t capacity_ = 0;
};

}  // namespace zrt::aio
