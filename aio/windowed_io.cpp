#include "aio/windowed_io.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "aio/aligned_buffer.h"
#include "aio/io_engine.h"
#include "aio/swap_file.h"
#include "core/error.h"
#include "core/logging.h"
#include <sys/stat.h>
#include <unistd.h>

namespace zrt::aio {
namespace {

// The aligned windows covering bytes [offset, offset + n): fn(window_start, window_len, first,
// count), window_len a multiple of kIoAlignment of at most `window` bytes.
template <typename Fn>
void for_each_window(int64_t offset, int64_t n, int64_t window, Fn&& fn) {
  ZRT_INTERNAL_ASSERT(window >= kIoAlignment && is_aligned(window), "a window of ", window,
                      " bytes");
  int64_t pos = offset;
  const int64_t end = offset + n;
  while (pos < end) {
    const int64_t start = pos / kIoAlignment * kIoAlignment;
    const int64_t len = std::min(window, align_up(end) - start);
    const int64_t take = std::min(end, start + len) - pos;
    fn(start, len, pos - start, take);
    pos += take;
  }
}

int64_t window_bytes(const AlignedBuffer& window) {
  return window.capacity() / kIoAlignment * kIoAlignment;
}

}  // namespace

void read_range(IoEngine& engine, const SwapFile& file, int64_t offset, void* dst, int64_t bytes,
                AlignedBuffer& window) {
  auto* out = static_cast<char*>(dst);
  for_each_window(offset, bytes, window_bytes(window),
                  [&](int64_t start, int64_t len, int64_t first, int64_t take) {
                    engine.read(file, start, window.data(), len).wait();
                    std::memcpy(out, window.as<char>() + first, static_cast<size_t>(take));
                    out += take;
                  });
}

void write_range(IoEngine& engine, const SwapFile& file, int64_t offset, const void* src,
                 int64_t bytes, AlignedBuffer& window) {
  const auto* in = static_cast<const char*>(src);
  for_each_window(offset, bytes, window_bytes(window),
                  [&](int64_t start, int64_t len, int64_t first, int64_t take) {
                    if (first != 0 || take != len)
                      engine.read(file, start, window.data(), len).wait();
                    std::memcpy(window.as<char>() + first, in, static_cast<size_t>(take));
                    engine.write(file, start, window.data(), len).wait();
                    in += take;
                  });
}

std::string make_swap_folder(const std::string& parent, const std::string& kind, int rank,
                             const std::string& key) {
  struct stat st {};
  ZRT_CHECK(!parent.empty(), key, " is required with device \"nvme\"");
  if (::stat(parent.c_str(), &st) != 0 && errno == ENOENT) {
    // DeepSpeed makes the folder (and its parents) when it does not exist yet.
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    ZRT_CHECK(!ec, key, " ", parent, ": cannot create it: ", ec.message());
  }
  ZRT_CHECK(::stat(parent.c_str(), &st) == 0, key, " ", parent, ": ", std::strerror(errno));
  ZRT_CHECK(S_ISDIR(st.st_mode), key, " ", parent, " is not a folder");
  std::string pattern = parent + (parent.back() == '/' ? "" : "/") + "zerort-" + kind + "-rank" +
                        std::to_string(rank) + "-XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  ZRT_CHECK(::mkdtemp(buf.data()) != nullptr, key, " ", parent,
            ": cannot make this rank's swap folder: ", std::strerror(errno));
  return std::string(buf.data());
}

void remove_swap_folder(const std::string& folder) noexcept {
  if (!folder.empty() && ::rmdir(folder.c_str()) != 0 && errno != ENOENT) {
    ZRT_LOG_WARN("could not remove the swap folder ", folder, ": ", std::strerror(errno));
  }
}

}  // namespace zrt::aio
